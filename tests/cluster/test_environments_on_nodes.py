"""Python environments on a pool: each joined node builds an environment the first time one
of its jobs needs it (from the lock the server resolved; for a GPU job, in a CPU-only build
job on that node), in its own environments directory, and its jobs run with that
environment's python; a second job on the node finds it built."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import Cli, wait_status
from tests.support.pool import Pool

PROBE = "import sys, alpha; print('alpha', alpha.__version__, sys.prefix)"


def test_each_node_builds_it_once_and_its_jobs_run_in_it(
    pool: Pool, pool_cli: Cli, tmp_path: Path
) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("beta\n")
    version = pool_cli.json("env", "create", "pooled", "-r", str(requirements))
    hexa = version["id"].split(":")[1]
    seen: dict[str, list[str]] = {}
    for gpu_type in ("H100", "L40S", "H100"):
        job_id = pool_cli.submit(
            "--gpus", "1", "--gpu-type", gpu_type, "--env", "pooled", "--", "python", "-c", PROBE
        )
        job = wait_status(pool_cli, job_id, {"succeeded", "failed", "lost"}, timeout=180)
        log = pool_cli.ok("logs", str(job_id))
        assert job["status"] == "succeeded", log
        node = job["placement"]["node"]
        seen.setdefault(node, []).append(log)
        env_dir = pool.nodes[node].data_dir / "envs" / hexa
        assert f"alpha 2.0 {env_dir}" in log, log
    assert set(seen) == {"n1", "n2"}
    # a GPU job's node builds the environment in a CPU-only build job, once per node: the
    # second job on n1 found it there; no job built it while holding its GPU
    builds = [
        j
        for j in pool_cli.json("ls", "-a")
        if j["kind"] == "envbuild" and j["name"].startswith("build environment pooled ")
    ]
    named = sorted(b["name"] for b in builds)
    assert named == ["build environment pooled on n1", "build environment pooled on n2"]
    for build in builds:
        assert build["status"] == "succeeded"
        assert "built on this node" in pool_cli.ok("logs", str(build["id"]))
    assert not [log for logs in seen.values() for log in logs if "built on this node" in log]
