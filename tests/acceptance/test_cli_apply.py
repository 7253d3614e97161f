"""Job files through the real CLI against a real server: `gpupool apply -f` makes a file's
documents in one transaction (a pipeline with no script; a dataset uploaded from a directory
with the job that reads it), --dry-run checks every example of examples/ and makes nothing,
--set changes a field, and errors point at the file's line and column (a YAML syntax error,
a field the server refused)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.cli import FINAL, Cli, refused, wait_for

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def ended(admin: Cli, job_id: int) -> dict:
    return wait_for(
        lambda: (found := admin.job(job_id))["status"] in FINAL and found,
        what=f"job {job_id} to end",
    )


def job_count(admin: Cli) -> int:
    return len(admin.json("ls", "--all"))


def test_the_examples_are_five_and_cover_every_kind_but_environment() -> None:
    kinds = {
        line.split(":", 1)[1].strip()
        for path in EXAMPLES
        for line in path.read_text().splitlines()
        if line.startswith("kind:")
    }
    assert kinds == {"Job", "Dataset", "Volume", "Notebook", "Deployment"}
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_passes_a_dry_run_and_makes_nothing(admin: Cli, example: Path) -> None:
    before = job_count(admin)
    printed = admin("apply", "-f", str(example), "--dry-run")
    assert printed.returncode == 0, printed.stderr
    assert "apiVersion: gpupool/v1" in printed.stdout
    again = admin(  # from: DIR, as printed, is read relative to where apply runs
        "apply", "-f", "-", "--dry-run", "-o", "json", stdin=printed.stdout, cwd=example.parent
    )
    assert again.returncode == 0, again.stderr
    normalised = json.loads(again.stdout)  # the printed documents read back the same
    assert [d["kind"] for d in normalised] == [
        line.split(":", 1)[1].strip()
        for line in example.read_text().splitlines()
        if line.startswith("kind:")
    ]
    assert job_count(admin) == before


def test_a_pipeline_file_runs_its_jobs_in_order(admin: Cli, tmp_path: Path) -> None:
    file = tmp_path / "pipeline.yaml"
    file.write_text((REPO / "examples" / "pipeline.yaml").read_text())
    printed = admin.ok("apply", "-f", str(file), "--set", "train/resources.gpus=0.5")
    lines = printed.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["job"] * 3
    prep, train, evaluate = (int(line.split()[1]) for line in lines)
    assert lines[1].endswith("(train)")
    shown = admin.job(train)
    assert shown["spec"]["resources"]["gpus"] == 0.5
    assert shown["spec"]["depends_on"] == [{"job": prep, "condition": "afterok"}]
    assert admin.job(evaluate)["spec"]["depends_on"] == [{"job": train, "condition": "afterok"}]
    assert ended(admin, evaluate)["status"] == "succeeded"
    assert admin.ok("logs", str(evaluate)) == "500500\n"


def test_yaml_errors_and_refused_fields_point_into_the_file(admin: Cli, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: gpupool/v1\nkind: Job\nspec:\n  command: [true\n")
    answer = admin("apply", "-f", str(broken))
    assert refused(answer, "bad_job_file") and f"{broken}:5:1:" in answer.stderr

    refusal = tmp_path / "refused.yaml"
    refusal.write_text(
        "apiVersion: gpupool/v1\nkind: Job\nmetadata: {name: ok}\nspec:\n  command: [echo]\n"
        "---\napiVersion: gpupool/v1\nkind: Job\nmetadata:\n  name: bad\nspec:\n"
        "  command: [echo]\n  resources:\n    cpus: 1\n    gpus: -2\n"
    )
    before = job_count(admin)
    answer = admin("apply", "-f", str(refusal))
    assert refused(answer, "invalid_request"), answer.stderr
    assert f"{refusal}:15:5: document 2 (Job bad): spec.resources.gpus" in answer.stderr
    assert job_count(admin) == before  # the first document was not made either

    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(
        "apiVersion: gpupool/v1\nkind: Job\nspec:\n  command: [echo]\n  depends_on:\n"
        "    - afterok:nosuch\n"
    )
    answer = admin("apply", "-f", str(unknown))
    assert refused(answer, "unknown_dependency"), answer.stderr
    assert f"{unknown}:5:3: document 1 (Job): " in answer.stderr

    later = tmp_path / "later.yaml"
    later.write_text(
        "apiVersion: gpupool/v1\nkind: Job\nspec: {command: [echo], depends_on: [b]}\n---\n"
        "apiVersion: gpupool/v1\nkind: Job\nmetadata: {name: b}\nspec: {command: [echo]}\n"
    )
    answer = admin("apply", "-f", str(later))
    assert refused(answer, "invalid_request") and "comes later in the file" in answer.stderr
    assert f"{later}:3:" in answer.stderr

    odd = tmp_path / "odd.yaml"
    odd.write_text("apiVersion: gpupool/v1\nkind: Cronjob\nspec: {}\n")
    answer = admin("apply", "-f", str(odd))
    assert refused(answer, "invalid_request") and f"{odd}:2:1:" in answer.stderr
    assert "Job, Environment, Dataset, Volume, Notebook, Deployment" in answer.stderr


def test_set_and_json_output(admin: Cli, tmp_path: Path) -> None:
    file = tmp_path / "job.yaml"
    file.write_text("apiVersion: gpupool/v1\nkind: Job\nspec:\n  command: [echo, one]\n")
    printed = admin.ok(
        "apply", "-f", str(file), "--set", "metadata.name=renamed",
        "--set", "spec.command=[echo, two]", "--set", "priority=5", "-o", "json",
    )  # fmt: skip
    [made] = json.loads(printed)
    assert made["metadata"] == {"name": "renamed"} and made["spec"]["priority"] == 5
    job_id = made["status"]["id"]
    assert ended(admin, job_id)["status"] == "succeeded"
    assert admin.ok("logs", str(job_id)) == "two\n"
    bad = admin("apply", "-f", str(file), "--set", "nosuch/priority=1")
    assert bad.returncode == 2 and "no document is named 'nosuch'" in bad.stderr


def test_code_written_as_a_directory_is_sent_and_output_applies_again(
    admin: Cli, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "data.txt").write_text("sent along\n")
    file = project / "job.yaml"
    file.write_text(
        "apiVersion: gpupool/v1\nkind: Job\nmetadata: {name: coded}\n"
        "spec:\n  command: [cat, data.txt]\n  code: src\n"
    )
    made = admin("apply", "-f", str(file), "-o", "yaml")
    assert made.returncode == 0, made.stderr
    assert "sent " in made.stderr and "1 file" in made.stderr
    assert "code: sha256:" in made.stdout and "status:" in made.stdout
    again = admin("apply", "-f", "-", "--dry-run", stdin=made.stdout)  # status is not sent
    assert again.returncode == 0, again.stderr
    [document] = json.loads(admin.ok("apply", "-f", str(file), "--dry-run", "-o", "json"))
    assert document["spec"]["code"].startswith("sha256:")
    job_id = int(made.stdout.split("id: ")[1].split()[0])
    assert ended(admin, job_id)["status"] == "succeeded"
    assert admin.ok("logs", str(job_id)) == "sent along\n"
    missing = tmp_path / "missing.yaml"
    missing.write_text("apiVersion: gpupool/v1\nkind: Job\nspec: {command: [ls], code: nope}\n")
    assert refused(admin("apply", "-f", str(missing)), "bad_job_file")


def test_a_dataset_from_a_directory_is_uploaded_then_made_with_its_job(
    admin: Cli, tmp_path: Path
) -> None:
    before = job_count(admin)
    project = tmp_path / "project"
    shutil.copytree(REPO / "examples" / "data", project / "data")
    file = project / "dataset.yaml"
    text = (REPO / "examples" / "dataset.yaml").read_text()
    file.write_text(
        text.replace("name: reviews", "name: cli-reviews")
        .replace("/datasets/reviews", "/datasets/cli-reviews")
        .replace("[reviews]", "[cli-reviews]")
    )

    dry = admin("apply", "-f", str(file), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "dataset cli-reviews from data: 2 files" in dry.stderr
    assert "would send 2 blobs" in dry.stderr
    assert "from: data" in dry.stdout and "manifest" not in dry.stdout
    assert refused(admin("dataset", "show", "cli-reviews"), "not_found")
    made = admin("apply", "-f", str(file))

    assert made.returncode == 0, made.stderr
    assert "sent 2 blobs" in made.stderr  # the dry run sent none of them
    lines = made.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["dataset", "volume", "job"]
    job_id = int(lines[2].split()[1])
    assert ended(admin, job_id)["status"] == "succeeded"
    assert "/datasets/cli-reviews/train.csv" in admin.ok("logs", str(job_id))
    assert admin.job(job_id)["spec"]["datasets"][0]["version"] == 1

    (project / "data" / "more.csv").write_text("id,text,label\n7,new,1\n")
    again = admin("apply", "-f", str(file), "-o", "yaml")
    assert again.returncode == 0, again.stderr
    assert "sent 1 blob," in again.stderr
    assert "from: data" in again.stdout and "status:" in again.stdout
    assert [v["version"] for v in admin.json("dataset", "show", "cli-reviews")["versions"]] == [
        2,
        1,
    ]
    same = admin("apply", "-f", str(file), "--set", "count/command=[echo, again]")
    assert same.returncode == 0, same.stderr
    assert "the server has every file" in same.stderr
    assert same.stdout.startswith("dataset ") and "(cli-reviews)" in same.stdout
    assert len(admin.json("dataset", "show", "cli-reviews")["versions"]) == 2  # no copy

    missing = tmp_path / "missing.yaml"
    missing.write_text(
        "apiVersion: gpupool/v1\nkind: Dataset\nmetadata: {name: m}\nspec:\n  from: nowhere\n"
    )
    answer = admin("apply", "-f", str(missing))
    assert refused(answer, "not_a_directory")
    assert f"{missing}:5:3: document 1 (Dataset m): spec.from: " in answer.stderr
    theirs = project / "theirs.yaml"  # refused while uploading: at the document's from
    theirs.write_text(
        "apiVersion: gpupool/v1\nkind: Dataset\nmetadata: {name: t}\n"
        "spec:\n  team: nosuch\n  from: data\n"
    )
    answer = admin("apply", "-f", str(theirs))
    assert refused(answer, "not_found") and f"{theirs}:6:3: document 1 (Dataset t): no team" in (
        answer.stderr
    )
    unnamed = tmp_path / "unnamed.yaml"
    unnamed.write_text(
        "apiVersion: gpupool/v1\nkind: Job\nspec: {command: [true]}\n---\n"
        "apiVersion: gpupool/v1\nkind: Dataset\nspec: {from: project}\n"
    )
    answer = admin("apply", "-f", str(unnamed))
    assert refused(answer, "bad_job_file") and f"{unnamed}:5: document 2 (Dataset)" in answer.stderr
    assert job_count(admin) == before + 3  # count, once per apply above; none here
