"""Every job `gpupool run`'s flags can express round-trips through a job file: `run --dry-run
-o yaml FLAGS` prints a document that `apply -f - --dry-run` reads back unchanged, and its
body is, field for field, the body `run FLAGS` sends to POST /api/v1/jobs (a property test
against a real server, the CLI driven in-process).

Every flag that makes a job is drawn (all but --code, which uploads the working directory,
and --follow, which only waits): resources, several nodes with a launcher, the Python
environment (--env NAME[@ID]), an image, datasets, a volume, dependencies, an array,
retries, priority, preemption, the run time and grace period. What they name exists on the
server (made once per module), so the server's dry run checks them as a submit would."""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML
from typer.testing import CliRunner

from gpupool.client.api import Client
from gpupool.domain.jobfiles import JobBody
from gpupool.main import build_app
from tests.support.cli import Cli
from tests.support.images import ImageConfig, Layout, base_members, layer
from tests.support.server import ServerProcess

NAME = st.text(string.ascii_letters + string.digits + "-_", min_size=1, max_size=20)
WORD = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12).filter(
    lambda w: w.strip() and not w.startswith("-")
)
ENV_NAME = st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: not n.startswith("GPUPOOL_")
)


@dataclass(frozen=True)
class Named:
    """What the drawn flags may name, made on the server: a registered environment and
    its version's id, an imported image, a dataset (version 1), a volume, two jobs and the
    admin's team."""

    environment: str
    environment_id: str
    image: str
    dataset: str
    volume: str
    jobs: tuple[tuple[int, str], ...]  # ids and names
    team: str


