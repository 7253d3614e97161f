"""Jobs over several nodes through the API in-process: launcher mistakes refused with a stable
code, and one rank's lines read back from a log whose lines carry rank prefixes."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, running_app, submit, wait_for, wait_job

# what a merged log of a distributed job holds (a one-machine job writes it itself here)
LINES = "[rank 0] a\n[rank 1] b\n[rank 0] c\n[task 1] d\nplain\n[task 1] [rank 1] e\n[rank 1] f"
PRINT_LINES = [sys.executable, "-c", f"import sys; sys.stdout.write({LINES!r})"]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    database = f"sqlite:///{tmp_path / 'gang.db'}"
    with running_app(make_settings(tmp_path / "data", database)) as (client, _platform):
        yield client


@pytest.fixture
def printed(client: TestClient) -> int:
    """A finished job whose log holds LINES."""
    job = submit(client, PRINT_LINES)
    assert wait_job(client, job["id"])["status"] == "succeeded"
    return job["id"]


# -- submitting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"launcher": "mpi", "resources": {"gpus": 0.5}}, "whole GPUs, not 0.5"),
        ({"launcher_mode": "torchrun"}, "launcher_mode is for a job with a launcher"),
        ({"launcher": "mpi", "launcher_mode": "torchrun"}, "launcher mpi: use one of mpirun"),
        ({"launcher": "horovod"}, "'torch', 'tensorflow' or 'mpi'"),
        ({"launcher": "torch", "launcher_mode": "ddp"}, "'per-gpu', 'torchrun', 'per-node'"),
        ({"procs_per_node": 2}, "add one (gpupool run --launcher torch"),
        ({"launcher": "torch", "procs_per_node": 0}, "greater than or equal to 1"),
        ({"launcher": "tensorflow", "procs_per_node": 2}, "one process per node"),
        (
            {"launcher": "torch", "procs_per_node": 3, "resources": {"gpus": 2}},
            "divisor of 2 (1, 2) or a multiple of it",
        ),
        ({"launcher": "mpi", "launcher_mode": "mpirun"}, "starts with mpirun"),
    ],
)
def test_a_launcher_mistake_is_a_422_invalid_launcher_that_says_what_to_do(
    client: TestClient, fields: dict[str, Any], says: str
) -> None:
    answer = client.post("/api/v1/jobs", json={"command": ["python", "t.py"], **fields})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_launcher"
    assert says in error["message"]
    assert error["details"]["fields"][0]["message"] in error["message"]


@pytest.mark.parametrize(
    "fields",
    [
        {"nodes": 2, "launcher": "torch", "launcher_mode": "per-node", "procs_per_node": 4},
        {"nodes": 3, "launcher": "tensorflow", "launcher_mode": "chief", "procs_per_node": 1},
        {"nodes": 2, "launcher": "mpi", "launcher_mode": "mpirun", "procs_per_node": 2},
    ],
)
def test_a_kubeflow_shaped_launcher_is_kept_in_the_spec(
    client: TestClient, fields: dict[str, Any]
) -> None:
    command = ["mpirun", "-n", "4", "./pi"] if fields["launcher"] == "mpi" else ["torchrun", "t.py"]
    job = submit(client, command, **fields)
    spec = client.get(f"/api/v1/jobs/{job['id']}").json()["spec"]
    assert {name: spec[name] for name in fields} == fields
    client.post(f"/api/v1/jobs/{job['id']}/cancel")


def test_a_bad_node_count_is_a_422_naming_the_field(client: TestClient) -> None:
    for nodes in (0, 257, "two"):
        answer = client.post("/api/v1/jobs", json={"command": ["true"], "nodes": nodes})
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["details"]["fields"][0]["field"] == "nodes"


def test_a_job_over_two_nodes_is_queued_with_its_gang_fields(client: TestClient) -> None:
    fields = {"nodes": 2, "launcher": "torch", "launcher_mode": "torchrun", "retries": 1}
    job = submit(client, ["python", "train.py"], resources={"gpus": 1}, **fields)
    spec = client.get(f"/api/v1/jobs/{job['id']}").json()["spec"]
    assert {name: spec[name] for name in fields} == fields
    assert spec["allow_cross_fabric"] is False
    assert job["status"] == "pending"
    client.post(f"/api/v1/jobs/{job['id']}/cancel")


# -- one rank's lines ------------------------------------------------------------------------


def read(client: TestClient, job_id: int, **params: Any) -> dict[str, Any]:
    answer = client.get(f"/api/v1/jobs/{job_id}/logs", params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()


def read_all(client: TestClient, job_id: int, **params: Any) -> tuple[str, list[int]]:
    """Every chunk's text from offset 0 until next_offset stops moving; the offsets read."""
    text, offsets, offset = "", [], 0
    while True:
        chunk = read(client, job_id, offset=offset, **params)
        assert chunk["offset"] == offset
        if chunk["next_offset"] == offset:
            return text, offsets
        text, offset = text + chunk["text"], chunk["next_offset"]
        offsets.append(offset)


