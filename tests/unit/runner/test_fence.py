"""The node's fence for gangs over several nodes (``runner.fence``): the policy as spec.json
holds it, the nftables rules it makes, the listeners it reads, the gangs' records it keeps."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpupool.runner import fence
from gpupool.runner.fence import listeners, live_gangs, render
from gpupool.runner.layout import atomic_write_json, process_create_time
from gpupool.runner.wire import FencePolicy, SpecError


def policy(**overrides: Any) -> FencePolicy:
    raw = {
        "nft": "/usr/sbin/nft",
        "dir": "/data/jobs/.fence",
        "table": "gpupool_fence_t",
        "platform_uids": [0],
        "open_ports": [8300],
        "closed_ranges": [[10002, 19999]],
        "rendezvous": [29500],
        "peers": ["10.0.0.1", "10.0.0.2"],
    }
    return FencePolicy(raw | overrides)


def gang(uid: int = 1001, ports: list[int] | None = None, peers: list[str] | None = None) -> dict:
    return {"uid": uid, "rendezvous": ports or [29500], "peers": peers or ["10.0.0.1"]}


def test_the_table_replaces_itself_in_one_script() -> None:
    text = render(policy(), [6380, 8076], [gang()])
    assert text.startswith(
        "table inet gpupool_fence_t\ndelete table inet gpupool_fence_t\n"
        "table inet gpupool_fence_t {\n"
    )


def test_a_job_account_is_refused_the_platforms_ports_and_rays_worker_range() -> None:
    text = render(policy(), [6380, 8076], [])
    assert (
        "fib daddr type local tcp dport { 6380, 8076, 10002-19999 } meta skuid != { 0 } "
        "reject with tcp reset" in text
    )


def test_the_servers_api_port_stays_open_before_the_closed_ones() -> None:
    text = render(policy(open_ports=[12000]), [6380], [])
    opened = text.index("fib daddr type local tcp dport { 12000 } accept")
    assert opened < text.index("meta skuid != { 0 } reject")


def test_a_rendezvous_is_its_owners_locally_and_its_nodes_from_elsewhere() -> None:
    text = render(policy(), [], [gang(1001, [29500, 29501], ["10.0.0.1", "fd00::2"])])
    output, inbound = text.split("chain input")
    assert (
        "fib daddr type local tcp dport { 29500, 29501 } meta skuid != 1001 "
        "reject with tcp reset" in output
    )
    assert (
        "meta iiftype != loopback ip saddr != { 10.0.0.1 } tcp dport { 29500, 29501 } "
        "reject with tcp reset" in inbound
    )
    assert (
        "meta iiftype != loopback ip6 saddr != { fd00::2 } tcp dport { 29500, 29501 } "
        "reject with tcp reset" in inbound
    )


def test_a_family_without_nodes_of_the_gang_is_refused_whole() -> None:
    text = render(policy(), [], [gang(peers=["10.0.0.1"])])
    assert "meta iiftype != loopback ip6 saddr ::/0 tcp dport { 29500 } reject" in text


def test_rendezvous_rules_come_before_the_open_ports() -> None:
    text = render(policy(), [], [gang()])
    assert text.index("meta skuid != 1001") < text.index("} accept")


def test_without_gangs_the_table_is_dropped() -> None:
    assert fence.drop("t") == "table inet t\ndelete table inet t\n"


def test_listeners_of_the_platforms_accounts_only(tmp_path: Path) -> None:
    table = tmp_path / "tcp"
    table.write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid "
        " timeout inode\n"
        "   0: 0100007F:18CC 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0 "
        "       0 1 1 0000000000000000 100 0 0 10 0\n"
        "   1: 00000000:7334 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001 "
        "       0 2 1 0000000000000000 100 0 0 10 0\n"
        "   2: 0100007F:A1B2 0100007F:18CC 01 00000000:00000000 00:00000000 00000000     0 "
        "       0 3 1 0000000000000000 100 0 0 10 0\n"
    )
    assert listeners([str(table), str(tmp_path / "missing")], {0}) == {0x18CC}


def test_records_of_runners_that_are_gone_are_swept(tmp_path: Path) -> None:
    alive = gang() | {"runner_pid": os.getpid(), "runner_create_time": process_create_time()}
    gone = gang(1002) | {"runner_pid": os.getpid(), "runner_create_time": 1.0}  # pid reused
    atomic_write_json(tmp_path / "a.json", alive)
    atomic_write_json(tmp_path / "b.json", gone)
    assert live_gangs(str(tmp_path)) == [alive]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"dir": "relative"}, "fence.dir"),
        ({"nft": 3}, "fence.nft"),
        ({"table": "bad name; flush ruleset"}, "fence.table"),
        ({"platform_uids": []}, "fence.platform_uids"),
        ({"open_ports": [70000]}, "fence.open_ports"),
        ({"closed_ranges": [[20000, 10000]]}, "fence.closed_ranges"),
        ({"rendezvous": ["29500"]}, "fence.rendezvous"),
        ({"peers": ["10.0.0.1; flush ruleset"]}, "fence.peers"),
        ({"netns": "/run/netns/x"}, "fence.netns"),
    ],
)
def test_bad_fence_data_is_a_spec_error_naming_the_field(override: dict, field: str) -> None:
    with pytest.raises(SpecError, match=field):
        policy(**override)


def test_no_nft_is_a_note_and_the_task_runs_unfenced() -> None:
    fenced = fence.Fence(policy(nft=None), "job-1", 1001)
    if os.geteuid() != 0:
        fenced.apply()
        assert fenced.notes == [
            f"{fence.NOT_ENFORCED}: the runner is not root (nftables rules need it)"
        ]
        return
    fenced.apply()
    assert fenced.notes == [f"{fence.NOT_ENFORCED}: nftables (nft) is not installed on the node"]
    assert not fenced.applied


def test_listeners_of_the_platforms_processes_only_where_named(tmp_path: Path) -> None:
    table = tmp_path / "tcp"
    row = (
        "   {n}: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000"
        "     0        0 {inode} 1 0000000000000000 100 0 0 10 0\n"
    )
    table.write_text(
        "header\n" + row.format(n=0, port=6380, inode=11) + row.format(n=1, port=22, inode=12)
    )
    assert listeners([str(table)], {0}, sockets={11}) == {6380}
    assert listeners([str(table)], {0}) == {6380, 22}


def test_the_sockets_of_a_process_tree_are_found() -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        tables = ["/proc/self/net/tcp", "/proc/self/net/tcp6"]
        mine = fence._sockets(fence._tree([os.getppid()]))  # this process descends from it
        assert port in listeners(tables, {os.geteuid()}, mine)


@pytest.mark.parametrize(
    ("argv", "found"),
    [
        (["/usr/bin/python3", "-m", "ray.scripts.scripts", "start", "--block"], True),
        (["/opt/venv/bin/python", "/opt/venv/bin/ray", "start", "--address=h:6380"], True),
        (["ray", "start", "--head"], True),
        (["/usr/bin/python3", "-m", "gpupool", "server", "--ray"], False),
        (["ray", "status"], False),
    ],
)
def test_the_nodes_ray_start_is_recognised(argv: list[str], found: bool) -> None:
    from gpupool.executors.fence import is_ray_start

    assert is_ray_start(argv) is found
