"""Re-discovery: utilisation stays current and a changed node reaches the scheduler."""

from __future__ import annotations

import sys
from pathlib import Path

from gpupool.discovery import discover_node
from gpupool.domain.inventory import NodeInventory
from gpupool.settings import Settings
from tests.support.platform import make_settings, running_app, submit, wait_for, wait_job


def test_a_gpu_added_to_the_node_runs_a_waiting_job(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", declared_gpus="1xA100-SXM4-80GB:80GiB")
    with running_app(settings) as (client, platform):
        hold = submit(
            client, [sys.executable, "-c", "import time; time.sleep(60)"], resources={"gpus": 1}
        )
        wait_job(client, hold["id"], {"running"})
        waiting = submit(client, ["true"], resources={"gpus": 1})
        grown = settings.model_copy(update={"declared_gpus": "2xA100-SXM4-80GB:80GiB"})
        platform.watcher.discover = lambda _settings: discover_node(grown)
        assert platform.watcher.refresh() is True
        platform.watcher.on_change()
        assert wait_job(client, waiting["id"])["status"] == "succeeded"
        assert len(client.get("/api/v1/nodes").json()[0]["gpus"]) == 2
        client.post(f"/api/v1/jobs/{hold['id']}/cancel")


def test_utilisation_is_refreshed_without_a_capacity_change(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data")
    with running_app(settings) as (client, platform):

        def busy(current: Settings) -> NodeInventory:
            inventory = discover_node(current)
            inventory.gpus[0].utilization_percent = 87.0
            return inventory

        platform.watcher.discover = busy
        assert platform.watcher.refresh() is False
        gpus = wait_for(lambda: client.get("/api/v1/nodes").json()[0]["gpus"])
        assert gpus[0]["utilization_percent"] == 87.0


def test_the_watcher_runs_on_its_own_and_survives_a_failing_discovery(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", discovery_interval_seconds=0.05)
    calls = []

    def flaky(current: Settings) -> NodeInventory:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("nvidia-smi hung")
        return discover_node(current)

    with running_app(settings) as (_client, platform):
        platform.watcher.discover = flaky
        wait_for(lambda: len(calls) >= 3)
