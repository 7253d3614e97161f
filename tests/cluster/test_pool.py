"""A pool of three Ray nodes on 127.0.0.1 (tests/cluster/conftest.py), as users meet it:
``gpupool node join``, ``gpupool nodes``, jobs placed on the node their GPUs are on, logs copied
whole to the server, and a server killed with -9 that finds its running work again."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.cli import Cli, wait_for, wait_status
from tests.support.pool import Pool


def test_joined_nodes_are_listed_with_their_own_gpus(pool: Pool, pool_cli: Cli) -> None:
    nodes = {node["name"]: node for node in pool_cli.json("nodes")}
    assert set(nodes) == {"head", "n1", "n2"}
    models = {name: {gpu["model"] for gpu in node["gpus"]} for name, node in nodes.items()}
    assert models == {"head": {"A100-SXM4-80GB"}, "n1": {"H100-SXM5-80GB"}, "n2": {"L40S"}}
    assert all(node["state"] == "up" for node in nodes.values())
    assert all(node.seconds is not None for node in pool.nodes.values())  # it said how long


def test_a_job_runs_on_the_node_of_its_gpus_and_its_log_reaches_the_server(
    pool_cli: Cli,
) -> None:
    script = "echo start $CUDA_VISIBLE_DEVICES; for i in 1 2 3; do echo line $i; done"
    job_id = pool_cli.submit("--gpus", "2", "--gpu-type", "L40S", "--", "sh", "-c", script)
    job = wait_status(pool_cli, job_id, {"succeeded", "failed"})
    assert job["status"] == "succeeded", job
    assert job["placement"]["node"] == "n2"
    log = pool_cli.ok("logs", str(job_id))
    assert log.splitlines() == [
        "start GPU-declared-n2-0,GPU-declared-n2-1",
        "line 1",
        "line 2",
        "line 3",
    ]


def test_a_jobs_metrics_on_a_joined_node_reach_the_server(pool_cli: Cli) -> None:
    """The records its runner keeps on the node are copied with its log, and ingested."""
    code = "from gpupool import metrics\nfor step in range(5): metrics.log(step=step, loss=step)"
    command = ["--gpus", "1", "--gpu-type", "L40S", "--", sys.executable, "-c", code]
    job_id = pool_cli.submit(*command)
    assert wait_status(pool_cli, job_id, {"succeeded", "failed"})["status"] == "succeeded"

    def kept() -> list[dict] | None:
        return pool_cli.json("metrics", str(job_id))["series"] or None

    [loss] = wait_for(kept, what="the job's points on the server")
    assert (loss["name"], loss["steps"], loss["values"]) == (
        "loss",
        [0, 1, 2, 3, 4],
        [0, 1, 2, 3, 4],
    )


def test_a_cancelled_job_on_a_joined_node_stops(pool_cli: Cli) -> None:
    job_id = pool_cli.submit("--gpus", "1", "--gpu-type", "H100", "--", "sleep", "600")
    wait_status(pool_cli, job_id, {"running"})
    pool_cli.ok("cancel", str(job_id))
    job = wait_status(pool_cli, job_id, {"cancelled", "failed", "succeeded"})
    assert job["status"] == "cancelled"
    held = [g for n in pool_cli.json("nodes") for g in n["gpus"] if g.get("holders")]
    assert held == []


def test_a_server_killed_with_9_readopts_the_work_running_on_its_nodes(
    pool: Pool, pool_cli: Cli, exchange: Path
) -> None:
    marker = exchange / "go"
    script = f'echo before; while [ ! -e "{marker}" ]; do sleep 0.1; done; echo after'
    workdir = ("--workdir", str(exchange))  # the sandbox shows the job its workdir only
    job_id = pool_cli.submit(
        *workdir, "--gpus", "1", "--gpu-type", "H100", "--", "sh", "-c", script
    )
    wait_status(pool_cli, job_id, {"running"})
    wait_for(lambda: "before" in pool_cli.ok("logs", str(job_id)), what="the first line")
    pool.server.kill9()
    pool.server.start(timeout=120)
    marker.touch()
    job = wait_status(pool_cli, job_id, {"succeeded", "failed", "lost"})
    assert job["status"] == "succeeded", job
    assert job["attempts"] == 1
    assert pool_cli.ok("logs", str(job_id)).splitlines() == ["before", "after"]
    events = [e["reason"] for e in pool_cli.json("show", str(job_id))["events"]]
    assert "Readopted" in events


def test_a_job_finds_no_key_to_the_cluster(pool: Pool, pool_cli: Cli) -> None:
    """The pool's Ray secret is in no job's environment or reach, and without it a job that
    connects to the head's GCS is refused: it cannot make Ray tasks or actors."""
    secrets = [
        pool.server.data_dir / "cluster" / "ray-token",
        pool.nodes["n1"].data_dir / "cluster" / "ray-token",
    ]
    token = secrets[0].read_text().strip()
    address = f"127.0.0.1:{pool.server.extra_env['GPUPOOL_RAY_PORT']}"
    probe = (
        "import os, subprocess\n"
        f"for path in {[str(p) for p in secrets]!r}:\n"
        "    try:\n"
        "        print('READ', open(path).read())\n"
        "    except OSError as e:\n"
        "        print('refused', type(e).__name__)\n"
        "print('ENV', sorted(k for k in os.environ if k.startswith(('RAY_', 'GPUPOOL_R'))))\n"
        "import ray\n"
        "try:\n"
        f"    ray.init(address={address!r}, log_to_driver=False)\n"
        "    print('CONNECTED', ray.get(ray.remote(lambda: 1).remote(), timeout=20))\n"
        "except Exception as e:\n"
        "    print('refused ray', type(e).__name__)\n"
    )
    # on the node's network (a gang's tasks are), the GCS answers it, and refuses it
    on_host = ("--gpu-type", "H100", "--gpus", "1", "--network", "host")
    job_id = pool_cli.submit(*on_host, "--", sys.executable, "-c", probe)
    wait_status(pool_cli, job_id, {"succeeded", "failed"}, timeout=180)
    log = pool_cli.ok("logs", str(job_id))
    assert "READ" not in log and token not in log, log
    assert "ENV []" in log, log
    assert "CONNECTED" not in log, log
    assert "refused ray" in log or pool_cli.job(job_id)["status"] == "failed", log
    # on a network of its own (every job on one node), the GCS is not even reachable
    reach = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {address.split(':')[1]}), timeout=5)\n"
        "    print('REACHED')\n"
        "except OSError as e:\n"
        "    print('unreachable', type(e).__name__)\n"
    )
    job_id = pool_cli.submit("--gpu-type", "H100", "--gpus", "1", "--", sys.executable, "-c", reach)
    wait_status(pool_cli, job_id, {"succeeded", "failed"}, timeout=60)
    assert "unreachable ConnectionRefusedError" in pool_cli.ok("logs", str(job_id))


