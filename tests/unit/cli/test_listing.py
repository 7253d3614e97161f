"""`gpupool ls` names a notebook's or a deployment replica's job by its kind; a batch job, as
before (and an older server's answer without a kind, as a batch job)."""

from __future__ import annotations

from gpupool.cli.listing import name_text


def test_a_job_that_is_not_a_batch_job_shows_its_kind() -> None:
    assert name_text({"name": "lab", "kind": "notebook"}) == "lab (notebook)"
    assert name_text({"name": None, "kind": "replica"}) == "- (replica)"
    assert name_text({"name": "train", "kind": "job"}) == "train"
    assert name_text({"name": "train"}) == "train"
