"""spec.json (runner/wire.py): what the executor writes, the runner reads back, and a spec
an earlier server wrote (a running attempt re-adopted after a restart) reads the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpupool.runner import wire
from gpupool.runner.layout import SPEC_FILE
from gpupool.runner.wire import FencePolicy, NetworkPolicy, RunnerSpec, SpecError, load_spec

# A spec as the server wrote it before runner/wire.py existed (executors/local.py's dict,
# with executors/isolation.py's parts): field for field, what a running attempt holds.
EARLIER = {
    "workspace": None,
    "version": 1,
    "job_id": 7,
    "attempt": 2,
    "command": ["python", "train.py"],
    "env": {"PATH": "/usr/bin"},
    "workdir": None,
    "gpu_uuids": ["GPU-a"],
    "log_limit_bytes": 1024,
    "stop_grace_seconds": 5.0,
    "checkpoint_dir": "/data/jobs/7/checkpoints",
    "output_dir": "/data/jobs/7/outputs",
    "notify_fifo": "/data/jobs/.notify",
    "protected": ["/data"],
    "limits": {"cpus": 2.0, "memory_bytes": 2**30, "pids_max": 512},
    "gpu_shares": {"GPU-a": 0.5},
    "mps_pipe_dir": "/tmp/nvidia-mps",
    "gpu_sampler": "nvml",
    "account": {"uid": 1001, "gid": 1001, "groups": []},
    "gpu_memory": {"limits": {"GPU-a": 2**32}, "sampler": "nvml", "grace_seconds": 3.0},
    "sandbox": {
        "bwrap": "/usr/bin/bwrap",
        "setpriv": "/usr/bin/setpriv",
        "readonly": ["/usr"],
        "readwrite": [],
        "hidden": ["/data"],
        "devices": [["/dev/nvidia0", "/dev/nvidia0"]],
        "network": {"mode": "isolated", "egress": None, "port": 8000, "api": None},
    },
    "code_dir": "/data/jobs/7/code",
}


def written() -> dict[str, object]:
    """EARLIER, as the writer says it today."""
    network = wire.network_json(isolated=True, port=8000)
    sandbox = wire.sandbox_json(
        bwrap="/usr/bin/bwrap",
        setpriv="/usr/bin/setpriv",
        readonly=["/usr"],
        readwrite=[],
        hidden=["/data"],
        devices=[["/dev/nvidia0", "/dev/nvidia0"]],
        network=network,
    )
    tenancy = wire.tenancy_json(
        protected=["/data"],
        limits=wire.limits_json(2.0, 2**30, 512),
        gpu_shares={"GPU-a": 0.5},
        mps_pipe_dir="/tmp/nvidia-mps",
        gpu_sampler="nvml",
        account={"uid": 1001, "gid": 1001, "groups": []},
        gpu_memory=wire.gpu_memory_json({"GPU-a": 2**32}, "nvml", 3.0),
        sandbox=sandbox,
    )
    return wire.spec_json(
        job_id=7,
        attempt=2,
        command=["python", "train.py"],
        env={"PATH": "/usr/bin"},
        workdir=None,
        gpu_uuids=["GPU-a"],
        log_limit_bytes=1024,
        stop_grace_seconds=5.0,
        checkpoint_dir="/data/jobs/7/checkpoints",
        output_dir="/data/jobs/7/outputs",
        notify_fifo="/data/jobs/.notify",
        code_dir="/data/jobs/7/code",
        tenancy=tenancy,
    )


def test_the_writer_writes_what_an_earlier_server_wrote() -> None:
    assert written() == EARLIER


def test_an_earlier_spec_reads_back_whole(tmp_path: Path) -> None:
    (tmp_path / SPEC_FILE).write_text(json.dumps(EARLIER))
    spec = load_spec(str(tmp_path))
    assert (spec.job_id, spec.attempt, spec.command) == (7, 2, ["python", "train.py"])
    assert spec.cwd() == "/data/jobs/7/code" and spec.account == EARLIER["account"]
    assert (spec.cpus, spec.memory_bytes, spec.pids_max) == (2.0, 2**30, 512)
    assert spec.gpu_memory == {"limits": {"GPU-a": 2**32}, "sampler": "nvml", "grace_seconds": 3.0}
    assert spec.sandbox is not None and spec.sandbox.devices == [("/dev/nvidia0", "/dev/nvidia0")]
    assert spec.sandbox.network.isolated and spec.sandbox.network.port == 8000
    assert spec.fence is None


BASE = {"version", "job_id", "attempt", "command", "env", "gpu_uuids", "log_limit_bytes"}
BASE |= {"stop_grace_seconds", "checkpoint_dir", "output_dir"}


def test_a_spec_without_tenancy_runs_unsandboxed() -> None:
    spec = RunnerSpec({key: EARLIER[key] for key in BASE})
    assert spec.sandbox is None and spec.account is None and spec.pids_max is None


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"version": 2}, "version"),
        ({"command": []}, "command"),
        ({"account": {"uid": 0, "gid": 0}}, "root"),
        ({"limits": {"cpus": -1}}, "limits.cpus"),
        ({"sandbox": {"bwrap": None}}, "sandbox.bwrap"),
        ({"sandbox": {**EARLIER["sandbox"], "shm_bytes": 0}}, "sandbox.shm_bytes"),
        ({"sandbox": {**EARLIER["sandbox"], "shm_bytes": "2GiB"}}, "sandbox.shm_bytes"),
        ({"workdir": "/w"}, "workdir and code_dir"),
    ],
)
def test_a_bad_field_is_a_spec_error_naming_it(override: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=field):
        RunnerSpec({**EARLIER, **override})


def test_load_spec_says_what_is_wrong_with_the_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(str(tmp_path))
    (tmp_path / SPEC_FILE).write_text("[1]")
    with pytest.raises(SpecError, match="JSON object"):
        load_spec(str(tmp_path))


def test_the_network_policy_is_checked() -> None:
    assert not NetworkPolicy(None).isolated
    assert not NetworkPolicy(wire.network_json(isolated=False)).isolated
    policy = NetworkPolicy(wire.network_json(isolated=True, egress="/usr/bin/pasta", port=8000))
    assert policy.isolated and policy.port == 8000 and policy.api is None
    api = NetworkPolicy(wire.network_json(isolated=True, api=(8765, "/d/api.sock")))
    assert api.api == (8765, "/d/api.sock") and api.egress is None
    for bad in (
        {"mode": "bridge"},
        {"mode": "isolated", "egress": "pasta"},
        {"mode": "isolated", "port": 70000},
        {"mode": "isolated", "api": {"port": 1}},
    ):
        with pytest.raises(SpecError):
            NetworkPolicy(bad)


def test_the_fence_reads_back_as_written() -> None:
    written = wire.fence_json(
        nft=None,
        fence_dir="/data/jobs/.fence",
        table="gpupool_fence_abc",
        platform_uids=[0, 1000],
        platform_pids=[],
        open_ports=[8000],
        closed_ranges=[(10002, 19999)],
        rendezvous=[29500],
        peers=["10.0.0.1"],
    )
    policy = FencePolicy(json.loads(json.dumps(written)))
    assert policy.dir == "/data/jobs/.fence" and policy.closed_ranges == [(10002, 19999)]
    assert policy.rendezvous == [29500] and policy.peers == ["10.0.0.1"]


def test_the_cgroup_name_is_unique_per_directory() -> None:
    one = wire.cgroup_name(1, 1, "/a/jobs/1/outputs")
    assert one.startswith("job-1-attempt-1-") and one != wire.cgroup_name(1, 1, "/b/jobs/1/outputs")


def test_a_dev_shm_size_reads_back_and_an_earlier_spec_has_none() -> None:
    assert RunnerSpec(EARLIER).sandbox.shm_bytes is None  # type: ignore[union-attr]
    sandbox = wire.sandbox_json(
        bwrap="/usr/bin/bwrap",
        setpriv=None,
        readonly=[],
        readwrite=[],
        hidden=[],
        devices=[],
        network=wire.network_json(isolated=False),
        shm_bytes=2**31,
        bwrap_size=False,
    )
    policy = RunnerSpec({**EARLIER, "sandbox": sandbox}).sandbox
    assert policy is not None and (policy.shm_bytes, policy.bwrap_size) == (2**31, False)
