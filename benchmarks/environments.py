"""Python environments: what one adds to a job's start, a cold build of a scientific stack,
the disk that versions of it take, and imports inside the sandbox.

One real server (isolation on: every job and every build in its sandbox) resolves and builds
from a package index on this machine's disk (an air-gapped site's mirror; the default is this
machine's own, /opt/pypi/simple, as its pip configuration names it: GPUPOOL_BENCH_INDEX to
name another). Four figures, each against a baseline of the same run:

- warm: trivial jobs submitted one after the other, alternately with no environment and with
  one already built on the node; each job's runner-recorded start minus its acknowledged
  submit. Aim: <= 10 ms added at p50.
- cold: numpy + scipy + pandas + scikit-learn, resolved (``env create``) and then built by the
  first job that needs it: that job's start minus the warm baseline's. Aim: <= 15 s.
- disk: ten environments of that stack, each with one more small package of its own, built
  one after the other: the bytes all ten take together (files counted once per inode: hard
  links are one file) against one's. Aim: <= 1.2x.
- imports: ``import numpy, scipy, pandas, sklearn`` timed inside a job (in its sandbox) and by
  the environment's python run directly on the host, alternately. Aim: within 10 %.
- GPUs held idle: a job asking for a GPU, in a cold environment of that stack (one more
  package: nothing of it is built yet), the time from its placement to its start, while its
  GPU is held; against a second server of the same run with build jobs off
  (``GPUPOOL_ENV_BUILD_JOBS=false``), where the job's own start builds it holding the GPU.

    .venv/bin/python benchmarks/environments.py [--jobs N] [--imports N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import FINAL, client, percentile, start_server, stop_on_sigterm, wait_until

INDEX = os.environ.get("GPUPOOL_BENCH_INDEX", "file:///opt/pypi/simple")
EXTRA = "file:///opt/pypi-more/simple"
STACK = ["numpy", "scipy", "pandas", "scikit-learn"]
EXTRAS = [
    "attrs",
    "idna",
    "certifi",
    "pyparsing",
    "tqdm",
    "click",
    "toolz",
    "decorator",
    "tabulate",
    "filelock",
]
IMPORTS = "import numpy, scipy, pandas, sklearn, scipy.stats"
BARE = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp"}
TIMED = f"import time; t = time.perf_counter(); {IMPORTS}; print('IMPORT', time.perf_counter() - t)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=30, help="warm jobs of each kind")
    parser.add_argument("--imports", type=int, default=9, help="timed imports of each kind")
    args = parser.parse_args()
    if not Path(INDEX.removeprefix("file://")).is_dir() and INDEX.startswith("file://"):
        sys.exit(f"no package index at {INDEX}: name one with GPUPOOL_BENCH_INDEX")
    stop_on_sigterm()
    env = {"GPUPOOL_ENV_INDEX_URL": INDEX, "GPUPOOL_ENV_NO_INDEX": "false"}
    if Path(EXTRA.removeprefix("file://")).is_dir():
        env["GPUPOOL_ENV_EXTRA_INDEX_URLS"] = EXTRA
    server = start_server(env)
    try:
        with client(server) as api:
            run(api, server.data_dir, args)
            first = gpu_held(api, "cold-gpu")
    finally:
        server.stop()
    server = start_server(env | {"GPUPOOL_ENV_BUILD_JOBS": "false"})
    try:
        with client(server) as api:
            held = gpu_held(api, "cold-gpu")
    finally:
        server.stop()
    print(f"GPUs held idle: a GPU job in a cold environment held its GPU {first[0]:.2f} s from")
    print(f"      its placement to its start (submit->start {first[1]:.1f} s, the build in a")
    print(f"      CPU-only build job); with build jobs off {held[0]:.2f} s (submit->start")
    print(f"      {held[1]:.1f} s, the build in its start)")


def run(api, data: Path, args: argparse.Namespace) -> None:  # noqa: ANN001
    made = create(api, "tiny", ["six"])
    job(api, ["true"], "tiny")  # built here, before the warm figures
    plain, warm = [], []
    for index in range(2 * args.jobs):
        with_env = index % 2 == 1
        done = job(api, ["true"], "tiny" if with_env else None)
        (warm if with_env else plain).append(done["started_at"] - done["submitted_at"])
    base, added = percentile(plain, 50), percentile(warm, 50) - percentile(plain, 50)
    print(f"warm: submit->start p50 {base * 1000:.1f} ms with no environment, ")
    print(f"      {percentile(warm, 50) * 1000:.1f} ms with one built: {added * 1000:+.1f} ms")
    print(f"      (aim <= 10 ms added)  [{made['short_id']}]")

    started = time.perf_counter()
    stack = create(api, "stack", STACK)
    resolved = time.perf_counter() - started
    first = job(api, ["python", "-c", TIMED], "stack")
    build = first["started_at"] - first["submitted_at"] - base
    print(f"cold: resolve {resolved:.1f} s ({len(stack['packages'])} packages); build on the node")
    print(f"      {build:.1f} s (its start minus a warm one's; aim <= 15 s)")

    one = tree_bytes([env_dir(data, stack)])
    dirs = [env_dir(data, stack)]
    for extra in EXTRAS[:9]:
        version = create(api, f"stack-{extra}", [*STACK, extra])
        job(api, ["true"], f"stack-{extra}")
        dirs.append(env_dir(data, version))
    together = tree_bytes(dirs)
    print(f"disk: one {one / 2**20:.0f} MiB; ten differing in one package {together / 2**20:.0f}")
    print(f"      MiB together: {together / one:.2f}x (aim <= 1.2x)")

    python = str(env_dir(data, stack) / "bin" / "python")
    inside, outside = [], []
    for _ in range(args.imports):
        done = job(api, ["python", "-c", TIMED], "stack")
        inside.append(imported(api.get(f"/jobs/{done['id']}/logs").json()["text"]))
        ran = subprocess.run(  # as bare an environment as the job's
            [python, "-c", TIMED], capture_output=True, text=True, check=True, env=BARE
        )
        outside.append(imported(ran.stdout))
    ratio = statistics.median(inside) / statistics.median(outside)
    print(f"imports: {IMPORTS!r} median {statistics.median(inside) * 1000:.0f} ms in a job's")
    print(f"      sandbox, {statistics.median(outside) * 1000:.0f} ms on the host: {ratio:.2f}x")
    print("      (aim within 10 %)")


def gpu_held(api, name: str) -> tuple[float, float]:  # noqa: ANN001
    """A GPU job in a cold environment: from its placement to its start, and from its submit
    to its start, in seconds."""
    create(api, name, [*STACK, EXTRAS[9]])
    done = job(api, ["true"], name, gpus=1)
    events = api.get(f"/jobs/{done['id']}").json()["events"]
    placed = [event["at"] for event in events if event["reason"] == "Placed"][-1]
    return done["started_at"] - placed, done["started_at"] - done["submitted_at"]


def create(api, name: str, packages: list[str]) -> dict:  # noqa: ANN001
    body = {"name": name, "requirements": "\n".join(packages) + "\n"}
    answer = api.post("/environments", json=body, timeout=600)
    if answer.status_code != 201:
        sys.exit(f"environment {name}: {answer.text}")
    return answer.json()


def job(api, command: list[str], environment: str | None, gpus: int = 0) -> dict:  # noqa: ANN001
    body: dict[str, object] = {"command": command}
    if gpus:
        body["resources"] = {"gpus": gpus}
    if environment:
        body["environment"] = environment
    job_id = api.post("/jobs", json=body).json()["id"]
    found: dict = {}

    def ended() -> bool:
        found.update(api.get(f"/jobs/{job_id}").json())
        return found["status"] in FINAL

    wait_until(ended, 600)
    if found["status"] != "succeeded":
        sys.exit(f"job {job_id} {found['status']}: {api.get(f'/jobs/{job_id}/logs').text}")
    return found


def env_dir(data: Path, version: dict) -> Path:
    return data / "envs" / version["id"].split(":")[1]


def tree_bytes(roots: list[Path]) -> int:
    """The disk blocks below ``roots``, each inode counted once (hard links are one file)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root in roots:
        for directory, dirs, files in os.walk(root):
            for name in dirs + files:
                stat = os.lstat(os.path.join(directory, name))
                if (stat.st_dev, stat.st_ino) not in seen:
                    seen.add((stat.st_dev, stat.st_ino))
                    total += stat.st_blocks * 512
    return total


def imported(text: str) -> float:
    return float(next(line for line in text.splitlines() if line.startswith("IMPORT")).split()[1])


if __name__ == "__main__":
    main()
