"""Katib's Experiment (kubeflow.org/v1beta1) translated into a gpupool experiment: every field
honoured, mapped, refused with a stable code, or named in a notice; and Katib's own example
manifests (../shared/data/manifests/katib, SOURCES.md there) translated as it says."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gpupool.domain.experiments import ExperimentSpec, fill
from gpupool.domain.jobfiles import Notice
from gpupool.domain.jobs import JobSpec
from gpupool.errors import (
    ImageNotAvailable,
    InvalidRequest,
    KatibAlgorithmNotSupported,
    KubeflowInvalid,
    KubeflowNotSupported,
)
from gpupool.services.kubeflow._katib import experiment_from_katib
from gpupool.services.kubeflow._ports import ImageFacts, Storage

KATIB = Path("data/manifests/katib")
IMAGE = "ghcr.io/kubeflow/katib/pytorch-mnist-cpu:latest"


class FakeLookups:
    """The site as a translation sees it: images by reference, no volumes, one class."""

    def __init__(self, images: Mapping[str, ImageFacts] | None = None) -> None:
        self.images = dict(images or {})

    def image(self, reference: str, team: str | None) -> ImageFacts | None:
        return self.images.get(reference)

    def storage(self, name: str, team: str | None) -> Storage | None:
        return None

    @property
    def priority_classes(self) -> Mapping[str, int]:
        return {"high": 100}


def katib_doc() -> dict[str, Any]:
    """A small Katib Experiment: random search over lr, a batch/v1 Job trial."""
    return {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Experiment",
        "metadata": {"name": "search"},
        "spec": {
            "objective": {"type": "maximize", "objectiveMetricName": "accuracy", "goal": 0.99},
            "algorithm": {"algorithmName": "random"},
            "parallelTrialCount": 2,
            "maxTrialCount": 8,
            "maxFailedTrialCount": 1,
            "parameters": [
                {
                    "name": "lr",
                    "parameterType": "double",
                    "feasibleSpace": {"min": "0.01", "max": "0.1"},
                }
            ],
            "trialTemplate": {
                "primaryContainerName": "train",
                "trialParameters": [{"name": "learningRate", "reference": "lr"}],
                "trialSpec": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "spec": {
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "train",
                                        "image": IMAGE,
                                        "command": ["python3", "train.py"],
                                        "args": ["--lr=${trialParameters.learningRate}"],
                                    }
                                ],
                                "restartPolicy": "Never",
                            }
                        }
                    },
                },
            },
        },
    }


def translate(
    doc: dict[str, Any], lookups: FakeLookups | None = None, ignore_image: bool = True
) -> tuple[ExperimentSpec, list[Notice]]:
    return experiment_from_katib(doc, lookups or FakeLookups(), ignore_image=ignore_image)


def notice(notices: list[Notice], field: str) -> str:
    found = [n.message for n in notices if n.field == field]
    assert found, f"no notice on {field}: {[n.field for n in notices]}"
    return found[0]


def refused(doc: dict[str, Any], error: type[InvalidRequest]) -> InvalidRequest:
    with pytest.raises(error) as caught:
        translate(doc)
    return caught.value


def field_of(error: InvalidRequest) -> str:
    return str(error.details["fields"][0]["field"])


def container(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]


def first_trial(spec: ExperimentSpec, params: dict[str, Any]) -> JobSpec:
    """The job a trial with ``params`` runs, as the experiments' service makes it."""
    return JobSpec.model_validate({**fill(spec.trial, params), "team": "t"})


# -- the experiment as a whole ----------------------------------------------------------------


