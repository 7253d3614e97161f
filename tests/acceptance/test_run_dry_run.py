"""Every job `gpupool run`'s flags can express round-trips through a job file: `run --dry-run
-o yaml FLAGS` prints a document that `apply -f - --dry-run` reads back unchanged, and its
body is, field for field, the body `run FLAGS` sends to POST /api/v1/jobs (a property test
against a real server, the CLI driven in-process)."""

from __future__ import annotations

import json
import string
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

NAME = st.text(string.ascii_letters + string.digits + "-_", min_size=1, max_size=20)
WORD = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12).filter(
    lambda w: w.strip() and not w.startswith("-")
)
ENV_NAME = st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: not n.startswith("GPUPOOL_")
)


@st.composite
def flags(draw: st.DrawFn) -> list[str]:
    """``gpupool run`` flags of a job a 4-GPU node can run, each present or not."""
    chosen: list[str] = []

    def maybe(flag: str, values: st.SearchStrategy[Any]) -> Any:
        value = draw(st.none() | values)
        if value is not None:
            chosen.extend([flag, str(value)])
        return value

    gpus = maybe("--gpus", st.sampled_from(["0.25", "0.5", "1", "2"]))
    if gpus is not None and draw(st.booleans()):
        chosen.extend(["--gpu-type", "A100"])
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
    if draw(st.booleans()):
        chosen.extend(["--network", "isolated"])
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
@given(chosen=flags(), command=st.lists(WORD, min_size=1, max_size=3))
def test_flags_round_trip_through_a_job_file(
    cli_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    chosen: list[str],
    command: list[str],
) -> None:
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
