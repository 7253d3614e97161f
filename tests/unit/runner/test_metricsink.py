"""The runner's metric sink: each line checked, caps held, every refusal said once."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gpupool.metrics import MetricsLog
from gpupool.runner import gpusamples
from gpupool.runner.metricsink import (
    FOLLOW_SECONDS,
    Limits,
    LineError,
    MetricSink,
    parse_line,
    prepare,
)

NOW = 1000.0


@pytest.mark.parametrize(
    ("line", "points"),
    [
        (b'{"step": 3, "time": 5.5, "values": {"loss": 0.25}}', [["loss", 3, 5.5, 0.25]]),
        (b'{"step": 3, "loss": 1, "acc": 0.5}', [["loss", 3, NOW, 1.0], ["acc", 3, NOW, 0.5]]),
        (b'{"values": {"a/b.c-d_e": -2}}', [["a/b.c-d_e", None, NOW, -2.0]]),
    ],
)
def test_both_forms_of_a_line_give_points(line: bytes, points: list) -> None:
    assert parse_line(line, NOW) == points


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"step": 1}', "no values"),
        (b'{"step": -1, "values": {"x": 1}}', "step -1"),
        (b'{"step": 1.5, "values": {"x": 1}}', "step 1.5"),
        (b'{"step": true, "values": {"x": 1}}', "step True"),
        (b'{"time": "now", "values": {"x": 1}}', "time 'now'"),
        (b'{"time": Infinity, "values": {"x": 1}}', "time inf"),
        (b'{"values": {"x": NaN}}', "not a finite number"),
        (b'{"values": {"x": 1e999}}', "not a finite number"),
        (b'{"values": {"x": "1"}}', "is not a number"),
        (b'{"values": {"x": null}}', "is not a number"),
        (b'{"values": {"bad name": 1}}', "name 'bad name'"),
        (b'{"values": {"": 1}}', "name ''"),
        (json.dumps({"values": {"n" * 101: 1}}).encode(), "use 1 to 100 characters"),
        (b'{"values": {"gpu.0.utilization": 1}}', "the runner's own"),
    ],
)
def test_a_bad_line_says_what_to_fix(line: bytes, said: str) -> None:
    with pytest.raises(LineError, match=said):
        parse_line(line, NOW)


class Sink:
    """A sink on files of a temporary directory, its notes kept."""

    def __init__(self, root: Path, limits: Limits | None = None, **kwargs: object) -> None:
        self.source, self.records = root / "job.jsonl", root / "records.jsonl"
        self.source.touch()
        self.notes: list[str] = []
        self.sink = MetricSink(
            str(self.source), str(self.records), self.notes.append, limits=limits, **kwargs
        )

    def write(self, data: bytes) -> None:
        with self.source.open("ab") as f:
            f.write(data)

    def points(self) -> list[list[object]]:
        return [json.loads(line) for line in self.records.read_text().splitlines()]


def test_lines_are_taken_as_they_end_and_a_last_one_at_the_close(tmp_path: Path) -> None:
    sink = Sink(tmp_path)
    sink.write(b'{"step": 0, "values": {"a": 1}}\n{"step": 1, "values"')
    sink.sink.follow(NOW)
    assert [p[1] for p in sink.points()] == [0]
    sink.write(b': {"a": 2}}\n{"step": 2, "values": {"a": 3}}')
    sink.sink.follow(NOW)
    assert [p[1] for p in sink.points()] == [0, 1]
    sink.sink.close(NOW)
    assert [p[1] for p in sink.points()] == [0, 1, 2]
    assert sink.notes == []


def test_each_refusal_is_said_once_and_counted_at_the_end(tmp_path: Path) -> None:
    sink = Sink(tmp_path)
    sink.write(b"junk\n" * 3 + b'{"values": {"gpu.1.memory_used": 5}}\n{"values": {"ok": 1}}\n')
    sink.sink.close(NOW)
    assert sink.notes == [
        "metrics: line 1: not JSON (Expecting value: line 1 column 1 (char 0)); write one JSON "
        'object per line: {"step": 3, "values": {"loss": 0.25}}',
        "metrics: line 4: name 'gpu.1.memory_used': names starting with gpu. are the runner's own",
        "metrics: not kept: lines not JSON objects (3); lines with a bad name (1); the notes "
        "above say what to fix",
    ]
    assert [p[0] for p in sink.points()] == ["ok"]


def test_a_line_over_the_cap_is_dropped_to_its_end(tmp_path: Path) -> None:
    sink = Sink(tmp_path, Limits(line_bytes=64))
    sink.write(b"[" * 200)  # no newline yet: dropped as soon as it is over the cap
    sink.sink.follow(NOW)
    sink.write(b"[" * 200 + b'\n{"values": {"ok": 1}}\n' + b"]" * 65 + b"\n")
    sink.sink.close(NOW)
    assert [p[0] for p in sink.points()] == ["ok"]
    assert sink.sink.refused == {"lines too long": 2}
    assert sum("over 64 bytes" in note for note in sink.notes) == 1


def test_points_past_the_cap_are_counted_not_kept(tmp_path: Path) -> None:
    sink = Sink(tmp_path, Limits(points=3))
    sink.write(b'{"values": {"a": 1, "b": 2}}\n' * 3)
    sink.sink.close(NOW)
    assert len(sink.points()) == 3
    assert sink.sink.refused == {"points over the cap": 3}
    assert sum("over 3 points in this attempt" in note for note in sink.notes) == 1


def test_the_file_is_read_up_to_its_cap(tmp_path: Path) -> None:
    line = b'{"values": {"a": 1}}\n'
    sink = Sink(tmp_path, Limits(file_bytes=len(line) * 2))
    sink.write(line * 5)
    sink.sink.follow(NOW)
    sink.sink.follow(NOW)
    sink.sink.close(NOW)
    assert len(sink.points()) == 2
    assert sum("the rest is not read" in note for note in sink.notes) == 1


def test_a_file_replaced_or_truncated_is_followed_anew(tmp_path: Path) -> None:
    sink = Sink(tmp_path)
    sink.write(b'{"values": {"a": 1}}\n')
    sink.sink.follow(NOW)
    sink.source.unlink()
    sink.write(b'{"values": {"b": 1}}\n')  # a new file at the path
    sink.sink.follow(NOW)
    sink.source.write_bytes(b"")  # truncated, then a shorter line than was read
    sink.write(b'{"c": 1}\n')
    sink.sink.close(NOW)
    assert [p[0] for p in sink.points()] == ["a", "b", "c"]


def test_gpu_samples_are_named_by_the_jobs_gpu_index(tmp_path: Path) -> None:
    source = tmp_path / "gpus.json"
    source.write_text(json.dumps({"GPU-x": {"utilization": 50, "memory_used": 10}}))
    sink = Sink(tmp_path, gpus=["GPU-y", "GPU-x"], devices=gpusamples.devices(f"file:{source}"))
    sink.sink.poll(0.0, NOW)
    assert sink.points() == [
        ["gpu.1.utilization", None, NOW, 50.0],
        ["gpu.1.memory_used", None, NOW, 10.0],
    ]
    assert sink.sink.due(0.0) == pytest.approx(FOLLOW_SECONDS)  # the next follow: before a sample


def test_no_nvml_gives_no_samples() -> None:
    devices = gpusamples.NvmlDevices()
    devices.broken = True  # as after an nvmlInit that failed
    assert devices.sample(["GPU-declared"]) == {}


def test_prepare_gives_a_new_empty_file_in_a_directory_of_its_own(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    path = outputs / ".gpupool" / "metrics-1.jsonl"
    assert prepare(str(path), None) is None
    path.write_text("left over")
    assert prepare(str(path), None) is None
    assert path.read_text() == ""
    victim = tmp_path / "victim"
    victim.mkdir()
    (outputs / ".gpupool" / "metrics-2.jsonl").symlink_to(victim / "file")
    assert prepare(str(outputs / ".gpupool" / "metrics-2.jsonl"), None) is None
    assert list(victim.iterdir()) == [], "a link left there is replaced, never followed"
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".gpupool").symlink_to(victim)
    assert "is not a directory" in (prepare(str(linked / ".gpupool" / "m.jsonl"), None) or "")
    assert list(victim.iterdir()) == []


def test_the_helper_writes_one_line_per_call(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    path = tmp_path / "m.jsonl"
    log = MetricsLog(str(path))
    log.log(step=2, loss=0.5)
    log.log(acc=1)
    log.close()
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first["step"] == 2 and first["values"] == {"loss": 0.5}
    assert second["step"] is None and math.isfinite(second["time"])
    quiet = MetricsLog(None)
    quiet.log(step=1, loss=1)
    quiet.log(step=2, loss=1)
    assert capsys.readouterr().err.count("GPUPOOL_METRICS_FILE is not set") == 1
    with pytest.raises(TypeError, match="step must be an int"):
        log.log(step=1.5, loss=1)


class FakeNvml:
    """The few calls of nvidia-ml-py the sampler makes, answering for one GPU."""

    class NVMLError(Exception):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802 - NVML's names
        if uuid != "GPU-real":
            raise self.NVMLError("not found")
        return uuid

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> object:  # noqa: N802
        return type("Rates", (), {"gpu": 42, "memory": 7})()

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> object:  # noqa: N802
        return type("Memory", (), {"used": 3 * 2**30, "total": 80 * 2**30})()


def test_nvml_samples_each_gpu_it_knows() -> None:
    devices = gpusamples.NvmlDevices()
    devices.nvml = FakeNvml()  # as after a successful nvmlInit
    found = devices.sample(["GPU-declared", "GPU-real"])
    assert found == {"GPU-real": {"utilization": 42.0, "memory_used": float(3 * 2**30)}}
    assert gpusamples.points(found, ["GPU-declared", "GPU-real"], NOW) == [
        ["gpu.1.utilization", None, NOW, 42.0],
        ["gpu.1.memory_used", None, NOW, float(3 * 2**30)],
    ]
