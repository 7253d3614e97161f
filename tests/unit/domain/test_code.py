"""The code snapshot format's rules (gpupool.domain.code) and a job spec's ``code``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpupool.domain.code import digest_of, file_mode, is_ref, member_path, ref_of
from gpupool.domain.jobs import JobSpec

REF = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("name", "path"),
    [("a/b.py", "a/b.py"), ("./a//b.py", "a/b.py"), ("./", ""), (".", ""), ("a/./b", "a/b")],
)
def test_member_paths_are_normalised(name: str, path: str) -> None:
    assert member_path(name) == path


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("/etc/passwd", "an absolute path"),
        ("../x", "a '..' in its path"),
        ("a/../../x", "a '..' in its path"),
        ("x" * 5000, "a path longer than 4096 bytes"),
        ("/".join(["d"] * 300), "more than 256 directories deep"),
    ],
)
def test_member_paths_that_could_escape_are_refused(name: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        member_path(name)


def test_refs_name_a_sha256_in_lower_case_hex() -> None:
    assert is_ref(REF) and ref_of("ab" * 32) == REF and digest_of(REF) == "ab" * 32
    for bad in ("sha256:" + "AB" * 32, "sha256:abc", "md5:" + "ab" * 32, REF + "0", None, 7):
        assert not is_ref(bad)
    with pytest.raises(ValueError, match="not a code snapshot's name"):
        digest_of("sha256:abc")


def test_only_the_executable_bit_of_a_mode_is_kept() -> None:
    assert (file_mode(0o4770), file_mode(0o600), file_mode(0o100)) == (0o755, 0o644, 0o755)


def test_a_spec_takes_a_ref_but_not_a_ref_and_a_workdir() -> None:
    assert JobSpec(command=["x"], code=REF).code == REF
    with pytest.raises(ValidationError) as both:
        JobSpec(command=["x"], code=REF, workdir="/data/project")
    assert both.value.errors()[0]["type"] == "code_with_workdir"
    with pytest.raises(ValidationError, match="64 lower-case hex digits"):
        JobSpec(command=["x"], code="sha256:nothex")
