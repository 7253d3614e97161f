"""`gpupool sbatch`'s reading of #SBATCH lines, over scripts written as clusters' users
write them: each option's gpupool field, Slurm's units and time formats, what is ignored
(and refused with --strict), and the wrapper that sets SLURM_* when the job runs."""

from __future__ import annotations

import re
import subprocess

import pytest

from gpupool.cli.sbatch import SbatchError, command, dependencies, options, parse, slurm_time
from gpupool.domain.jobs import JobSpec

TRAIN = """#!/bin/bash
#SBATCH --job-name=resnet50
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:a100:4
#SBATCH --cpus-per-task=8
#SBATCH --mem=256G
#SBATCH --time=1-12:00:00
#SBATCH --account=vision
#SBATCH --partition=gpu
#SBATCH --output=logs/%x-%j.out
#SBATCH --error=logs/%x-%j.err
#SBATCH --requeue
#SBATCH --signal=B:USR1@120

module load cuda/12.1
srun python train.py --epochs 90
"""

SWEEP = """#!/usr/bin/env bash
#SBATCH -J sweep
#SBATCH -a 0-99%10
#SBATCH -c 2
#SBATCH -t 45
#SBATCH --mem-per-cpu=4000
#SBATCH --gpus-per-node=1
#SBATCH --dependency=afterok:1200:1201,afterany:1202
#SBATCH --mail-type=END  # people like mail
#SBATCH --mail-user=ann@example.org
#SBATCH --exclusive
python sweep.py --trial $SLURM_ARRAY_TASK_ID
#SBATCH --time=1  # after the first command: sbatch does not read it
"""

SHORT = """#!/bin/sh
#SBATCH -N 1 -n 2 -G 2 -t 2:30:00 -D /scratch/ann/run -A nlp --no-requeue -H
#SBATCH -p debug -o out.txt
echo hello
"""


def test_a_multi_node_training_script() -> None:
    batch = parse(TRAIN)
    assert batch.spec == {
        "name": "resnet50",
        "gpu_types": ["a100"],
        "max_runtime_seconds": 129600.0,
        "team": "vision",
        "preemptible": True,
        "grace_period_seconds": 120.0,
        "nodes": 2,
        "resources": {"gpus": 4, "cpus": 32.0, "memory_bytes": 256 * 1024**3},
    }
    assert batch.slurm_env == {
        "SLURM_NNODES": "2",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NTASKS": "8",
        "SLURM_NTASKS_PER_NODE": "4",
        "SLURM_JOB_NAME": "resnet50",
        "SLURM_CPUS_PER_TASK": "8",
    }
    assert batch.interpreter == ["/bin/bash"] and batch.array is None
    assert [w.split()[0] for w in batch.warnings] == ["--partition"]
    assert (batch.output, batch.error) == ("logs/%x-%j.out", "logs/%x-%j.err")
    JobSpec.model_validate({"command": ["x"], **batch.spec, "env": batch.slurm_env})


def test_an_array_sweep_with_dependencies_and_options_gpupool_lacks() -> None:
    batch = parse(SWEEP)
    assert batch.array == "0-99%10"
    assert batch.spec["max_runtime_seconds"] == 45 * 60.0
    assert batch.spec["resources"] == {"cpus": 2.0, "memory_bytes": 2 * 4000 * 1024**2, "gpus": 1}
    assert batch.spec["depends_on"] == ["afterok:1200", "afterok:1201", "afterany:1202"]
    assert batch.interpreter == ["/usr/bin/env", "bash"]
    ignored = [w.split()[0] for w in batch.warnings]
    assert ignored == ["--mail-type=END", "--mail-user=ann@example.org", "--exclusive"]
    with pytest.raises(SbatchError, match=r"line 9: --mail-type has no gpupool equivalent"):
        parse(SWEEP, strict=True)


def test_short_forms_several_on_a_line() -> None:
    batch = parse(SHORT)
    assert batch.spec == {
        "max_runtime_seconds": 9000.0,
        "workdir": "/scratch/ann/run",
        "team": "nlp",
        "preemptible": False,
        "hold": True,
        "resources": {"gpus": 2},
    }
    assert batch.slurm_env["SLURM_NTASKS"] == "2" and batch.interpreter == ["/bin/sh"]
    assert len(batch.warnings) == 1  # -p: noted, not refused even with --strict
    assert batch.output == "out.txt"
    assert parse(SHORT, strict=True).spec == batch.spec


def test_option_forms() -> None:
    text = "#SBATCH -Jname\n#SBATCH --time 10\n#SBATCH -t5 # comment\n#SBATCH --requeue -N 3\n"
    assert options(text) == [
        (1, "--job-name", "name"),
        (2, "--time", "10"),
        (3, "--time", "5"),
        (4, "--requeue", None),
        (4, "--nodes", "3"),
    ]
    assert parse("").spec == {} and parse("echo hi\n").slurm_env["SLURM_NNODES"] == "1"


