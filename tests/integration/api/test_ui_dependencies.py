"""The job page of a job that waits for others: what it runs after, each job a link, and
why it waits (reason Dependency and the job it waits for)."""

from __future__ import annotations

import httpx

from tests.support.web import submit


def test_the_job_page_says_what_a_job_runs_after(admin: tuple[httpx.Client, str]) -> None:
    client, csrf = admin
    prep = submit(client, csrf, name="ui-prep")
    train = submit(client, csrf, depends_on=["ui-prep"])
    report = submit(client, csrf, depends_on=[f"afternotok:{prep['id']}"])
    page = client.get(f"/jobs/{train['id']}").text
    assert '<dt>Runs after</dt><dd id="spec-after">' in page
    assert f'once <a href="/jobs/{prep["id"]}">job {prep["id"]}</a> has succeeded (afterok)' in page
    assert "Dependency" in page and f"waits for job {prep['id']} (ui-prep) to succeed" in page
    other = client.get(f"/jobs/{report['id']}").text
    assert f"job {prep['id']}</a> has ended without succeeding (afternotok)" in other
    assert 'id="spec-after"' not in client.get(f"/jobs/{prep['id']}").text
    for job in (prep, train, report):
        client.post(f"/api/v1/jobs/{job['id']}/cancel", headers={"x-csrf-token": csrf})
