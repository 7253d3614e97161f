"""A task of several ranks under the real runner, unsandboxed and in its sandbox: the runner
starts ``gpupool.runner.ranks`` as the workload, and its stop reaches every rank once."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from runner_harness import PYTHON, RunnerHarness, sandbox_policy

import gpupool

# gpupool's own package, shown in the sandbox as the executor shows it (installed editable)
PACKAGE_ROOT = str(Path(gpupool.__file__).resolve().parents[1])

RANK = """
import os, signal, sys, time
def on_term(signum, frame):
    # os.write, not print: the signal may land while the main thread prints "ready"
    os.write(1, b"got SIGTERM\\n")
    time.sleep(0.2)  # a second SIGTERM meanwhile would print again
    sys.exit(7 if os.environ["RANK"] == "1" else 0)
signal.signal(signal.SIGTERM, on_term)
print(open("hostfile").read().strip(), "ready", flush=True)
time.sleep(600)
"""


def start_ranks(harness: RunnerHarness):  # noqa: ANN201 - the runner's Popen
    processes = [{"argv": [PYTHON, "-c", RANK], "env": {"RANK": str(r)}, "rank": r} for r in (0, 1)]
    plan = {"processes": processes, "files": {"hostfile": "gpupool-task-0 slots=2\n"}}
    (harness.work / "plan.json").write_text(json.dumps(plan))
    command = [PYTHON, "-m", "gpupool.runner.ranks", str(harness.work / "plan.json")]
    spec: dict[str, object] = {"workdir": str(harness.work)}
    if harness.sandboxed:
        policy = sandbox_policy(harness.root)
        spec["sandbox"] = {**policy, "readonly": [*policy["readonly"], PACKAGE_ROOT]}
    harness.write_spec(command, **spec)
    return harness.spawn()


def test_a_stop_reaches_every_rank_once_and_the_first_failure_is_recorded(
    harness: RunnerHarness,
) -> None:
    proc = start_ranks(harness)
    for r in (0, 1):
        harness.wait_for_log(f"[rank {r}] gpupool-task-0 slots=2 ready\n")
    proc.send_signal(signal.SIGTERM)
    assert harness.wait_for_exit(proc) == 0
    log = harness.log()
    assert log.count("[rank 0] got SIGTERM\n") == 1
    assert log.count("[rank 1] got SIGTERM\n") == 1
    assert harness.state()["exit_code"] == 7, log
