"""The distributed-training examples (examples/ddp_train.py, examples/mpi_allreduce.py): where
they are, what they print, and what running them on this machine's loopback needs.

Shared by the tests of the examples alone and the tests that run them through gpupool.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DDP_EXAMPLE = EXAMPLES / "ddp_train.py"
MPI_EXAMPLE = EXAMPLES / "mpi_allreduce.py"

LOSS = re.compile(r"^loss (\d+) (\S+)$", re.MULTILINE)
WEIGHTS = re.compile(r"^weights ([0-9a-f]{64})$", re.MULTILINE)
ALLREDUCE = re.compile(r"^allreduce (\d+) size (\d+)$", re.MULTILINE)
HOSTS = re.compile(r"^hosts (\S+)$", re.MULTILINE)


def _open_mpi_version() -> str | None:
    """The first line of `mpirun --version` when mpirun is Open MPI's, else None."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return None
    shown = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=60)
    first = (shown.stdout or shown.stderr).splitlines()[:1]
    return first[0] if first and "Open MPI" in first[0] else None


needs_torch = pytest.mark.skipif(
    find_spec("torch") is None,
    reason="torch is not installed: make test installs the 'distributed' extra "
    "(pip install -e '.[dev,distributed]': torch==2.13.0, the CPU build)",
)
needs_open_mpi = pytest.mark.skipif(
    find_spec("mpi4py") is None or _open_mpi_version() is None,
    reason="mpi4py or Open MPI's mpirun is missing: make test installs mpi4py (the "
    "'distributed' extra) and, as root, Debian's openmpi-bin",
)


@dataclass(frozen=True)
class DdpOutput:
    """What examples/ddp_train.py printed: rank 0's losses by step, every rank's digest."""

    losses: list[float]
    digests: list[str]


def parse_ddp(text: str) -> DdpOutput:
    """Reads the `loss STEP VALUE` and `weights SHA256` lines out of the ranks' output."""
    by_step = {int(step): float(value) for step, value in LOSS.findall(text)}
    return DdpOutput([by_step[s] for s in sorted(by_step)], WEIGHTS.findall(text))


def parse_allreduce(text: str) -> tuple[int, int] | None:
    """(sum, size) from rank 0's `allreduce SUM size N` line, or None when it is missing."""
    found = ALLREDUCE.search(text)
    return (int(found[1]), int(found[2])) if found else None


def gloo_loopback_env() -> dict[str, str]:
    """Keeps gloo's sockets on loopback, whatever this host's name resolves to."""
    return {"GLOO_SOCKET_IFNAME": "lo"}


def open_mpi_loopback_env() -> dict[str, str]:
    """The Open MPI settings for ranks on 127.0.0.1 only.

    Open MPI's TCP transport leaves out 127.0.0.0/8 unless told otherwise, so ranks that it
    believes are on different hosts cannot reach each other on loopback; its daemons' own
    channel would take the machine's external address. mpirun passes these on to the daemons
    it starts through the rsh agent (as `-mca NAME VALUE` arguments). As root it refuses to
    start without the two ALLOW_RUN_AS_ROOT variables.
    """
    env = {"OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo"}
    if os.geteuid() == 0:
        env |= {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return env
