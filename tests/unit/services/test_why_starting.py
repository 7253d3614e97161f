"""What ``why`` says of a job that is starting while its runner prepares it: the runner's own
words for a dataset it materialises (or an environment it builds), else that it waits no
more."""

from __future__ import annotations

from gpupool.domain.jobs import JobStatus, Reason
from gpupool.services.scheduling._why import _settled
from gpupool.store.models import JobModel


def test_a_job_whose_datasets_are_materialised_says_how_far() -> None:
    message = "materialising dataset corpus:3 on this node: 12,000 of 100,000 files"
    job = JobModel(node="node-a", reason=Reason.DATASET_FETCHING.value, message=message)

    said = _settled(job, JobStatus.STARTING)

    assert said == f"it is starting on node-a, {message}"
    plain = JobModel(node="node-a", reason="Launched", message="launching")
    assert (
        _settled(plain, JobStatus.STARTING) == "it is starting on node-a: it does not wait any more"
    )
