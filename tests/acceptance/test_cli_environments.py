"""Python environments from the real CLI against a real server: make one from a
requirements file, a pyproject.toml and a uv.lock (resolved by uv against a directory of
wheels the test makes), run jobs in it (built once on the node, then shown read-only with its
python first on PATH), list, show and remove it, and the clear refusals."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cli import Cli, hold, refused, wait_for, wait_status
from tests.support.notebooks import Lab
from tests.support.server import ServerProcess
from tests.support.wheels import index_env, wheelhouse

PROBE = (
    "import sys, os, alpha, beta; print('alpha', alpha.__version__); print('prefix', sys.prefix);"
    "print('env', os.environ['GPUPOOL_ENVIRONMENT'])"
)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    wheels = wheelhouse(tmp_path_factory.mktemp("wheels"))
    data = tmp_path_factory.mktemp("envs") / "data"
    gpus = {"GPUPOOL_DECLARED_GPUS": "2xA100-SXM4-80GB:80GiB"}  # declared: none is used
    process = ServerProcess(data, env=index_env(wheels) | gpus).start()
    yield process
    process.stop()


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def ended(cli: Cli, job_id: int) -> dict:
    return wait_status(cli, job_id, {"succeeded", "failed", "cancelled", "lost"}, timeout=180)


def test_a_job_runs_in_its_environment_built_once_on_the_node(
    pool: ServerProcess, admin: Cli, tmp_path: Path
) -> None:
    requirements = write(tmp_path / "requirements.txt", "# tools\nbeta\n")
    made = admin.ok("env", "create", "tools", "-r", str(requirements))
    version = admin.json("env", "show", "tools")["versions"][0]
    assert made.startswith(f"environment tools@{version['short_id']} (team default, Python 3.")
    assert version["packages"] == ["alpha==2.0", "beta==0.1"]

    first = admin.submit("--env", "tools", "--", "python", "-c", PROBE)
    second = admin.submit("--env", f"tools@{version['short_id']}", "--", "python", "-c", PROBE)
    for job_id in (first, second):
        assert ended(admin, job_id)["status"] == "succeeded", admin.ok("logs", str(job_id))
    logs = [admin.ok("logs", str(job_id)) for job_id in (first, second)]
    env_dir = pool.data_dir / "envs" / version["id"].split(":")[1]
    for log in logs:
        assert "alpha 2.0" in log
        assert f"prefix {env_dir}" in log
        assert f"env tools@{version['short_id']}" in log
    built = [log for log in logs if "built on this node" in log]
    assert len(built) == 1, logs  # one build, whichever job got there first
    assert admin.job(first)["spec"]["environment"] == f"tools@{version['id']}"  # at submit

    # the environment is read-only to the job, and pip cannot change it
    script = "import alpha, os; p = os.path.dirname(alpha.__file__);open(os.path.join(p, 'x'), 'w')"
    denied = admin.submit("--env", "tools", "--", "python", "-c", script)
    assert ended(admin, denied)["status"] == "failed"
    assert "Read-only file system" in admin.ok("logs", str(denied))


def test_a_job_whose_node_builds_its_environment_says_so(
    pool: ServerProcess, admin: Cli, tmp_path: Path
) -> None:
    made = admin.json("env", "create", "slow", "-r", str(write(tmp_path / "r.txt", "gamma\n")))
    locks = pool.data_dir / "envs" / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    held = os.open(locks / made["id"].split(":")[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # as another job's build holds it
    try:
        job_id = admin.submit("--env", "slow", "--", "python", "-c", "import gamma")
        label = f"slow@{made['short_id']}"

        def building() -> dict | None:
            job = admin.job(job_id)
            return job if job["reason"] == "EnvBuilding" else None

        job = wait_for(building, what="the job's reason to be EnvBuilding")
        assert job["status"] == "starting"
        assert job["message"] == f"waiting for environment {label} to be built on this node"
        why = admin.ok("why", str(job_id))
        assert f"waiting for environment {label} to be built on this node" in why
    finally:
        os.close(held)
    assert ended(admin, job_id)["status"] == "succeeded", admin.ok("logs", str(job_id))
    events = [e for e in admin.job(job_id)["events"] if e["reason"] == "EnvBuilding"]
    assert len(events) == 1  # when it began, not at every step


def test_a_gpu_job_waits_for_a_cpu_build_job_instead_of_holding_its_gpus(
    pool: ServerProcess, admin: Cli, tmp_path: Path
) -> None:
    requirements = write(tmp_path / "r.txt", "alpha==1.0\ngamma==1.0\n")
    made = admin.json("env", "create", "gpuenv", "-r", str(requirements))
    locks = pool.data_dir / "envs" / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    held = os.open(locks / made["id"].split(":")[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # the build job waits here: the job waits for it
    try:
        train = admin.submit("--gpus", "2", "--env", "gpuenv", "--", "python", "-c", "import gamma")

        def waiting() -> dict | None:
            job = admin.job(train)
            return job if job["reason"] == "EnvBuilding" else None

        job = wait_for(waiting, what="the GPU job to wait for its environment's build")
        [build] = [j for j in admin.json("ls", "-a") if j["kind"] == "envbuild"]
        node = build["name"].rsplit(" on ", 1)[1]
        assert build["name"] == f"build environment gpuenv on {node}"
        assert (job["status"], build["user"], build["team"]) == ("pending", "admin", "default")
        assert job["message"] == f"waits for job {build['id']} ({build['name']}) to end"
        building = wait_status(admin, build["id"], {"starting"})
        assert building["spec"]["resources"].get("gpus") is None  # it holds no GPU
        label = f"gpuenv@{made['short_id']}"
        why = admin.json("why", str(train))["summary"]
        assert why == (
            f"it waits for job {build['id']} ({build['name']}) to end "
            f"(waiting for environment {label} to be built on this node)"
        )
        free = admin.submit("--gpus", "2", "--", "true")  # its GPUs are free meanwhile
        assert ended(admin, free)["status"] == "succeeded"
    finally:
        os.close(held)
    assert ended(admin, build["id"])["status"] == "succeeded", admin.ok("logs", str(build["id"]))
    assert ended(admin, train)["status"] == "succeeded", admin.ok("logs", str(train))
    assert "built on this node" in admin.ok("logs", str(build["id"]))
    assert "built on this node" not in admin.ok("logs", str(train))  # built before it started
    reasons = [e["reason"] for e in admin.job(train)["events"]]
    assert reasons[:4] == ["Submitted", "EnvBuilding", "Queued", "Placed"]


def test_versions_from_pyproject_and_uv_lock_ls_show_and_rm(
    pool: ServerProcess, admin: Cli, tmp_path: Path, release: Path
) -> None:
    pyproject = write(
        tmp_path / "pyproject.toml",
        '[project]\nname = "mine"\nversion = "0"\ndependencies = ["alpha<2"]\n',
    )
    lock = write(
        tmp_path / "uv.lock",
        "version = 1\n"
        '[[package]]\nname = "mine"\nversion = "0"\nsource = { editable = "." }\n'
        '[[package]]\nname = "gamma"\nversion = "1.0"\n'
        'source = { registry = "https://pypi.org/simple" }\n',
    )
    one = admin.json("env", "create", "old-alpha", "--pyproject", str(pyproject))
    two = admin.json("env", "create", "old-alpha", "--lock", str(lock), "-d", "gamma pinned")
    again = admin.json("env", "create", "old-alpha", "--lock", str(lock))
    assert one["packages"] == ["alpha==1.0"] and two["packages"] == ["gamma==1.0"]
    assert again["id"] == two["id"]  # the same lock is the same version

    listed = {e["name"]: e for e in admin.json("env", "ls")}
    assert listed["old-alpha"]["version_count"] == 2
    assert listed["old-alpha"]["latest"]["id"] == two["id"]
    shown = admin.ok("env", "show", "old-alpha")
    assert one["short_id"] in shown and two["short_id"] in shown and "uv.lock" in shown
    locked = admin.json("env", "show", f"old-alpha@{one['short_id']}")
    assert "alpha==1.0" in locked["lock"] and "--hash=sha256:" in locked["lock"]

    held = admin.submit(
        "--env", f"old-alpha@{one['short_id']}", "--workdir", str(release.parent), *hold(release)
    )
    wait_status(admin, held, {"running"}, timeout=180)
    in_use = admin("env", "rm", f"old-alpha@{one['short_id']}")
    assert refused(in_use, "environment_in_use") and str(held) in in_use.stderr
    release.touch()
    ended(admin, held)
    assert admin.ok("env", "rm", f"old-alpha@{one['short_id']}").startswith("removed")
    assert admin.json("env", "show", "old-alpha")["version_count"] == 1
    admin.ok("env", "rm", "old-alpha")
    assert refused(admin("env", "show", "old-alpha"), "not_found")


def test_what_cannot_be_an_environment_is_refused_clearly(admin: Cli, tmp_path: Path) -> None:
    def create(text: str, *extra: str):  # noqa: ANN202
        return admin("env", "create", "bad", "-r", str(write(tmp_path / "r.txt", text)), *extra)

    assert refused(create("-e .\n"), "invalid_environment")
    assert refused(create("--index-url http://127.0.0.1:9/simple\nalpha\n"), "invalid_environment")
    assert refused(create("alpha @ http://127.0.0.1:9/alpha.whl\n"), "invalid_environment")
    assert refused(create("alpha @ file:///etc/passwd\n"), "invalid_environment")
    assert refused(create("# nothing\n"), "invalid_environment")
    unresolvable = create("no-such-package-here\n")
    assert unresolvable.returncode == 1
    assert unresolvable.stderr.startswith("error [environment_unresolvable]: ")
    assert "no-such-package-here" in unresolvable.stderr
    assert refused(create("alpha\n", "--python", "3.4"), "python_unavailable")
    assert refused(
        admin("env", "create", "Bad Name", "-r", str(tmp_path / "r.txt")), "invalid_environment"
    )
    missing = admin("run", "--env", "nothing-here", "--", "true")
    assert refused(missing, "not_found")
    usage = admin("run", "--env", "NOPE", "--", "true")
    assert usage.returncode == 2 and "neither a variable" in usage.stderr


def test_a_prefix_registered_by_an_admin_is_every_teams(
    admin: Cli, tmp_path: Path, pool: ServerProcess
) -> None:
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    tool = prefix / "bin" / "site-tool"
    tool.write_text("#!/bin/sh\necho site tool here\n")
    tool.chmod(0o755)
    prefix.chmod(0o755)
    tmp_path.chmod(0o755)
    said = admin.ok("env", "register", "site", "--path", str(prefix))
    assert said.strip() == f"environment site is the prefix {prefix} (every team)"
    job_id = admin.submit("--env", "site", "--", "site-tool")
    assert ended(admin, job_id)["status"] == "succeeded", admin.ok("logs", str(job_id))
    assert "site tool here" in admin.ok("logs", str(job_id))
    listed = {e["name"]: e for e in admin.json("env", "ls")}
    assert listed["site"]["team"] is None


SERVE = (
    "import os, sys, alpha\n"
    "from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer\n"
    "class H(BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = f'alpha {alpha.__version__} {sys.prefix}'.encode()\n"
    "        self.send_response(200); self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers(); self.wfile.write(body)\n"
    "ThreadingHTTPServer((os.environ['GPUPOOL_LISTEN_HOST'], int(os.environ['PORT'])), H)"
    ".serve_forever()\n"
)


def test_a_notebooks_kernel_and_a_deployments_replicas_run_in_it(
    pool: ServerProcess, admin: Cli, tmp_path: Path
) -> None:
    made = admin.json("env", "create", "served", "-r", str(write(tmp_path / "r.txt", "alpha<2\n")))
    env_dir = pool.data_dir / "envs" / made["id"].split(":")[1]

    notebook = admin.json("notebook", "start", "--env", "served")
    assert notebook["environment"] == "served"
    lab = Lab(pool.url, notebook["id"], pool.token or "")
    try:
        lab.answering(timeout=180)
        kernel = lab.start_kernel()
        said = lab.run(kernel, "import sys, alpha; print(sys.prefix, alpha.__version__)")
        assert said.split() == [str(env_dir), "1.0"]
    finally:
        lab.close()
        admin.ok("notebook", "stop", str(notebook["id"]))

    deploy = ("deploy", "create", "env-served", "--no-model", "--env", "served", "-o", "json")
    deployed = json.loads(admin.ok(*deploy, "--", "python", "-c", SERVE))
    assert deployed["environment"] == f"served@{made['id']}"  # pinned when it was made
    headers = {"Authorization": f"Bearer {pool.token}"}

    def answer() -> str | None:
        got = httpx.get(f"{pool.url}/serve/env-served/health", headers=headers, timeout=10)
        return got.text if got.status_code == 200 else None

    try:
        assert wait_for(answer, timeout=180, what="the replica to serve") == f"alpha 1.0 {env_dir}"
    finally:
        admin.ok("deploy", "stop", "env-served")


FILE = """\
apiVersion: gpupool/v1
kind: Environment
metadata: {name: filed}
spec:
  requirements: "alpha<2\\n"
---
apiVersion: gpupool/v1
kind: Job
metadata: {name: uses-filed}
spec:
  command: [python, -c, "import alpha; print('filed alpha', alpha.__version__)"]
  environment: filed
"""


def test_a_job_file_makes_an_environment_and_a_job_that_runs_in_it(
    admin: Cli, tmp_path: Path
) -> None:
    path = write(tmp_path / "env.yaml", FILE)
    dry = admin("apply", "-f", str(path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "kind: Environment" in dry.stdout and "requirements:" in dry.stdout
    assert refused(admin("env", "show", "filed"), "not_found")  # a dry run makes nothing

    made = json.loads(admin.ok("apply", "-f", str(path), "-o", "json"))
    job_id = next(d["status"]["id"] for d in made if d["kind"] == "Job")
    assert ended(admin, job_id)["status"] == "succeeded", admin.ok("logs", str(job_id))
    assert "filed alpha 1.0" in admin.ok("logs", str(job_id))
    assert admin.json("env", "show", "filed")["latest"]["packages"] == ["alpha==1.0"]