def test_code_sent_with_a_job_is_unpacked_on_its_node(pool_cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('trained on', open('data.txt').read())\n")
    (tmp_path / "data.txt").write_text("the node's copy")
    result = pool_cli(
        "run",
        "--code",
        "--gpus",
        "1",
        "--gpu-type",
        "H100",
        "--",
        sys.executable,
        "train.py",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    job = wait_status(pool_cli, int(result.stdout.strip()), {"succeeded", "failed"})
    assert job["status"] == "succeeded", job
    assert pool_cli.ok("logs", str(job["id"])).strip() == "trained on the node's copy"


def test_a_server_killed_with_9_readopts_a_job_over_two_nodes(
    pool: Pool, pool_cli: Cli, exchange: Path
) -> None:
    """Both tasks go on while the server is away; the restarted server takes them back, the
    job finishes once, and its merged log has every line of both tasks, in order per task."""
    marker = exchange / "go-gang"
    script = (
        'echo "before $GPUPOOL_TASK_INDEX"; '
        f'while [ ! -e "{marker}" ]; do sleep 0.1; done; echo "after $GPUPOOL_TASK_INDEX"'
    )
    job_id = pool_cli.submit(
        *("--workdir", str(exchange), "--nodes", "2", "--gpus-per-node", "1"),
        *("--", "sh", "-c", script),
    )
    wait_status(pool_cli, job_id, {"running"})
    wait_for(lambda: pool_cli.ok("logs", str(job_id)).count("before") == 2, what="both tasks")
    pool.server.kill9()
    marker.touch()  # the tasks end while no server watches them
    pool.server.start(timeout=120)
    job = wait_status(pool_cli, job_id, {"succeeded", "failed", "lost"})
    assert job["status"] == "succeeded", job
    assert job["attempts"] == 1
    lines = pool_cli.ok("logs", str(job_id)).splitlines()
    for task in ("0", "1"):
        mine = [line for line in lines if line.startswith(f"[task {task}] ")]
        assert mine == [f"[task {task}] before {task}", f"[task {task}] after {task}"], lines