def test_a_rank_or_a_task_reads_its_own_lines_without_their_prefix(
    client: TestClient, printed: int
) -> None:
    assert read(client, printed, rank=0)["text"] == "a\nc\n"
    assert read_all(client, printed, rank=1)[0] == "b\n[task 1] e\nf"
    assert read_all(client, printed, task=1)[0] == "d\n[rank 1] e\n"
    assert read_all(client, printed, rank=7)[0] == ""
    assert read(client, printed)["text"] == LINES


def test_filtered_offsets_are_those_of_the_whole_log_and_cut_at_whole_lines(
    client: TestClient, printed: int
) -> None:
    size = len(LINES.encode())
    text, offsets = read_all(client, printed, rank=1, limit=12)
    assert text == "b\n[task 1] e\nf"
    assert offsets[-1] == size  # read to the end of the whole log
    ends = {i + 1 for i, char in enumerate(LINES) if char == "\n"} | {size}
    assert set(offsets) <= ends  # every chunk ends where a line does
    assert read(client, printed, rank=1, offset=size)["complete"] is True


def test_a_rank_and_a_task_at_once_or_a_negative_rank_is_refused(
    client: TestClient, printed: int
) -> None:
    both = client.get(f"/api/v1/jobs/{printed}/logs", params={"rank": 0, "task": 0})
    assert both.status_code == 422
    assert both.json()["error"]["code"] == "invalid_request"
    assert "not both" in both.json()["error"]["message"]
    negative = client.get(f"/api/v1/jobs/{printed}/logs", params={"rank": -1})
    assert negative.status_code == 422
    assert negative.json()["error"]["details"]["fields"][0]["field"] == "query.rank"


def test_a_line_still_being_written_waits_for_its_end_or_the_job_s_end(
    client: TestClient, exchange: Path
) -> None:
    script = (
        "import os, sys, time\n"
        "sys.stdout.write('[rank 1] whole\\n[rank 1] part'); sys.stdout.flush()\n"
        "while not os.path.exists('release'): time.sleep(0.05)\n"
    )
    job = submit(client, [sys.executable, "-c", script], workdir=str(exchange))
    whole = len(b"[rank 1] whole\n")

    def first_line_read() -> dict[str, Any] | None:
        chunk = read(client, job["id"], rank=1)
        return chunk if chunk["next_offset"] > 0 else None

    chunk = wait_for(first_line_read, 30, "the first line of rank 1")
    assert (chunk["text"], chunk["next_offset"]) == ("whole\n", whole)
    waiting = read(client, job["id"], rank=1, offset=whole)
    assert (waiting["text"], waiting["next_offset"], waiting["complete"]) == ("", whole, False)
    (exchange / "release").touch()
    assert wait_job(client, job["id"])["status"] == "succeeded"
    last = read(client, job["id"], rank=1, offset=whole)
    assert (last["text"], last["next_offset"]) == ("part", len(b"[rank 1] whole\n[rank 1] part"))


def test_the_live_stream_of_one_rank_moves_over_the_lines_it_leaves_out(
    client: TestClient, printed: int
) -> None:
    events = stream(client, printed, rank=1)
    logs = [data for name, data in events if name == "log"]
    assert "".join(data["text"] for data in logs) == "b\n[task 1] e\nf"
    assert all(a["next_offset"] == b["offset"] for a, b in zip(logs, logs[1:], strict=False))
    assert events[-1] == ("end", {"attempt": 1, "next_offset": len(LINES.encode())})


def stream(client: TestClient, job_id: int, **params: Any) -> list[tuple[str, Any]]:
    """The Server-Sent Events of a finished job's log stream, as (name, data)."""
    url = f"/api/v1/jobs/{job_id}/logs/stream"
    with client.stream("GET", url, params=params) as answer:
        assert answer.status_code == 200
        body = "".join(answer.iter_text())
    events = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events
