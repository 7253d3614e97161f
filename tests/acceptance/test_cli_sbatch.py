"""`gpupool sbatch` through the real CLI against a real server: a Slurm batch script's
#SBATCH lines become the job (an array, a time limit, a name, a dependency), the script runs
from its directory (sent as the job's code) and sees SLURM_JOB_ID and the rest; -o and -e
write its output to files as Slurm does (below -D, or its output directory); an option
gpupool lacks is a warning, or a refusal with --strict."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import FINAL, Cli, refused, wait_for

SCRIPT = """#!/bin/sh
#SBATCH -J slurmish
#SBATCH --array=0-1
#SBATCH -t 10
#SBATCH --mail-type=END
echo "id=$SLURM_JOB_ID array=$SLURM_ARRAY_JOB_ID task=$SLURM_ARRAY_TASK_ID nodes=$SLURM_NNODES"
cat data.txt
"""


def tasks(admin: Cli, array_id: int) -> list[dict]:
    return admin.json("ls", "--array", str(array_id), "--all")


def test_a_batch_script_runs_as_an_array_with_slurms_variables(admin: Cli, tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("from the script's directory\n")
    script = tmp_path / "sweep.sh"
    script.write_text(SCRIPT)
    answer = admin("sbatch", str(script))
    assert answer.returncode == 0, answer.stderr
    assert "--mail-type=END ignored: it has no gpupool equivalent" in answer.stderr
    array_id = int(answer.stdout.strip())
    found = wait_for(
        lambda: (t := tasks(admin, array_id)) and all(x["status"] in FINAL for x in t) and t,
        what=f"array {array_id} to end",
    )
    assert [t["status"] for t in found] == ["succeeded", "succeeded"]
    for task in found:
        assert task["name"] == "slurmish" and task["spec"]["max_runtime_seconds"] == 600
        log = admin.ok("logs", str(task["id"]))
        index = task["array_index"]
        assert log == (
            f"id={task['id']} array={array_id} task={index} nodes=1\nfrom the script's directory\n"
        )


def test_dependency_and_strict(admin: Cli, tmp_path: Path) -> None:
    first = tmp_path / "first.sh"
    first.write_text("#!/bin/sh\n#SBATCH --job-name=first\nexit 1\n")
    first_id = int(admin.ok("sbatch", str(first)).strip())
    after = tmp_path / "after.sh"
    after.write_text(f"#!/bin/sh\n#SBATCH --dependency=afternotok:{first_id}\necho cleanup\n")
    after_id = int(admin.ok("sbatch", str(after)).strip())
    ended = wait_for(
        lambda: (job := admin.job(after_id))["status"] in FINAL and job,
        what=f"job {after_id} to end",
    )
    assert ended["status"] == "succeeded"
    assert ended["spec"]["depends_on"] == [{"job": first_id, "condition": "afternotok"}]
    assert admin.ok("logs", str(after_id)) == "cleanup\n"

    picky = tmp_path / "picky.sh"
    picky.write_text("#!/bin/sh\n#SBATCH --qos=high\necho no\n")
    answer = admin("sbatch", "--strict", str(picky))
    assert answer.returncode == 2 and "line 2: --qos has no gpupool equivalent" in answer.stderr
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/sh\n#SBATCH --time=whenever\n")
    answer = admin("sbatch", str(bad))
    assert answer.returncode == 2 and "error [bad_script]" in answer.stderr
    assert refused(admin("sbatch", str(tmp_path / "missing.sh")), "bad_script")


def test_output_and_error_files_are_written_where_slurm_would(
    admin: Cli, tmp_path: Path, exchange: Path
) -> None:
    runs = exchange  # a directory the job's own Unix account may write in, as -D
    shared = exchange / "shared.sh"
    shared.write_text(
        f"#!/bin/sh\n#SBATCH -J logged -D {runs} -o logs/%x-%j.out -e logs/%x-%j.err\n"
        "echo to stdout\necho to stderr >&2\nexit 4\n"
    )
    job_id = int(admin.ok("sbatch", str(shared)).strip())
    ended = wait_for(
        lambda: (job := admin.job(job_id))["status"] in FINAL and job, what=f"job {job_id}"
    )
    assert ended["status"] == "failed" and ended["exit_code"] == 4, admin.ok("logs", str(job_id))
    assert (runs / "logs" / f"logged-{job_id}.out").read_text() == "to stdout\n"
    assert (runs / "logs" / f"logged-{job_id}.err").read_text() == "to stderr\n"
    assert sorted(admin.ok("logs", str(job_id)).splitlines()) == ["to stderr", "to stdout"]

    sent = tmp_path / "sent.sh"  # no -D: a relative file is below its output directory
    sent.write_text("#!/bin/sh\n#SBATCH --output=slurm-%j.out\necho kept\n")
    job_id = int(admin.ok("sbatch", str(sent)).strip())
    assert (
        wait_for(
            lambda: (job := admin.job(job_id))["status"] in FINAL and job, what=f"job {job_id}"
        )["status"]
        == "succeeded"
    )
    admin.ok("dataset", "create", "sbatch-outs", "--from-job", str(job_id))
    files = admin.json("dataset", "show", "sbatch-outs:1")["files"]
    assert [f["path"] for f in files] == [f"slurm-{job_id}.out"]
    assert files[0]["size"] == len("kept\n")