def test_a_small_experiment_maps_field_by_field() -> None:
    spec, notices = translate(katib_doc())
    assert spec.name == "search"
    assert (spec.objective.metric, spec.objective.direction) == ("accuracy", "maximize")
    assert spec.objective.goal == 0.99
    assert spec.sampler.name == "random" and spec.stopping.name == "none"
    assert (spec.max_concurrent, spec.max_trials, spec.max_failed) == (2, 8, 1)
    assert spec.parameters["lr"].model_dump(exclude_defaults=True) == {
        "type": "float",
        "low": 0.01,
        "high": 0.1,
    }
    assert spec.trial == {"command": ["python3", "train.py", "--lr=${params.lr}"], "nodes": 1}
    assert first_trial(spec, {"lr": 0.05}).command == ["python3", "train.py", "--lr=0.05"]
    assert "gpupool.metrics.log(accuracy=value)" in notice(notices, "spec.metricsCollectorSpec")
    assert "max of accuracy" in notice(notices, "spec.objective.metricStrategies")


def test_wrong_kind_and_missing_parts_are_invalid() -> None:
    doc = katib_doc()
    doc["kind"] = "Suggestion"
    assert field_of(refused(doc, KubeflowInvalid)) == "kind"
    doc = katib_doc()
    del doc["metadata"]["name"]
    assert refused(doc, KubeflowInvalid).code == "kubeflow_invalid"
    doc = katib_doc()
    doc["spec"]["objective"]["type"] = "lowest"
    assert field_of(refused(doc, KubeflowInvalid)) == "spec.objective.type"


def test_counts_katib_leaves_out_get_katibs_defaults_or_a_notice() -> None:
    doc = katib_doc()
    for key in ("parallelTrialCount", "maxTrialCount", "maxFailedTrialCount"):
        del doc["spec"][key]
    spec, notices = translate(doc)
    assert spec.max_concurrent == 3  # Katib's default parallelism
    assert spec.max_trials == 20 and spec.max_failed == 20  # no limit of failures
    assert "at most 20 trials" in notice(notices, "spec.maxTrialCount")


def test_a_count_the_experiment_cannot_take_is_invalid() -> None:
    doc = katib_doc()
    doc["spec"]["maxTrialCount"] = 1_000_000
    error = refused(doc, KubeflowInvalid)
    assert "max_trials" in error.message


def test_the_queue_label_names_the_team_and_the_trial_has_none() -> None:
    doc = katib_doc()
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "vision", "app": "x"}
    spec, notices = translate(doc)
    assert spec.team == "vision" and "team" not in spec.trial
    assert "labels" in notice(notices, "metadata.labels.app")


def test_fields_gpupool_does_not_use_are_named() -> None:
    doc = katib_doc()
    doc["spec"]["resumePolicy"] = "LongRunning"
    doc["spec"]["someFutureField"] = {"a": 1}
    doc["spec"]["objective"]["additionalMetricNames"] = ["loss"]
    doc["spec"]["metricsCollectorSpec"] = {"collector": {"kind": "File"}}
    _, notices = translate(doc)
    assert "pause" in notice(notices, "spec.resumePolicy")
    assert notice(notices, "spec.someFutureField") == "gpupool does not use this field"
    assert "only the objective" in notice(notices, "spec.objective.additionalMetricNames")
    assert "gpupool.metrics.log" in notice(notices, "spec.metricsCollectorSpec")


def test_nas_is_refused() -> None:
    doc = katib_doc()
    doc["spec"]["nasConfig"] = {"graphConfig": {"numLayers": 8}}
    assert field_of(refused(doc, KubeflowNotSupported)) == "spec.nasConfig"


# -- the objective's metric strategies ---------------------------------------------------------


def test_latest_strategy_is_honoured_and_min_is_named() -> None:
    doc = katib_doc()
    doc["spec"]["objective"]["metricStrategies"] = [{"name": "accuracy", "value": "latest"}]
    _, notices = translate(doc)
    assert not [n for n in notices if n.field.startswith("spec.objective.metricStrategies")]
    doc["spec"]["objective"]["metricStrategies"] = [
        {"name": "accuracy", "value": "min"},
        {"name": "loss", "value": "latest"},
    ]
    _, notices = translate(doc)
    assert "min of accuracy" in notice(notices, "spec.objective.metricStrategies.0.value")
    assert "only the objective" in notice(notices, "spec.objective.metricStrategies.1")


