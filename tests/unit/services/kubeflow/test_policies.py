"""A manifest's metadata and run policy as the job's name, team, priority, limits and hold;
minAvailable below the nodes refused as elastic training."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.errors import ElasticNotSupported, KubeflowInvalid, UnknownPriorityClass
from gpupool.services.kubeflow._fields import Fields
from gpupool.services.kubeflow._policies import (
    MAX_RETRIES,
    Policy,
    check_min_available,
    priority_of,
    read_metadata,
    read_run_policy,
    team_of,
)

QUEUE = "kueue.x-k8s.io/queue-name"
CLASS = "kueue.x-k8s.io/priority-class"


def policy_of(document: dict[str, Any]) -> tuple[Policy, dict[str, str]]:
    fields = Fields(document)
    root = fields.root()
    spec = root.map("spec")
    run = spec.map("runPolicy") if spec is not None else None
    policy = read_run_policy(run, read_metadata(root))
    return policy, {n.field: n.message for n in fields.all_notices()}


def test_metadata_gives_the_name_the_team_and_the_priority_class() -> None:
    labels = {QUEUE: "vision", CLASS: "high", "app": "mnist"}
    metadata = {"name": "train", "namespace": "kubeflow", "labels": labels, "annotations": {"a": 1}}
    policy, notices = policy_of({"metadata": metadata})
    assert policy.name == "train"
    assert policy.teams == ((f"metadata.labels.{QUEUE}", "vision"),)
    assert policy.classes == ((f"metadata.labels.{CLASS}", "high"),)
    assert "no namespaces" in notices["metadata.namespace"]
    assert "metadata.labels.app" in notices and "metadata.annotations" in notices
    assert policy_of({"metadata": {"generateName": "run-"}})[0].name == "run-"


def test_the_run_policy_maps_onto_limits_retries_and_hold() -> None:
    run = {
        "activeDeadlineSeconds": 7200,
        "backoffLimit": 4,
        "suspend": True,
        "cleanPodPolicy": "All",
        "ttlSecondsAfterFinished": 60,
        "schedulingPolicy": {"queue": "vision", "priorityClass": "low", "minResources": {}},
    }
    policy, notices = policy_of({"spec": {"runPolicy": run}})
    assert (policy.max_runtime, policy.retries, policy.hold) == (7200.0, 4, True)
    assert policy.teams == (("spec.runPolicy.schedulingPolicy.queue", "vision"),)
    assert policy.classes == (("spec.runPolicy.schedulingPolicy.priorityClass", "low"),)
    assert set(notices) == {
        "spec.runPolicy.cleanPodPolicy",
        "spec.runPolicy.ttlSecondsAfterFinished",
    }


def test_limits_beyond_gpupools_are_capped_with_a_notice() -> None:
    run = {"activeDeadlineSeconds": 10**9, "backoffLimit": 1000}
    policy, notices = policy_of({"spec": {"runPolicy": run}})
    assert policy.max_runtime == 90 * 86400.0 and policy.retries == MAX_RETRIES
    assert "spec.runPolicy.activeDeadlineSeconds" in notices
    assert "spec.runPolicy.backoffLimit" in notices


def test_min_available_below_the_nodes_is_elastic_training() -> None:
    run = (
        Fields({"minAvailable": {"schedulingPolicy": {"minAvailable": 1}}})
        .root()
        .map("minAvailable")
    )
    check_min_available(run, 1)
    with pytest.raises(ElasticNotSupported, match="below the job's 2 nodes"):
        check_min_available(run, 2)
    check_min_available(None, 4)


def test_one_team_and_one_priority_class_mapped_by_the_site() -> None:
    root = Fields({}).root()
    two = Policy(teams=(("a", "vision"), ("b", "audio")))
    with pytest.raises(KubeflowInvalid, match="audio and vision"):
        team_of(two, root)
    assert team_of(Policy(teams=(("a", "x"), ("b", "x"))), root) == "x"
    assert priority_of(Policy(classes=(("f", "high"),)), {"high": 50}, root) == 50
    assert priority_of(Policy(), {"high": 50}, root) is None
    with pytest.raises(
        UnknownPriorityClass, match=r"'urgent' is not one this site maps \(it maps high\)"
    ):
        priority_of(Policy(classes=(("f", "urgent"),)), {"high": 50}, root)
    with pytest.raises(UnknownPriorityClass, match="GPUPOOL_PRIORITY_CLASSES"):
        priority_of(Policy(classes=(("f", "high"),)), {}, root)
