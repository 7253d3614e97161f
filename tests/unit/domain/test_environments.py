"""The rules of environments' names, ids and references, and the requirements gpupool takes
from a requirements file, a pyproject.toml and a uv.lock (and the ones it refuses)."""

from __future__ import annotations

import pytest

from gpupool.domain.environments import (
    EnvironmentCreate,
    SourceKind,
    env_id,
    packages_of,
    parse_ref,
    prefix_id,
    short,
)
from gpupool.errors import InvalidEnvironment
from gpupool.services.environments._resolve import requirements_of

LOCK = "alpha==2.0 \\\n    --hash=sha256:aa\nbeta==0.1 \\\n    --hash=sha256:bb\n"


def test_an_id_is_the_digest_of_lock_python_and_platform() -> None:
    one = env_id(LOCK, "3.11", "x86_64-manylinux_2_36")
    assert one == env_id(LOCK, "3.11", "x86_64-manylinux_2_36")
    assert one.startswith("sha256:") and len(one) == 71
    assert one != env_id(LOCK, "3.12", "x86_64-manylinux_2_36")
    assert one != env_id(LOCK, "3.11", "aarch64-manylinux_2_36")
    assert one != env_id(LOCK + "gamma==1.0\n", "3.11", "x86_64-manylinux_2_36")
    assert prefix_id("/opt/conda") != prefix_id("/opt/conda2")
    assert short(one) == one[7:19]


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("torch", ("torch", None)),
        ("torch-2.4_cpu", ("torch-2.4_cpu", None)),
        ("torch@3f9a1c2b", ("torch", "3f9a1c2b")),
        ("torch@sha256:3F9A1C2B", ("torch", "3f9a1c2b")),
        ("t@" + "a" * 64, ("t", "a" * 64)),
    ],
)
def test_a_reference_is_a_name_and_maybe_an_id(ref: str, expected: tuple) -> None:
    assert parse_ref(ref) == expected


@pytest.mark.parametrize(
    "ref", ["Torch", "-x", "", "a b", "torch@3f9a", "torch@zzzzzzzz", "t@" + "a" * 65, "x" * 64]
)
def test_a_bad_reference_says_what_is_wrong(ref: str) -> None:
    with pytest.raises(ValueError):
        parse_ref(ref)


def test_the_packages_of_a_lock_are_its_pins() -> None:
    assert packages_of(LOCK) == ["alpha==2.0", "beta==0.1"]


def test_a_body_gives_exactly_one_source() -> None:
    assert EnvironmentCreate(name="a", requirements="x").kind is SourceKind.REQUIREMENTS
    assert EnvironmentCreate(name="a", lock="x").kind is SourceKind.LOCK
    with pytest.raises(ValueError):
        EnvironmentCreate(name="a")
    with pytest.raises(ValueError):
        EnvironmentCreate(name="a", requirements="x", pyproject="y")


def test_requirements_are_names_and_ranges() -> None:
    text = "# a comment\nnumpy>=1.26  # inline\n\nscipy ==1.13.*\ntorch[cpu]; python_version>'3'\n"
    found = requirements_of(SourceKind.REQUIREMENTS, text)
    assert found == ["numpy>=1.26", "scipy==1.13.*", 'torch[cpu]; python_version > "3"']


@pytest.mark.parametrize(
    "text",
    [
        "-e .",
        "-r other.txt",
        "--index-url http://127.0.0.1/simple",
        "numpy @ https://example.invalid/numpy.whl",
        "numpy @ file:///etc/passwd",
        "./local/package",
        "numpy >= = 1",
        "",
    ],
)
def test_what_is_not_a_plain_requirement_is_refused(text: str) -> None:
    with pytest.raises(InvalidEnvironment):
        requirements_of(SourceKind.REQUIREMENTS, text)


def test_a_pyproject_gives_its_project_dependencies() -> None:
    text = '[project]\nname = "x"\ndependencies = ["numpy>=1.26", "pandas"]\n'
    assert requirements_of(SourceKind.PYPROJECT, text) == ["numpy>=1.26", "pandas"]
    for bad in (
        "[project]\nname = 'x'\n",
        "not toml [",
        '[project]\ndependencies = ["x @ file:///y"]',
    ):
        with pytest.raises(InvalidEnvironment):
            requirements_of(SourceKind.PYPROJECT, bad)


def test_a_uv_lock_gives_its_registry_packages_at_their_versions() -> None:
    text = (
        'version = 1\n[[package]]\nname = "app"\nversion = "0.1"\nsource = { virtual = "." }\n'
        '[[package]]\nname = "numpy"\nversion = "2.1.0"\n'
        'source = { registry = "https://pypi.org/simple" }\n'
    )
    assert requirements_of(SourceKind.LOCK, text) == ["numpy==2.1.0"]
    git = text + '[[package]]\nname = "x"\nversion = "1"\nsource = { git = "https://h/x" }\n'
    with pytest.raises(InvalidEnvironment, match="git source"):
        requirements_of(SourceKind.LOCK, git)
