"""The report is JSON as it is, and says what a reader needs to trust it."""

from __future__ import annotations

import json

from gpupool.sim.tuning import Fidelity, JobError, Scores, Space, Trial, TuneReport

SCORES = Scores(10, 100.0, 50.0, 300.0, 20.0, 60.0, 1.5, 3, 0)


def test_a_report_is_plain_json():
    fidelity = Fidelity(4, 0.1, 0.2, 0.12, [JobError(7, 100.0, 110.0, 0.1)], 0.25)
    report = TuneReport(
        objective="avg_jct",
        decision="keep",
        reason="why",
        chosen=None,
        predicted=100.0,
        base={"order": "las", "las_thresholds": [1800.0]},
        base_holdout=SCORES,
        trials=[Trial(0, {"order": "las"}, SCORES)],
        rescored=[],
        fidelity=fidelity,
        space=Space("tpe", {"order": "las, gittins"}, {}),
        window=(0.0, 10.0),
        holdout=(10.0, 20.0),
    )
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["fidelity"]["trusted"] is True
    assert data["fidelity"]["worst"] == [
        {"job_id": 7, "observed": 100.0, "replayed": 110.0, "error": 0.1}
    ]
    assert data["trials"][0]["window"]["avg_jct"] == 100.0
    assert data["base_holdout"]["p95_wait"] == 60.0 and data["window"] == [0.0, 10.0]


def test_a_fidelity_without_jobs_is_not_trusted():
    assert not Fidelity(0, None, None, None, [], 0.25).trusted
    assert not Fidelity(5, 0.26, 0.3, 0.3, [], 0.25).trusted
    assert SCORES.objective("p95_jct") == 300.0
