"""Fixtures of the unit tests: the real captures (nvidia-smi, sysfs, RDMA tools) in the sibling
``shared`` checkout, read by the discovery and domain tests."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CAPTURES = REPO_ROOT / ".." / "shared" / "data" / "captures"


@pytest.fixture(scope="session")
def captures() -> Path:
    """The folder of real nvidia-smi / sysfs captures, read in place (never copied)."""
    if not (CAPTURES / "SOURCES.md").is_file():
        pytest.skip(f"the real captures folder {CAPTURES.resolve()} is absent (../shared/data)")
    return CAPTURES.resolve()


def capture_section(path: Path, command_prefix: str) -> str:
    """Return the raw output under the first ``# $ <command>`` header of an exporter capture."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"# $ {command_prefix}"))
    body: list[str] = []
    for line in lines[start + 2 :]:  # skip the command line and the closing ##### rule
        if line.startswith("#####"):
            break
        body.append(line)
    return "\n".join(body)


@pytest.fixture()
def section():
    """``section(path, command_prefix)`` -> the raw output of that command in the capture."""
    return capture_section
