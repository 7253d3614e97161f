"""Job dependencies as a spec writes them: the short string forms and the object, and what
each condition says of a job's end."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpupool.domain.dependencies import (
    Condition,
    Dependency,
    Outcome,
    never_message,
    outcome,
    waiting_message,
)
from gpupool.domain.jobs import JobSpec


@pytest.mark.parametrize(
    ("written", "job", "condition"),
    [
        (12, 12, "afterok"),
        ("12", 12, "afterok"),
        (" 12 ", 12, "afterok"),
        ("afterok:12", 12, "afterok"),
        ("afterany:7", 7, "afterany"),
        ("AfterNotOk:7", 7, "afternotok"),
        ("prep", "prep", "afterok"),
        ("afterany:prep", "prep", "afterany"),
        ("step:2", "step:2", "afterok"),  # a name with a colon, no condition before it
        ({"job": 3}, 3, "afterok"),
        ({"job": "3", "condition": "afterany"}, 3, "afterany"),
        ({"job": "train", "condition": "afternotok"}, "train", "afternotok"),
    ],
)
def test_each_form_reads_as_a_job_and_a_condition(
    written: object, job: object, condition: str
) -> None:
    dep = Dependency.model_validate(written)
    assert (dep.job, dep.condition.value) == (job, condition)


@pytest.mark.parametrize(
    "written",
    ["", "afterok:", "afterwards:12", 0, -3, True, {"job": 1, "condition": "after"}, {"id": 1}],
)
def test_a_bad_dependency_is_refused(written: object) -> None:
    with pytest.raises(ValidationError):
        Dependency.model_validate(written)


def test_a_spec_keeps_its_dependencies_in_the_object_form() -> None:
    spec = JobSpec(command=["true"], depends_on=["afterany:4", 5, "prep"])
    assert spec.model_dump(mode="json")["depends_on"] == [
        {"job": 4, "condition": "afterany"},
        {"job": 5, "condition": "afterok"},
        {"job": "prep", "condition": "afterok"},
    ]
    assert JobSpec(command=["true"]).depends_on == []
    with pytest.raises(ValidationError):
        JobSpec(command=["true"], depends_on=list(range(1, 102)))


@pytest.mark.parametrize(
    ("condition", "status", "expected"),
    [
        (Condition.AFTER_OK, "succeeded", Outcome.MET),
        (Condition.AFTER_OK, "failed", Outcome.NEVER),
        (Condition.AFTER_OK, "cancelled", Outcome.NEVER),
        (Condition.AFTER_ANY, "failed", Outcome.MET),
        (Condition.AFTER_ANY, "lost", Outcome.MET),
        (Condition.AFTER_NOT_OK, "failed", Outcome.MET),
        (Condition.AFTER_NOT_OK, "cancelled", Outcome.MET),
        (Condition.AFTER_NOT_OK, "succeeded", Outcome.NEVER),
    ],
)
def test_each_condition_of_an_ended_job(
    condition: Condition, status: str, expected: Outcome
) -> None:
    assert outcome(condition, status, final=True) is expected
    assert outcome(condition, "running", final=False) is Outcome.WAITING


def test_messages_name_the_job_and_what_it_waits_for() -> None:
    assert waiting_message(Condition.AFTER_OK, 12, "prep") == "waits for job 12 (prep) to succeed"
    assert waiting_message(Condition.AFTER_ANY, 12, None) == "waits for job 12 to end"
    said = never_message(Condition.AFTER_OK, 12, "prep", "failed")
    assert (
        said
        == "job 12 (prep) ended failed, and this job was to start only after it succeeded (afterok)"
    )