# -- algorithms -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("katib", "sampler"),
    [("random", "random"), ("grid", "grid"), ("tpe", "tpe"), ("cmaes", "cmaes"), ("sobol", "qmc")],
)
def test_samplers_map_to_optunas(katib: str, sampler: str) -> None:
    doc = katib_doc()
    doc["spec"]["algorithm"] = {"algorithmName": katib}
    if katib == "grid":
        doc["spec"]["parameters"][0]["feasibleSpace"]["step"] = "0.01"
    assert translate(doc)[0].sampler.name == sampler


def test_random_state_is_the_seed_and_other_settings_are_named() -> None:
    doc = katib_doc()
    doc["spec"]["algorithm"] = {
        "algorithmName": "multivariate-tpe",
        "algorithmSettings": [
            {"name": "random_state", "value": "42"},
            {"name": "n_startup_trials", "value": "5"},
        ],
    }
    spec, notices = translate(doc)
    assert (spec.sampler.name, spec.sampler.seed) == ("tpe", 42)
    assert "multivariate" in notice(notices, "spec.algorithm.algorithmName")
    assert "n_startup_trials" in notice(notices, "spec.algorithm.algorithmSettings.1")


def test_a_seed_that_is_no_whole_number_is_invalid() -> None:
    doc = katib_doc()
    doc["spec"]["algorithm"]["algorithmSettings"] = [{"name": "random_state", "value": "-1"}]
    error = refused(doc, KubeflowInvalid)
    assert field_of(error) == "spec.algorithm.algorithmSettings.0.value"


@pytest.mark.parametrize("name", ["bayesianoptimization", "hyperband", "enas", "darts", "pbt", "x"])
def test_other_algorithms_are_refused_with_a_code_of_their_own(name: str) -> None:
    doc = katib_doc()
    doc["spec"]["algorithm"] = {"algorithmName": name}
    error = refused(doc, KatibAlgorithmNotSupported)
    assert error.code == "katib_algorithm_not_supported" and error.status == 422
    assert field_of(error) == "spec.algorithm.algorithmName"
    assert name in error.message


def test_medianstop_is_the_median_rule_with_katibs_defaults() -> None:
    doc = katib_doc()
    doc["spec"]["earlyStopping"] = {"algorithmName": "medianstop"}
    spec, notices = translate(doc)
    assert spec.stopping.model_dump(include={"name", "min_trials", "grace", "time_metric"}) == {
        "name": "median",
        "min_trials": 3,
        "grace": 4.0,
        "time_metric": "step",
    }
    assert "step=N" in notice(notices, "spec.earlyStopping.algorithmName")


def test_other_early_stopping_is_refused() -> None:
    doc = katib_doc()
    doc["spec"]["earlyStopping"] = {"algorithmName": "asha"}
    assert field_of(refused(doc, KatibAlgorithmNotSupported)) == "spec.earlyStopping.algorithmName"


# -- parameters -------------------------------------------------------------------------------


def with_parameter(kind: str, space: dict[str, Any], name: str = "p") -> dict[str, Any]:
    doc = katib_doc()
    doc["spec"]["parameters"].append({"name": name, "parameterType": kind, "feasibleSpace": space})
    return doc


def test_int_discrete_and_categorical_parameters() -> None:
    doc = with_parameter("int", {"min": "1", "max": "9", "step": "2"}, "layers")
    doc["spec"]["parameters"] += [
        {"name": "batch", "parameterType": "discrete", "feasibleSpace": {"list": ["16", "0.5"]}},
        {"name": "opt", "parameterType": "categorical", "feasibleSpace": {"list": ["sgd", "adam"]}},
    ]
    parameters = translate(doc)[0].parameters
    assert parameters["layers"].grid() == [1, 3, 5, 7, 9]
    assert parameters["batch"].choices == [16, 0.5]
    assert parameters["opt"].choices == ["sgd", "adam"]


def test_log_uniform_is_log_and_its_step_is_named() -> None:
    doc = with_parameter("double", {"min": "1e-4", "max": "0.1", "distribution": "logUniform"})
    assert translate(doc)[0].parameters["p"].log
    doc["spec"]["parameters"][1]["feasibleSpace"]["step"] = "0.01"
    spec, notices = translate(doc)
    assert spec.parameters["p"].step is None
    assert "no step" in notice(notices, "spec.parameters.1.feasibleSpace.step")