@pytest.mark.parametrize(
    ("written", "seconds"),
    [
        ("30", 1800),
        ("5:30", 330),
        ("2:00:00", 7200),
        ("1-0", 86400),
        ("1-2", 93600),
        ("1-2:30", 95400),
        ("2-00:00:10", 172810),
        ("UNLIMITED", None),
        ("0", None),
    ],
)
def test_slurm_time_limits(written: str, seconds: float | None) -> None:
    assert slurm_time(written) == seconds


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ("#SBATCH --time=soon\n", "line 1: --time=soon"),
        ("#SBATCH --gres=fpga:1\n", "gpupool gives GPUs only"),
        ("#SBATCH -N 2 --gpus=3\n", "does not split evenly over 2 nodes"),
        ("#SBATCH --nodes=many\n", "give a number of nodes"),
        ("#SBATCH --dependency=afterok:1?afterok:2\n", "'?' (any of them)"),
        ("#SBATCH --dependency=singleton\n", "afterok, afterany and afternotok"),
        ("#SBATCH --mem=lots\n", "write a size"),
        ("#SBATCH --cpus-per-task=0\n", "above 0"),
        ("#SBATCH --signal=USR1\n", "SIG@SECONDS"),
        ("#SBATCH -J\n", "--job-name needs a value"),
        ("#SBATCH -o out-%q.txt\n", "%q has no gpupool equivalent"),
        ("#SBATCH --error=e%\n", "% has no gpupool equivalent"),
    ],
)
def test_what_cannot_be_read_is_refused_with_its_line(script: str, problem: str) -> None:
    with pytest.raises(SbatchError, match=re.escape(problem)):
        parse(script)


def test_memory_units_and_gpu_forms() -> None:
    assert parse("#SBATCH --mem=512\n").spec["resources"]["memory_bytes"] == 512 * 1024**2
    assert parse("#SBATCH --mem=2T\n").spec["resources"]["memory_bytes"] == 2 * 1024**4
    assert parse("#SBATCH --mem=1.5G\n").spec["resources"]["memory_bytes"] == int(1.5 * 1024**3)
    assert parse("#SBATCH --gres=gpu\n").spec["resources"]["gpus"] == 1
    assert parse("#SBATCH --gpus=h100:8\n").spec == {
        "resources": {"gpus": 8},
        "gpu_types": ["h100"],
    }
    assert dependencies("afterok:12+30,afternotok:13") == ["afterok:12", "afternotok:13"]


def test_the_wrapper_sets_slurm_variables_from_gpupools(tmp_path) -> None:  # noqa: ANN001
    script = tmp_path / "job.sh"
    script.write_text(
        'echo "$SLURM_JOB_ID $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_NODEID $1"\n'
    )
    run = command(parse("#!/bin/sh\n"), str(script))
    env = {"PATH": "/usr/bin:/bin", "GPUPOOL_JOB_ID": "41"}
    plain = subprocess.run(run, env=env, capture_output=True, text=True, check=True)
    assert plain.stdout == "41   0 \n"
    env |= {"GPUPOOL_ARRAY_ID": "40", "GPUPOOL_ARRAY_INDEX": "1", "GPUPOOL_TASK_INDEX": "1"}
    env["GPUPOOL_ARRAY_TASK_COUNT"] = "2"
    task = subprocess.run(run, env=env, capture_output=True, text=True, check=True)
    assert task.stdout == "41 40 1 1 \n"


def test_output_and_error_files_are_written_as_well_as_the_log(tmp_path) -> None:  # noqa: ANN001
    script = tmp_path / "job.sh"
    script.write_text('echo "out $1"\necho "err $$" >&2\nexit 3\n')
    outputs = tmp_path / "outputs"
    env = {"PATH": "/usr/bin:/bin", "GPUPOOL_JOB_ID": "41", "GPUPOOL_OUTPUT_DIR": str(outputs)}

    def run(head: str, *args: str) -> subprocess.CompletedProcess:
        wrapper = command(parse(f"#!/bin/sh\n{head}"), str(script))
        return subprocess.run([*wrapper, *args], env=env, capture_output=True, text=True)

    both = run("#SBATCH -o logs/%x-%j.out\n", "one")
    assert both.returncode == 3  # the script's status, through tee
    assert both.stdout.startswith("out one\nerr ")  # the job's log has it all still
    assert (outputs / "logs" / "job.sh-41.out").read_text() == both.stdout
    apart = run("#SBATCH -J 'my run' -o 'o %x.txt' -e 'e-$HOME-`id`-%a%%.txt'\n")
    assert apart.returncode == 3
    assert (outputs / "o my run.txt").read_text() == "out \n" == apart.stdout
    written = outputs / "e-$HOME-`id`-4294967294%.txt"  # $ and ` are not the shell's
    assert written.read_text() == apart.stderr and apart.stderr.startswith("err ")
    env |= {"GPUPOOL_ARRAY_ID": "40", "GPUPOOL_ARRAY_INDEX": "2", "GPUPOOL_ARRAY_TASK_COUNT": "3"}
    errors = run(f"#SBATCH -e {tmp_path}/errs/%A_%a.err\n")
    assert errors.stdout == "out \n" and errors.stderr.startswith("err ")
    assert (tmp_path / "errs" / "40_2.err").read_text() == errors.stderr
