"""The control loop stops running jobs itself, with real processes: a preemption (injected
through ``decide``), a max runtime; and it notices checkpoints. Each user-visible step is
checked where a user meets it: the workload's SIGTERM handler, the job's status and events."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.domain.jobs import Reason
from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler.types import Clock, Decisions, HandOver, Preemption, Snapshot
from gpupool.services.platform import Platform
from tests.support.platform import make_settings, running_app, submit, wait_job
from tests.support.waiting import wait_for

# Attempt 1 records its checkpoint directory, traps SIGTERM (writes term-1, waits for the
# file named by argv[2] if given, exits 143) and sleeps; attempt 2 records and exits 0.
WORKLOAD = """
import os, pathlib, signal, sys, time
out, n = pathlib.Path(sys.argv[1]), os.environ["GPUPOOL_ATTEMPT"]
(out / f"checkpoint-dir-{n}").write_text(os.environ["GPUPOOL_CHECKPOINT_DIR"])
def stop(signum, frame):
    (out / f"term-{n}").write_text("TERM")
    while len(sys.argv) > 2 and not os.path.exists(sys.argv[2]):
        time.sleep(0.05)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
(out / f"running-{n}").write_text("")
if n == "1":
    time.sleep(600)
"""


class Preempter:
    """The real scheduler, plus one preemption of ``victim`` once ``fire`` is called; while
    ``holding``, the victim is not placed again (so that its PENDING state can be seen)."""

    def __init__(self) -> None:
        self.victim: int | None = None
        self.for_job = 0
        self.holding = True
        self.sent = False

    def fire(self, victim: int, for_job: int) -> None:
        self.victim, self.for_job = victim, for_job

    def __call__(
        self, snapshot: Snapshot, clock: Clock, state: SchedulerState, hand_over: HandOver | None
    ) -> Decisions:
        decisions = schedule(snapshot, clock, state, hand_over)
        decisions.preemptions = [p for p in decisions.preemptions if p.job_id != self.victim]
        running = {a.job_id for a in snapshot.allocations}
        if self.victim in running and not self.sent:
            message = f"job {self.for_job} needs the GPUs"
            decisions.preemptions.append(
                Preemption(self.victim, self.for_job, Reason.PREEMPTED, message)
            )
            self.sent = True
        if self.holding:
            decisions.placements = [p for p in decisions.placements if p.job_id != self.victim]
        return decisions


@pytest.fixture
def preempter() -> Preempter:
    return Preempter()


@pytest.fixture
def app(tmp_path: Path, preempter: Preempter) -> Iterator[tuple[TestClient, Platform]]:
    settings = make_settings(tmp_path / "data", checkpoint_scan_seconds=0.1)
    with running_app(settings, decide=preempter) as running:
        yield running


def workload(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-c", WORKLOAD, str(out), *extra]


def reasons(job: dict) -> list[str]:
    return [event["reason"] for event in job["events"]]


def event(job: dict, reason: str) -> dict:
    return next(e for e in job["events"] if e["reason"] == reason)


def test_a_preempted_job_gets_sigterm_is_requeued_and_resumes_from_its_checkpoints(
    app: tuple[TestClient, Platform], preempter: Preempter, exchange: Path
) -> None:
    client, platform = app
    victim = submit(
        client,
        workload(exchange),
        resources={"gpus": 1},
        grace_period_seconds=30,
        workdir=str(exchange),
    )
    wait_for(lambda: (exchange / "running-1").exists(), 60, "attempt 1 to run")
    waiter = submit(client, ["true"], resources={"gpus": 4})
    preempter.fire(victim["id"], waiter["id"])
    platform.loop.wake()

    wait_for(lambda: (exchange / "term-1").exists(), 60, "SIGTERM to reach the workload")
    requeued = wait_for(lambda: _requeued(client, victim["id"]), 60, "the victim to be requeued")
    assert requeued["status"] == "pending" and requeued["preemptions"] == 1
    assert requeued["attained_gpu_seconds"] > 0 and requeued["queued_at"] is not None
    assert requeued["attempts_detail"][0]["stop_reason"] == "preempted"
    assert f"job {waiter['id']}" in event(requeued, "Preempted")["message"]
    assert event(requeued, "Requeued")["message"] == (
        "requeued after preemption; resumes from $GPUPOOL_CHECKPOINT_DIR"
    )
    assert reasons(requeued).index("Preempted") < reasons(requeued).index("Requeued")

    preempter.holding = False
    platform.loop.wake()
    done = wait_job(client, victim["id"], timeout=60)
    assert (done["status"], done["attempts"]) == ("succeeded", 2)
    first, second = ((exchange / f"checkpoint-dir-{n}").read_text() for n in (1, 2))
    assert first == second and Path(first).is_dir()
    second = done["attempts_detail"][1]  # attained: both attempts' GPU time
    ran = second["ended_at"] - second["started_at"]
    assert done["attained_gpu_seconds"] == pytest.approx(requeued["attained_gpu_seconds"] + ran)


def test_a_cancel_wins_over_a_preemption(
    app: tuple[TestClient, Platform], preempter: Preempter, exchange: Path
) -> None:
    client, platform = app
    release = exchange / "release"
    job = submit(
        client, workload(exchange, str(release)), grace_period_seconds=60, workdir=str(exchange)
    )
    seen = lambda: client.get(f"/api/v1/jobs/{job['id']}").json()  # noqa: E731
    wait_for(lambda: (exchange / "running-1").exists(), 60, "attempt 1 to run", about=seen)
    preempter.fire(job["id"], job["id"])
    platform.loop.wake()
    wait_for(lambda: (exchange / "term-1").exists(), 60, "SIGTERM to reach the workload")
    assert client.post(f"/api/v1/jobs/{job['id']}/cancel").status_code == 200
    release.touch()
    done = wait_job(client, job["id"], timeout=60)
    assert done["status"] == "cancelled" and done["attempts"] == 1
    assert "Requeued" not in reasons(done)


def test_a_job_past_its_max_runtime_is_stopped_and_fails(
    app: tuple[TestClient, Platform], exchange: Path
) -> None:
    client, _platform = app
    job = submit(
        client,
        workload(exchange),
        max_runtime_seconds=1,
        grace_period_seconds=30,
        workdir=str(exchange),
    )
    done = wait_job(client, job["id"], timeout=60)
    assert (exchange / "term-1").exists(), "the workload got SIGTERM, not SIGKILL"
    assert (done["status"], done["reason"]) == ("failed", "MaxRuntimeExceeded")
    assert "max runtime of 1s" in done["message"]
    assert done["attempts_detail"][0]["stop_reason"] == "max_runtime"
    assert "max runtime of 1s" in event(done, "MaxRuntimeExceeded")["message"]


def test_a_file_written_into_the_checkpoint_directory_shows_as_checkpoint_at(
    app: tuple[TestClient, Platform], exchange: Path
) -> None:
    client, _platform = app
    release = exchange / "release"
    code = (
        "import os, pathlib, sys, time\n"
        "path = pathlib.Path(os.environ['GPUPOOL_CHECKPOINT_DIR']) / 'step-100.pt'\n"
        "path.write_bytes(b'weights')\n"
        "pathlib.Path(sys.argv[1]).write_text(str(path))\n"
        "while not os.path.exists(sys.argv[2]): time.sleep(0.05)\n"
    )
    written = exchange / "written"
    command = [sys.executable, "-c", code, str(written), str(release)]
    job = submit(client, command, workdir=str(exchange))
    seen = wait_for(lambda: _checkpointed(client, job["id"]), 60, "checkpoint_at to be set")
    assert seen["checkpoint_at"] == os.stat(written.read_text()).st_mtime
    assert "Checkpointed" in reasons(seen)
    release.touch()
    assert wait_job(client, job["id"], timeout=60)["status"] == "succeeded"


def _requeued(client: TestClient, job_id: int) -> dict | None:
    job = client.get(f"/api/v1/jobs/{job_id}").json()
    return job if job["status"] == "pending" and job["preemptions"] else None


def _checkpointed(client: TestClient, job_id: int) -> dict | None:
    job = client.get(f"/api/v1/jobs/{job_id}").json()
    return job if job["checkpoint_at"] is not None else None