@pytest.mark.parametrize(
    ("kind", "space", "error", "field"),
    [
        (
            "double",
            {"min": "1", "max": "2", "distribution": "normal"},
            KubeflowNotSupported,
            "distribution",
        ),
        ("double", {"min": "2", "max": "1"}, KubeflowInvalid, ""),
        ("double", {"min": "a", "max": "1"}, KubeflowInvalid, "min"),
        ("double", {"max": "1"}, KubeflowInvalid, "min"),
        ("int", {"min": "1", "max": "2", "list": ["1"]}, KubeflowInvalid, "list"),
        ("categorical", {"list": ["a"], "max": "2"}, KubeflowInvalid, "max"),
        ("discrete", {"list": ["a"]}, KubeflowInvalid, "list"),
        ("int", {"min": "0.5", "max": "2"}, KubeflowInvalid, ""),
    ],
)
def test_parameters_gpupool_cannot_search_are_refused(
    kind: str, space: dict[str, Any], error: type[InvalidRequest], field: str
) -> None:
    where = "spec.parameters.1.feasibleSpace" + (f".{field}" if field else "")
    assert field_of(refused(with_parameter(kind, space), error)) == where


def test_unknown_parameter_type_is_invalid() -> None:
    doc = with_parameter("unknown", {"min": "1", "max": "2"})
    assert field_of(refused(doc, KubeflowInvalid)) == "spec.parameters.1.parameterType"


def test_a_name_a_placeholder_cannot_hold_is_renamed() -> None:
    doc = katib_doc()
    doc["spec"]["parameters"][0]["name"] = "learning-rate"
    doc["spec"]["trialTemplate"]["trialParameters"][0]["reference"] = "learning-rate"
    spec, notices = translate(doc)
    assert list(spec.parameters) == ["learning_rate"]
    assert spec.trial["command"][-1] == "--lr=${params.learning_rate}"
    assert "learning_rate" in notice(notices, "spec.parameters.0.name")


def test_a_parameter_no_trial_parameter_uses_is_named() -> None:
    doc = with_parameter("int", {"min": "1", "max": "3"}, "unused")
    _, notices = translate(doc)
    assert "GPUPOOL_PARAMS" in notice(notices, "spec.parameters.1.name")


# -- the grid ---------------------------------------------------------------------------------


def test_a_float_grid_lands_on_its_decimals() -> None:
    doc = katib_doc()
    doc["spec"]["algorithm"] = {"algorithmName": "grid"}
    doc["spec"]["parameters"][0]["feasibleSpace"] = {"min": "0.1", "max": "0.3", "step": "0.1"}
    assert translate(doc)[0].parameters["lr"].grid() == [0.1, 0.2, 0.3]


def test_a_float_grid_without_a_step_is_invalid() -> None:
    doc = katib_doc()
    doc["spec"]["algorithm"] = {"algorithmName": "grid"}
    error = refused(doc, KubeflowInvalid)
    assert "grid search needs a step" in error.message


# -- the trial template -----------------------------------------------------------------------


def test_the_batch_jobs_container_is_the_trial() -> None:
    doc = katib_doc()
    job = doc["spec"]["trialTemplate"]["trialSpec"]["spec"]
    job.update(activeDeadlineSeconds=600, backoffLimit=2, ttlSecondsAfterFinished=60)
    container(doc).update(
        resources={"limits": {"cpu": "500m", "memory": "2Gi", "nvidia.com/gpu": 1}},
        env=[{"name": "LR", "value": "${trialParameters.learningRate}"}],
        workingDir="/work",
    )
    spec, notices = translate(doc)
    assert spec.trial["resources"] == {"gpus": 1.0, "cpus": 0.5, "memory_bytes": 2 * 1024**3}
    assert spec.trial["env"] == {"LR": "${params.lr}"}
    assert (spec.trial["max_runtime_seconds"], spec.trial["retries"]) == (600.0, 2)
    assert spec.trial["workdir"] == "/work"
    assert first_trial(spec, {"lr": 0.02}).env == {"LR": "0.02"}
    assert "ended job" in notice(
        notices, "spec.trialTemplate.trialSpec.spec.ttlSecondsAfterFinished"
    )


