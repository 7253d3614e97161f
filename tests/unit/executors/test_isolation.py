"""The node's tenancy as data (``executors.isolation``): device nodes of each GPU (MIG
included), what a runner is told, the sandbox's command line, the PATH of a sandboxed job, cgroup
files, and the limits every attempt's spec carries when its job asks for none."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpupool.domain.inventory import GpuDevice, MigDevice, NodeInventory
from gpupool.executors.accounts import Account
from gpupool.executors.isolation import DeviceMap, Isolation, protected_paths
from gpupool.executors.task import GpuGrant
from gpupool.runner import cgroups
from gpupool.runner.sandbox import bwrap_argv, env_file
from gpupool.runner.wire import RunnerSpec, SandboxPolicy
from gpupool.settings import Settings
from tests.support.tasks import task

GIB = 1024**3


def inventory() -> NodeInventory:
    mig = [
        MigDevice(uuid="MIG-a", gpu_instance_id=1, compute_instance_id=0, memory_bytes=10 * GIB),
        MigDevice(uuid="MIG-b", gpu_instance_id=2, compute_instance_id=0, memory_bytes=10 * GIB),
    ]
    gpus = [
        GpuDevice(index=0, uuid="GPU-0", name="A100", memory_bytes=80 * GIB, minor_number=0),
        GpuDevice(index=1, uuid="GPU-1", name="A100", memory_bytes=80 * GIB, minor_number=3),
        GpuDevice(
            index=2,
            uuid="GPU-2",
            name="A100",
            memory_bytes=80 * GIB,
            minor_number=2,
            mig_enabled=True,
            mig_devices=mig,
        ),
    ]
    return NodeInventory(name="n", cpus=8, memory_bytes=64 * GIB, gpus=gpus)


@pytest.fixture
def devices(tmp_path: Path) -> DeviceMap:
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    for name in ("nvidia0", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"):
        (dev / name).write_text("")
    for cap in (21, 22, 30, 31):
        (dev / "nvidia-caps" / f"nvidia-cap{cap}").write_text("")
    minors = tmp_path / "mig-minors"
    minors.write_text(
        "config 1\nmonitor 2\ngpu2/gi1/access 21\ngpu2/gi1/ci0/access 22\n"
        "gpu2/gi2/access 30\ngpu2/gi2/ci0/access 31\n"
    )
    found = DeviceMap(dev, mig_minors=minors)
    found.update(inventory())
    return found


def test_a_gpu_maps_to_its_minor_number_and_the_control_devices(devices: DeviceMap) -> None:
    dev = devices.device_dir
    assert devices.devices(["GPU-1"]) == [
        [str(dev / "nvidia3"), "/dev/nvidia3"],
        [str(dev / "nvidiactl"), "/dev/nvidiactl"],
        [str(dev / "nvidia-uvm"), "/dev/nvidia-uvm"],
    ]


def test_a_mig_device_brings_its_parent_and_its_own_capabilities_only(devices: DeviceMap) -> None:
    inside = [pair[1] for pair in devices.devices(["MIG-b"])]
    assert inside[:3] == [
        "/dev/nvidia2",
        "/dev/nvidia-caps/nvidia-cap30",
        "/dev/nvidia-caps/nvidia-cap31",
    ]
    assert "/dev/nvidia-caps/nvidia-cap21" not in inside and "/dev/nvidia0" not in inside


def test_no_gpu_no_device_and_a_missing_node_is_left_out(devices: DeviceMap) -> None:
    assert devices.devices([]) == []
    assert "/dev/nvidia0" not in [p[1] for p in devices.devices(["GPU-unknown"])]


# Ann's task on GPU-0 with its CPU and memory limits.
LIMITED: dict[str, object] = dict(user="ann", gpu_uuids=["GPU-0"], cpus=2.0, memory_bytes=GIB)


class OneAccount:
    def for_job(self, user: str, mapped: str | None) -> Account:
        return Account(mapped or f"gp-{user}", 1234, 1234, (1234, 50))


def test_the_runner_is_told_its_sandbox_account_and_limits(tmp_path: Path) -> None:
    isolation = Isolation(Settings(data_dir=tmp_path / "data"), accounts=OneAccount())
    fraction = task(**LIMITED, gpu_grants=(GpuGrant("GPU-0", 0.25, 20 * GIB),))
    spec = isolation.runner_spec(fraction, ["/out", "/ckpt"])
    assert spec["account"] == {"name": "gp-ann", "uid": 1234, "gid": 1234, "groups": [1234, 50]}
    assert spec["limits"] == {"cpus": 2.0, "memory_bytes": GIB, "pids_max": 4096}
    assert spec["gpu_memory"]["limits"] == {"GPU-0": 20 * GIB}
    assert spec["gpu_shares"] == {"GPU-0": 0.25}
    assert str((tmp_path / "data").resolve()) in spec["sandbox"]["hidden"]
    assert sys.base_prefix in spec["sandbox"]["readonly"]
    whole = isolation.runner_spec(
        task(**LIMITED, gpu_grants=(GpuGrant("GPU-0", 1.0, 80 * GIB),)), []
    )
    assert "gpu_memory" not in whole


def test_isolation_off_tells_no_sandbox_but_still_an_account(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", isolation="off")
    spec = Isolation(settings, accounts=OneAccount()).runner_spec(
        task(**LIMITED, unix_user="ann"), []
    )
    assert "sandbox" not in spec and spec["account"]["name"] == "ann"


def test_a_sandboxed_job_path_starts_with_the_shown_python_and_drops_hidden_entries(
    tmp_path: Path,
) -> None:
    isolation = Isolation(Settings(data_dir=tmp_path / "data"))
    path = isolation.job_path(f"/nonexistent/shims:{tmp_path}:/usr/bin:/bin")
    entries = path.split(":")
    assert entries[0] == f"{sys.prefix}/bin"
    assert "/usr/bin" in entries and "/nonexistent/shims" not in entries
    assert str(tmp_path) not in entries


def test_protected_paths_are_the_data_directory_and_the_saved_token(tmp_path: Path) -> None:
    found = protected_paths(Settings(data_dir=tmp_path / "d"))
    assert found == [
        str((tmp_path / "d").resolve()),
        os.path.realpath(Path.home() / ".config/gpupool"),
    ]


def test_the_sandbox_command_line_as_data(tmp_path: Path) -> None:
    python = tmp_path / "home" / "user" / "py"
    python.mkdir(parents=True)
    policy = SandboxPolicy(
        {
            "bwrap": "/usr/bin/bwrap",
            "setpriv": "/usr/bin/setpriv",
            "readonly": ["/usr", str(python)],
            "hidden": [str(tmp_path / "data")],
            "devices": [["/dev/null", "/dev/nvidia1"]],
        }
    )
    account = {"uid": 1234, "gid": 1234, "groups": [1234]}
    argv = bwrap_argv(policy, ["train", "--lr", "1"], "/work", [], account, 7, 8)
    text = " ".join(argv)
    for part in (
        "--unshare-pid",
        "--unshare-ipc",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ):
        assert part in argv
    assert "--ro-bind /usr /usr" in text and "--proc /proc" in text
    assert f"--perms 0755 --dir {tmp_path}/home --perms 0755 --dir {tmp_path}/home/user" in text
    assert "--dev-bind /dev/null /dev/nvidia1" in text
    assert "--ro-bind-data 7 /run/gpupool/env" in text and "--json-status-fd 8" in text
    assert argv[argv.index("--") + 1 :][:3] == ["/usr/bin/setpriv", "--reuid=1234", "--regid=1234"]
    assert argv[-4:] == ["sh", "train", "--lr", "1"]


def test_unprivileged_the_sandbox_is_a_user_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    policy = SandboxPolicy({"bwrap": "/usr/bin/bwrap", "readonly": ["/usr"]})
    argv = bwrap_argv(policy, ["true"], "/", [], None, 3, 4)
    assert "--unshare-user" in argv and "--disable-userns" in argv
    assert "setpriv" not in " ".join(argv)


def test_the_environment_file_quotes_every_value() -> None:
    text = env_file({"A": "it's", "B": "$(rm -rf /)", "C": "x\ny"}).decode()
    assert text == "export A='it'\\''s'\nexport B='$(rm -rf /)'\nexport C='x\ny'\n"


def test_cgroup_v2_files_for_cpu_and_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    made, why = cgroups.create("job-1-attempt-1", 1.5, 2 * GIB, root=str(tmp_path))
    assert why == "" and made is not None and made.version == 2
    directory = tmp_path / "gpupool" / "job-1-attempt-1"
    assert (directory / "memory.max").read_text() == str(2 * GIB)
    assert (directory / "cpu.max").read_text() == "150000 100000"
    (directory / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert made.oom_kills() == 1


def test_nothing_to_limit_makes_no_cgroup() -> None:
    assert cgroups.create("job-1-attempt-1", None, None) == (None, "")


def test_a_path_shown_below_tmp_is_mounted_onto_the_private_tmp(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout" / ".venv"  # pytest's tmp_path is below /tmp
    checkout.mkdir(parents=True)
    policy = SandboxPolicy({"bwrap": "/usr/bin/bwrap", "readonly": ["/usr", str(checkout)]})
    argv = bwrap_argv(policy, ["true"], "/", [], None, 3, 4)
    private_tmp = argv.index("/tmp", argv.index("--tmpfs"))
    assert argv.index(str(checkout)) > private_tmp


# -- default limits: the node's memory over its GPUs (or an admin's) and its task limit ------------


def node(gpus: int) -> NodeInventory:
    found = [
        GpuDevice(index=i, uuid=f"GPU-{i}", name="A100", memory_bytes=80 * GIB) for i in range(gpus)
    ]
    return NodeInventory(name="n", cpus=8, memory_bytes=64 * GIB, gpus=found)


def limits(tmp_path: Path, gpus: int, **settings: object) -> dict[str, object]:
    isolation = Isolation(Settings(data_dir=tmp_path / "data", **settings))
    isolation.devices.update(node(gpus))
    return isolation.limits(task(user="ann"))


def test_the_default_memory_is_the_nodes_over_its_gpus(tmp_path: Path) -> None:
    assert limits(tmp_path, 4) == {"cpus": None, "memory_bytes": 16 * GIB, "pids_max": 4096}
    assert limits(tmp_path, 0)["memory_bytes"] == 64 * GIB  # no GPU: divided by 1


def test_an_admin_sets_the_default_memory_and_the_task_limit(tmp_path: Path) -> None:
    found = limits(tmp_path, 4, job_default_memory="8GiB", job_pids_max=512)
    assert (found["memory_bytes"], found["pids_max"]) == (8 * GIB, 512)


def test_a_job_that_asks_keeps_its_memory(tmp_path: Path) -> None:
    isolation = Isolation(Settings(data_dir=tmp_path / "data"))
    assert isolation.limits(task(user="ann", memory_bytes=3 * GIB))["memory_bytes"] == 3 * GIB


def test_a_default_memory_that_is_no_quantity_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="write it like 20GiB"):
        Settings(data_dir=tmp_path / "data", job_default_memory="lots")


def test_an_older_spec_without_a_task_limit_is_still_valid() -> None:
    raw = {
        "version": 1,
        "job_id": 1,
        "attempt": 1,
        "command": ["true"],
        "log_limit_bytes": 1,
        "stop_grace_seconds": 1,
        "checkpoint_dir": "/c",
        "output_dir": "/o",
        "limits": {"memory_bytes": GIB},
    }
    assert RunnerSpec(raw).pids_max is None
    assert RunnerSpec(raw | {"limits": {"pids_max": 64}}).pids_max == 64


def test_a_job_that_asks_keeps_its_task_limit_under_the_nodes(tmp_path: Path) -> None:
    isolation = Isolation(Settings(data_dir=tmp_path / "data", job_pids_max=512))
    assert isolation.limits(task(user="ann", pids=64))["pids_max"] == 64
    # never above the node's
    assert isolation.limits(task(user="ann", pids=4096))["pids_max"] == 512