@pytest.fixture(scope="module")
def named(pool: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Named:
    admin = Cli(pool.url, pool.token)
    made = tmp_path_factory.mktemp("named")
    made.chmod(0o755)
    prefix = made / "prefix"
    (prefix / "bin").mkdir(parents=True)
    admin.ok("env", "register", "rt-env", "--path", str(prefix))
    [version] = admin.json("env", "show", "rt-env")["versions"]
    layout = Layout(made / "layout")
    layout.add("tool:1", [layer(base_members())], ImageConfig())
    archive = layout.docker_archive("tool:1", made / "tool.tar", "tool:1")
    admin.ok("image", "import", str(archive), "--name", "rt/tool:1")
    (made / "rows.txt").write_text("one\ntwo\n")
    admin.ok("dataset", "create", "rt-data", "--from", str(made / "rows.txt"))
    admin.ok("volume", "create", "rt-vol")
    jobs = tuple((admin.submit("--name", name, "--", "true"), name) for name in ("up", "up2"))
    team = admin.json("whoami")["teams"][0]
    return Named("rt-env", version["id"], "rt/tool:1", "rt-data", "rt-vol", jobs, team)


@st.composite
def flags(draw: st.DrawFn, named: Named) -> list[str]:
    """``gpupool run`` flags of a job a 4-GPU node can run, each present or not."""
    chosen: list[str] = []

    def maybe(flag: str, values: st.SearchStrategy[Any]) -> Any:
        value = draw(st.none() | values)
        if value is not None:
            chosen.extend([flag, str(value)])
        return value

    gang = draw(st.booleans())
    if gang:  # over nodes: whole GPUs per node, a launcher, its options
        maybe("--nodes", st.sampled_from([1, 2]))
        gpus = maybe(
            draw(st.sampled_from(["--gpus", "--gpus-per-node"])), st.sampled_from(["1", "2"])
        )  # noqa: E501
        launcher = maybe("--launcher", st.sampled_from(["torch", "tensorflow", "mpi"]))
        if launcher == "torch" and draw(st.booleans()):
            chosen.append("--torchrun")
        if draw(st.booleans()):
            chosen.append("--allow-cross-fabric")
    else:
        gpus = maybe("--gpus", st.sampled_from(["0.25", "0.5", "1", "2"]))
    if gpus is not None and draw(st.booleans()):
        chosen.extend(["--gpu-type", "A100"])
    if gpus is not None:
        maybe("--gpu-memory", st.sampled_from(["8GiB", "20GiB"]))
    maybe("--cpus", st.sampled_from(["0.5", "1", "2", "8"]))
    maybe("--memory", st.sampled_from(["512MiB", "4GiB", "16GB"]))
    maybe("--pids", st.sampled_from([64, 1024]))
    maybe("--name", NAME)
    maybe("--priority", st.integers(-100, 100))
    maybe("--max-runtime", st.sampled_from(["90s", "30m", "2h"]))
    maybe("--grace-period", st.sampled_from(["10s", "60s"]))
    maybe("--array", st.sampled_from(["0-3", "1,3,5-7", "0-9%2"]))
    maybe("--retries", st.integers(0, 3))
    for name, value in draw(st.dictionaries(ENV_NAME, WORD, max_size=3)).items():
        chosen.extend(["--env", f"{name}={value}"])
    preemptible = draw(st.none() | st.booleans())
    if preemptible is not None:
        chosen.append("--preemptible" if preemptible else "--no-preemptible")
    if not gang and draw(st.booleans()):  # over several nodes: the nodes' network
        chosen.extend(["--network", "isolated"])
    maybe("--team", st.just(named.team))
    # what runs it: the Python environment (--env NAME[@ID]) or an image, not both
    image = None
    environment = f"{named.environment}@{named.environment_id}"
    if draw(st.booleans()):
        maybe("--env", st.sampled_from([named.environment, environment]))
    else:
        image = maybe("--image", st.just(named.image))
    uses = [
        named.dataset,
        f"{named.dataset}:1",
        f"{named.dataset}:/in",
        f"{named.dataset}:latest:/d",
    ]  # noqa: E501
    maybe("--dataset", st.sampled_from(uses))
    maybe("--volume", st.sampled_from([f"{named.volume}:/scratch", f"{named.volume}:/v"]))
    for job, name in named.jobs:  # each at most once, as depends_on asks
        forms = [str(job), name, f"afterany:{job}", f"afternotok:{name}", f"afterok:{job}"]
        maybe("--after", st.sampled_from(forms))
    if image is None or draw(st.booleans()):
        chosen.extend(["--workdir", draw(st.sampled_from(["", "/tmp"]))])
    return chosen


@pytest.fixture
def cli_env(admin: Cli) -> dict[str, str]:
    return {"GPUPOOL_URL": admin.url, "GPUPOOL_TOKEN": admin.token or ""}


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), command=st.lists(WORD, min_size=1, max_size=3))
def test_flags_round_trip_through_a_job_file(
    cli_env: dict[str, str],
    named: Named,
    monkeypatch: pytest.MonkeyPatch,
    data: st.DataObject,
    command: list[str],
) -> None:
    chosen = data.draw(flags(named), label="flags")
    runner, app = CliRunner(), build_app()
    printed = runner.invoke(
        app, ["run", "--dry-run", "-o", "yaml", *chosen, "--", *command], env=cli_env
    )
    assert printed.exit_code == 0, printed.output
    document = YAML(typ="safe").load(printed.stdout)

    read = runner.invoke(
        app, ["apply", "-f", "-", "--dry-run", "-o", "json"], input=printed.stdout, env=cli_env
    )
    assert read.exit_code == 0, read.output
    assert json.loads(read.stdout) == [document]  # read back unchanged

    sent: list[tuple[dict, Any]] = []

    def submit(_self: Client, spec: dict, array: Any = None) -> dict:
        sent.append((spec, array))  # what run sends, answered as a server would
        return {"id": 1, "size": 1, "indexes": array, "max_running": None}

    monkeypatch.setattr(Client, "submit", submit)
    submitted = runner.invoke(app, ["run", *chosen, "--", *command], env=cli_env)
    assert submitted.exit_code == 0, submitted.output
    [(spec, array)] = sent
    body = spec | ({"array": {"indexes": array}} if array is not None else {})
    expected = JobBody.model_validate(body).model_dump(mode="json", exclude_defaults=True)
    applied = document["spec"] | (
        {"name": document["metadata"]["name"]} if "metadata" in document else {}
    )
    assert JobBody.model_validate(applied).model_dump(mode="json", exclude_defaults=True) == (
        expected
    )