def test_the_containers_image_is_a_gpupool_image_or_refused() -> None:
    images = {IMAGE: ImageFacts(name="katib-mnist")}
    spec, _ = translate(katib_doc(), FakeLookups(images), ignore_image=False)
    assert spec.trial["image"] == "katib-mnist"
    error = refused_image(katib_doc())
    assert error.code == "image_not_available"


def refused_image(doc: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(ImageNotAvailable) as caught:
        translate(doc, FakeLookups(), ignore_image=False)
    return caught.value


def test_template_fields_katib_alone_reads_are_named() -> None:
    doc = katib_doc()
    doc["spec"]["trialTemplate"].update(
        retain=True,
        successCondition="status.conditions.#(type=Complete)#|#(status=True)#",
        failureCondition="status.conditions.#(type=Failed)#|#(status=True)#",
        primaryPodLabels={"training.kubeflow.org/job-role": "master"},
    )
    doc["spec"]["trialTemplate"]["trialSpec"]["spec"]["suspend"] = True
    spec, notices = translate(doc)
    for key in ("retain", "successCondition", "failureCondition", "primaryPodLabels"):
        assert notice(notices, f"spec.trialTemplate.{key}")
    assert "hold" not in spec.trial
    assert "not submitted held" in notice(notices, "spec.trialTemplate.trialSpec.spec.suspend")


def test_metadata_references_are_written_in_and_the_trials_name_refused() -> None:
    doc = katib_doc()
    template = doc["spec"]["trialTemplate"]
    template["trialParameters"].append({"name": "kind", "reference": "${trialSpec.Kind}"})
    container(doc)["args"].append("--kind=${trialParameters.kind}")
    assert translate(doc)[0].trial["command"][-1] == "--kind=Job"
    template["trialParameters"][1]["reference"] = "${trialSpec.Name}"
    error = refused(doc, KubeflowNotSupported)
    assert "GPUPOOL_TRIAL_ID" in error.message
    assert field_of(error) == "spec.trialTemplate.trialParameters.1.reference"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"args": ["--lr=${trialParameters.nope}"]}, "spec.trialTemplate.trialSpec"),
        ({"name": "other"}, "spec.trialTemplate.primaryContainerName"),
    ],
)
def test_a_template_katib_would_refuse_is_invalid(change: dict[str, Any], field: str) -> None:
    doc = katib_doc()
    container(doc).update(change)
    assert field_of(refused(doc, KubeflowInvalid)) == field


