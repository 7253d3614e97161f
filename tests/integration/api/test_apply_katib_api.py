"""Katib's v1beta1 Experiment through POST /api/v1/apply, in-process: the four real Katib
examples of ../shared (each read as SOURCES.md there says, their images refused unless
ignore_image), and a small Katib Experiment of batch/v1 Jobs that runs as a gpupool
experiment whose trials are jobs."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpupool.cli.jobfiles import load_documents
from gpupool.platform import Platform
from tests.support.platform import make_settings, refused, running_app, wait_for

APPLY = "/api/v1/apply"
KATIB = (
    "katib/examples__v1beta1__hp-tuning__random.yaml",
    "katib/examples__v1beta1__hp-tuning__grid.yaml",
    "katib/examples__v1beta1__early-stopping__median-stop.yaml",
    "katib/examples__v1beta1__kubeflow-training-operator__pytorchjob-mnist.yaml",
)
TRIAL = (
    "import json, os; from gpupool import metrics; "
    "lr = float(os.environ['LR']); metrics.log(step=1, loss=(lr - 0.02) ** 2)"
)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Platform]]:
    settings = make_settings(tmp_path_factory.mktemp("katib") / "data")
    with running_app(settings) as (client, platform):
        yield client, platform


def documents(shared: Path, name: str) -> list[dict[str, Any]]:
    path = shared / "data" / "manifests" / name
    return [doc.data for doc in load_documents(path.read_text(), name)]


@pytest.mark.parametrize("name", KATIB)
def test_each_katib_example_is_read_as_an_experiment(
    app: tuple[TestClient, Platform], shared_dir: Path, name: str
) -> None:
    client, _ = app
    docs = documents(shared_dir, name)
    error = refused(client.post(APPLY, json={"documents": docs, "dry_run": True}), 422,
                    "image_not_available")  # fmt: skip
    assert "ignore-image" in error["message"] or "image" in error["message"]
    body = {"documents": docs, "dry_run": True, "ignore_image": True}
    answer = client.post(APPLY, json=body)
    assert answer.status_code == 200, answer.text
    made = answer.json()["documents"][0]
    assert made["kind"] == "Experiment" and made["id"] is None
    assert made["translated_from"] == "kubeflow.org/v1beta1 Experiment"
    assert made["notices"], "the metrics collector at least is named"
    spec = made["document"]["spec"]
    assert spec["objective"]["metric"]
    if "grid" in name:
        assert spec["sampler"]["name"] == "grid" and spec["max_trials"] == 12
    if "median" in name:
        assert spec["stopping"]["name"] == "median"
    assert client.get("/api/v1/experiments").json() == []  # a dry run makes nothing


def test_a_katib_experiment_of_batch_jobs_runs_its_trials_as_jobs(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    katib = {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Experiment",
        "metadata": {"name": "katib-lr"},
        "spec": {
            "objective": {"type": "minimize", "objectiveMetricName": "loss"},
            "algorithm": {
                "algorithmName": "random",
                "algorithmSettings": [{"name": "random_state", "value": "5"}],
            },  # fmt: skip
            "parallelTrialCount": 2,
            "maxTrialCount": 3,
            "maxFailedTrialCount": 1,
            "parameters": [
                {
                    "name": "lr",
                    "parameterType": "double",
                    "feasibleSpace": {"min": "0.01", "max": "0.03"},
                },  # fmt: skip
            ],
            "trialTemplate": {
                "primaryContainerName": "training",
                "trialParameters": [{"name": "learningRate", "reference": "lr"}],
                "trialSpec": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "spec": {
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "training",
                                        "image": "docker.io/library/python:3.11",
                                        "command": [sys.executable, "-c", TRIAL],
                                        "env": [
                                            {
                                                "name": "LR",
                                                "value": "${trialParameters.learningRate}",
                                            }
                                        ],
                                    }
                                ],
                                "restartPolicy": "Never",
                            }
                        }
                    },  # fmt: skip
                },
            },
        },
    }
    error = client.post(APPLY, json={"documents": [katib]}).json()["error"]
    assert error["code"] == "image_not_available", error
    answer = client.post(APPLY, json={"documents": [katib], "ignore_image": True})
    assert answer.status_code == 200, answer.text
    ref = str(answer.json()["documents"][0]["id"])

    def ended() -> dict | None:
        shown = client.get(f"/api/v1/experiments/{ref}").json()
        return shown if shown["status"] not in ("running", "paused") else None

    shown = wait_for(ended, 90, "the Katib experiment ends", 0.1)
    assert shown["status"] == "succeeded", shown["message"]
    assert [t["state"] for t in shown["trial_list"]] == ["completed"] * 3
    for trial in shown["trial_list"]:
        lr = trial["params"]["lr"]
        assert 0.01 <= lr <= 0.03 and trial["value"] == pytest.approx((lr - 0.02) ** 2)
