"""What a task carries to its node of the datasets its job reads: the store's path, and with
an S3-compatible store its endpoint, bucket, prefix and region, never a credential."""

from __future__ import annotations

from pathlib import Path

from gpupool.domain.datasetrefs import DatasetUse
from gpupool.domain.jobs import JobSpec
from gpupool.loops.launch import TaskMaker
from gpupool.services.datasets import s3_of
from gpupool.settings import Settings

MANIFEST = "a" * 64


def maker(settings: Settings) -> TaskMaker:
    return TaskMaker(
        log_limit_bytes=1,
        default_grace=1.0,
        code_archive=Path,
        model_archive=Path,
        datasets_store=settings.datasets_dir,
        datasets_s3=s3_of(settings),
    )


def spec() -> JobSpec:
    use = DatasetUse(name="corpus", version=2, mount="/datasets/corpus", manifest=MANIFEST)
    return JobSpec(command=["true"], datasets=[use])


def test_with_the_posix_store_a_task_names_its_path_only(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    (carried,) = maker(settings).datasets_of(spec())
    assert carried == {
        "name": "corpus",
        "version": 2,
        "mount": "/datasets/corpus",
        "manifest": MANIFEST,
        "store": str(tmp_path / "datasets"),
    }


def test_with_the_s3_store_a_task_names_it_without_credentials(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANEVERCARRIED")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-carried")
    settings = Settings(
        data_dir=tmp_path,
        datasets_s3_endpoint="http://127.0.0.1:9000",
        datasets_s3_bucket="data",
        datasets_s3_prefix="team-pool/",
    )
    (carried,) = maker(settings).datasets_of(spec())
    assert carried["s3"] == {
        "endpoint": "http://127.0.0.1:9000",
        "bucket": "data",
        "prefix": "team-pool/",
        "region": "us-east-1",
    }
    assert "never-carried" not in repr(carried) and "AKIA" not in repr(carried)