def test_a_reference_to_no_parameter_is_invalid() -> None:
    doc = katib_doc()
    doc["spec"]["trialTemplate"]["trialParameters"][0]["reference"] = "momentum"
    error = refused(doc, KubeflowInvalid)
    assert field_of(error) == "spec.trialTemplate.trialParameters.0.reference"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"configMap": {"configMapName": "t"}}, "spec.trialTemplate.configMap"),
        ({"trialSpec": {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow"}}, "kind"),
    ],
)
def test_trial_sources_gpupool_cannot_run_are_refused(change: dict[str, Any], field: str) -> None:
    doc = katib_doc()
    doc["spec"]["trialTemplate"].update(change)
    assert field_of(refused(doc, KubeflowNotSupported)).endswith(field)


def test_a_job_that_runs_its_pod_more_than_once_is_refused() -> None:
    doc = katib_doc()
    doc["spec"]["trialTemplate"]["trialSpec"]["spec"]["parallelism"] = 2
    error = refused(doc, KubeflowNotSupported)
    assert field_of(error) == "spec.trialTemplate.trialSpec.spec.parallelism"


# -- Katib's own examples (../shared/data/manifests/katib) ------------------------------------


def manifest(shared_dir: Path, name: str) -> dict[str, Any]:
    path = shared_dir / KATIB / f"examples__v1beta1__{name}.yaml"
    return YAML(typ="safe").load(path.read_text())


def test_random_example(shared_dir: Path) -> None:
    spec, notices = translate(manifest(shared_dir, "hp-tuning__random"))
    assert (spec.sampler.name, spec.objective.direction, spec.objective.metric) == (
        "random",
        "minimize",
        "loss",
    )
    assert spec.objective.goal == 0.001
    assert {n: (p.type, p.low, p.high) for n, p in spec.parameters.items()} == {
        "lr": ("float", 0.01, 0.05),
        "momentum": ("float", 0.5, 0.9),
    }
    assert (spec.max_concurrent, spec.max_trials, spec.max_failed) == (3, 12, 3)
    assert spec.trial["nodes"] == 1
    assert spec.trial["resources"] == {"cpus": 0.5, "memory_bytes": 1024**3}
    job = first_trial(spec, {"lr": 0.02, "momentum": 0.7})
    assert job.command[-2:] == ["--lr=0.02", "--momentum=0.7"]
    assert "StdOut" in notice(notices, "spec.metricsCollectorSpec")


def test_grid_example(shared_dir: Path) -> None:
    spec, _ = translate(manifest(shared_dir, "hp-tuning__grid"))
    assert spec.sampler.name == "grid"
    lr, momentum = spec.parameters["lr"].grid(), spec.parameters["momentum"].grid()
    assert lr == [0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.045, 0.05]
    assert momentum == [0.5, 0.6, 0.7, 0.8, 0.9]
    assert math.prod(len(p.grid()) for p in spec.parameters.values()) == 45
    assert spec.max_trials == 12  # capped by maxTrialCount
    assert first_trial(spec, {"lr": lr[-1], "momentum": momentum[-1]}).command[-2:] == [
        "--lr=0.05",
        "--momentum=0.9",
    ]


def test_median_stop_example(shared_dir: Path) -> None:
    spec, notices = translate(manifest(shared_dir, "early-stopping__median-stop"))
    assert spec.sampler.name == "random"
    assert (spec.stopping.name, spec.stopping.min_trials, spec.stopping.grace) == (
        "median",
        1,
        2.0,
    )
    assert (spec.max_concurrent, spec.max_trials, spec.max_failed) == (2, 15, 3)
    assert notice(notices, "spec.trialTemplate.retain")


def test_pytorchjob_example(shared_dir: Path) -> None:
    spec, _ = translate(manifest(shared_dir, "kubeflow-training-operator__pytorchjob-mnist"))
    assert (spec.trial["nodes"], spec.trial["launcher"]) == (2, "torch")
    assert "resources" not in spec.trial or not spec.trial["resources"].get("gpus")
    job = first_trial(spec, {"lr": 0.03, "momentum": 0.6})
    assert job.command == [
        "python3",
        "/opt/pytorch-mnist/mnist.py",
        "--epochs=1",
        "--batch-size=16",
        "--lr=0.03",
        "--momentum=0.6",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "hp-tuning__random",
        "hp-tuning__grid",
        "early-stopping__median-stop",
        "kubeflow-training-operator__pytorchjob-mnist",
    ],
)
def test_examples_need_their_image_unless_told_to_ignore_it(shared_dir: Path, name: str) -> None:
    doc = manifest(shared_dir, name)
    assert refused_image(copy.deepcopy(doc)).code == "image_not_available"
    spec, _ = translate(doc, FakeLookups({IMAGE: ImageFacts(name="mnist")}), ignore_image=False)
    assert spec.trial["image"] == "mnist"


def test_a_grid_smaller_than_max_trial_count_is_named() -> None:
    doc = katib_doc()
    doc["spec"]["algorithm"] = {"algorithmName": "grid"}
    doc["spec"]["parameters"][0]["feasibleSpace"] = {"min": "0.1", "max": "0.3", "step": "0.1"}
    spec, notices = translate(doc)
    assert spec.max_trials == 8
    assert "3 points" in notice(notices, "spec.maxTrialCount")
