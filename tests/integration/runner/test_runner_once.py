"""At most once: a second runner on the same attempt directory refuses to run anything."""

from __future__ import annotations

from runner_harness import RunnerHarness, py

COUNT_RUNS = "import os; open(os.environ['GPUPOOL_OUTPUT_DIR'] + '/runs', 'a').write('x')"


def test_second_start_is_refused(harness: RunnerHarness) -> None:
    harness.write_spec(py(COUNT_RUNS))
    assert harness.run().returncode == 0
    first = harness.state()

    second = harness.run()

    assert second.returncode == 3
    assert "already started" in second.stderr
    assert (harness.output_dir / "runs").read_text() == "x"
    assert harness.state() == first


def test_started_file_alone_blocks_the_run(harness: RunnerHarness) -> None:
    harness.write_spec(py(COUNT_RUNS))
    (harness.dir / "started").write_text("")
    assert harness.run().returncode == 3
    assert not (harness.output_dir / "runs").exists()
    assert not (harness.dir / "state.json").exists()
