"""`gpupool why` of a job over two nodes on a server of one machine (4 declared A100s): it
can never start there, and says so with NoNodeBigEnough, as docs/jobs.md promises."""

from __future__ import annotations

from tests.support.cli import Cli, wait_for


def test_a_two_node_job_on_one_machine_says_no_node_big_enough(admin: Cli) -> None:
    job_id = admin.submit("--nodes", "2", "--gpus-per-node", "1", "--", "true")

    def explained() -> dict | None:
        answer = admin.json("why", str(job_id))
        decided = answer.get("code") and "waiting for the scheduler" not in answer["summary"]
        return answer if decided else None

    answer = wait_for(explained, 90.0, f"job {job_id} to be explained")
    assert answer["code"] == "NoNodeBigEnough", answer
    printed = admin.ok("why", str(job_id))
    assert "reason:     NoNodeBigEnough" in printed.splitlines()
    assert "each on a node of its own, can never start together" in printed
    assert "reserved for jobs waiting longer" not in printed
    admin.ok("cancel", str(job_id))
