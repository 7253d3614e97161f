"""The site's policy settings (GPUPOOL_MIN_RUNTIME_SECONDS, GPUPOOL_PACKING,
GPUPOOL_LOCALITY, the fair-share half-life) reach every snapshot the control loop schedules
from; bad values stop the server with a clear message."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.main import app as cli
from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler.types import Clock, Decisions, HandOver, Snapshot
from tests.support.platform import make_settings, running_app, submit, wait_job


class Recorder:
    def __init__(self) -> None:
        self.policies = []
        self.states: list[SchedulerState] = []

    def __call__(
        self, snapshot: Snapshot, clock: Clock, state: SchedulerState, hand_over: HandOver | None
    ) -> Decisions:
        self.policies.append(snapshot.policy)
        self.states.append(state)
        return schedule(snapshot, clock, state, hand_over)


def test_the_loop_schedules_with_the_site_settings(tmp_path: Path) -> None:
    recorder = Recorder()
    settings = make_settings(
        tmp_path / "data",
        min_runtime_seconds=900,
        packing="best-fit",
        fair_share_half_life_seconds=86400,
        locality=False,
    )
    with running_app(settings, decide=recorder) as (client, platform):
        job = submit(client, ["true"], resources={"gpus": 1})
        platform.loop.wake()
        assert wait_job(client, job["id"])["status"] == "succeeded"
    assert recorder.policies
    policy = recorder.policies[-1]
    assert (policy.min_runtime, policy.packing, policy.usage_half_life) == (900, "best-fit", 86400)
    assert policy.locality is False
    assert policy.order == DEFAULT_POLICY.order and policy.explain
    # the loop owns one scheduler state: each cycle hands on what it keeps to the next
    assert all(state is recorder.states[0] for state in recorder.states)
    assert recorder.states[0].capacity is not None


def test_the_defaults_are_the_products() -> None:
    assert make_settings(Path("/nonexistent")).policy() == DEFAULT_POLICY


def test_a_bad_policy_setting_stops_the_server_with_what_to_fix(tmp_path: Path) -> None:
    env = {
        "GPUPOOL_DATA_DIR": str(tmp_path / "data"),
        "GPUPOOL_PACKING": "worst-fit",
        "GPUPOOL_MIN_RUNTIME_SECONDS": "-1",
    }
    result = CliRunner().invoke(cli, ["server"], env=env)
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "error [bad_setting]:" in text
    assert "GPUPOOL_PACKING: Input should be 'fgd' or 'best-fit'" in text
    assert "GPUPOOL_MIN_RUNTIME_SECONDS: Input should be greater than or equal to 0" in text
