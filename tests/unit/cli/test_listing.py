"""`gpupool ls` names a notebook's or a deployment replica's job by its kind; a batch job, as
before (and an older server's answer without a kind, as a batch job). A launcher is named
with its mode and processes per node."""

from __future__ import annotations

import pytest

from gpupool.cli.listing import launcher_text, name_text


def test_a_job_that_is_not_a_batch_job_shows_its_kind() -> None:
    assert name_text({"name": "lab", "kind": "notebook"}) == "lab (notebook)"
    assert name_text({"name": None, "kind": "replica"}) == "- (replica)"
    assert name_text({"name": "train", "kind": "job"}) == "train"
    assert name_text({"name": "train"}) == "train"


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"launcher": "torch"}, "torch, one process per GPU"),
        ({"launcher": "torch", "launcher_mode": "per-gpu"}, "torch, one process per GPU"),
        ({"launcher": "torch", "procs_per_node": 4}, "torch, 4 processes per node"),
        ({"launcher": "torch", "launcher_mode": "per-node"}, "torch, the command once per node"),
        (
            {"launcher": "tensorflow", "launcher_mode": "chief"},
            "tensorflow, the first node the chief",
        ),
        (
            {"launcher": "mpi", "launcher_mode": "mpirun", "procs_per_node": 2},
            "mpi, the command's own mpirun, 2 per node",
        ),
        ({}, "-"),
    ],
)
def test_a_launcher_is_named_with_its_mode_and_processes(fields: dict, text: str) -> None:
    assert launcher_text(fields) == text
