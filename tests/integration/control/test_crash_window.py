"""A crash between recording an attempt and recording its launch: at most once, never lost."""

from __future__ import annotations

import sys
from pathlib import Path

import gpupool.services.cluster._nodes as nodes
from gpupool.domain.jobs import JobSpec, Role
from gpupool.platform import open_platform
from gpupool.scheduler import schedule
from gpupool.services import jobs
from gpupool.services.core import Principal
from gpupool.services.scheduling._snapshots import build_snapshot
from gpupool.settings import Settings
from tests.support.platform import make_settings, running_app, wait_job

ADMIN = Principal(user_id=1, name="admin", role=Role.ADMIN, team_ids=frozenset({1}))


def crash_after_recording(
    settings: Settings, command: list[str], workdir: Path, launch: bool
) -> int:
    """Submit, record the attempt exactly as the control loop does, maybe launch, then stop."""
    platform = open_platform(settings)
    with platform.db.session() as session:
        spec = JobSpec(command=command, resources={"gpus": 1}, workdir=str(workdir))
        job = jobs.submit(session, ADMIN, spec, nodes.capacities(session), platform.clock.now())
    with platform.db.reader() as session:
        placement = schedule(build_snapshot(session), platform.clock).placements[0]
    [claimed] = platform.control.launch.claim([placement])  # the launch pipeline's claim
    if launch:
        platform.executor.start(claimed.task)  # launched, but the server dies before recording it
    platform.db.dispose()
    return job.id


def appender(marker: Path) -> list[str]:
    return [sys.executable, "-c", f"open({str(marker)!r}, 'a').write('ran\\n')"]


def test_an_attempt_recorded_but_never_launched_is_requeued_and_runs_once(
    tmp_path: Path, exchange: Path
) -> None:
    settings = make_settings(tmp_path / "data")
    marker = exchange / "runs.txt"
    job_id = crash_after_recording(settings, appender(marker), exchange, launch=False)
    with running_app(settings) as (client, _platform):
        done = wait_job(client, job_id)
    assert done["status"] == "succeeded" and done["attempts"] == 2
    assert "Requeued" in [e["reason"] for e in done["events"]]
    assert marker.read_text() == "ran\n"


def test_an_attempt_launched_but_not_recorded_is_recovered_not_relaunched(
    tmp_path: Path, exchange: Path
) -> None:
    settings = make_settings(tmp_path / "data")
    marker = exchange / "runs.txt"
    job_id = crash_after_recording(settings, appender(marker), exchange, launch=True)
    with running_app(settings) as (client, _platform):
        done = wait_job(client, job_id)
    assert done["status"] == "succeeded" and done["attempts"] == 1
    assert marker.read_text() == "ran\n"
