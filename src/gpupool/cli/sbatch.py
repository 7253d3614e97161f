"""`gpupool sbatch script.sh`: a Slurm batch script run as a gpupool job.

The ``#SBATCH`` lines at the top of the script (before its first command, as sbatch reads
them; ``-x V``, ``-xV``, ``--long V`` and ``--long=V`` forms) become the job's fields:

============================  =================================================================
``#SBATCH``                   gpupool
============================  =================================================================
``-J``, ``--job-name``        ``name``
``-N``, ``--nodes``           ``nodes`` (a range ``2-4``: its least)
``--ntasks-per-node``         ``SLURM_NTASKS_PER_NODE``, ``SLURM_NTASKS`` in the job's env
                              (gpupool starts the script once per node; it starts its tasks)
``-n``, ``--ntasks``          ``SLURM_NTASKS`` (with ``-N``: per node, rounded up)
``--gres=gpu[:TYPE]:N``       ``resources.gpus`` N per node, ``gpu_types`` [TYPE]
``--gpus-per-node=[TYPE:]N``  the same
``-G``, ``--gpus=[TYPE:]N``   N GPUs in all: N / nodes per node
``-c``, ``--cpus-per-task``   ``resources.cpus``: this times the tasks per node
``--mem``                     ``resources.memory_bytes`` (per node; Slurm's units: M by default,
                              K, M, G, T suffixes)
``--mem-per-cpu``             ``resources.memory_bytes``: this times the CPUs
``-t``, ``--time``            ``max_runtime_seconds`` (minutes, MM:SS, HH:MM:SS, D-HH,
                              D-HH:MM, D-HH:MM:SS; 0 or UNLIMITED: none)
``-a``, ``--array``           ``array`` (the same syntax: ``0-9%2``, ``1,3,5-7``, ``0-99:2``)
``-D``, ``--chdir``           ``workdir`` (the script runs from there; its code is not sent)
``--dependency``              ``depends_on``: ``afterok:1:2,afterany:3``; ``?`` (any of),
                              ``aftercorr``, ``singleton`` are refused
``--signal=[B:]SIG@TIME``     ``grace_period_seconds`` TIME (gpupool sends SIGTERM, then
                              SIGKILL after the grace period)
``--requeue``                 ``preemptible`` true; ``--no-requeue``: false
``-H``, ``--hold``            ``hold``: queued held, started once released (``gpupool release``)
``-A``, ``--account``         ``team``
``-o``, ``--output``          the script's output (and its errors, without ``-e``) is also
                              written to this file, as Slurm writes it; ``gpupool logs ID``
                              still shows it all. A relative path is below the job's
                              ``$GPUPOOL_OUTPUT_DIR`` (below ``-D`` when given); ``%j``,
                              ``%J``, ``%x``, ``%A``, ``%a``, ``%N``, ``%u`` and ``%%`` are
                              replaced as Slurm does
``-e``, ``--error``           the same for the script's errors
``-p``, ``--partition``       ignored, with a warning: gpupool has one pool (ask for a GPU
                              model with ``--gres=gpu:TYPE:N``)
============================  =================================================================

Every other option is ignored with a warning; ``--strict`` refuses the script instead. The
script itself is the job's command, run by the interpreter of its ``#!`` line (``sh`` when
it has none) from its own directory, sent as the job's code (as ``gpupool run --code``
sends one), with ``SLURM_JOB_ID`` (the gpupool job's id), ``SLURM_ARRAY_JOB_ID``,
``SLURM_ARRAY_TASK_ID``, ``SLURM_NNODES``, ``SLURM_NODEID``, ``SLURM_NTASKS`` and
``SLURM_JOB_NAME`` set: the ids are known only when the job runs, so a small ``sh`` wrapper
sets them from gpupool's own variables before it ``exec``s the script.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli.options import OutputOption
from gpupool.cli.output import Output
from gpupool.domain.units import parse_bytes

SBATCH = re.compile(r"^#SBATCH\s+(.*)$")
SHORT = {
    "-J": "--job-name",
    "-N": "--nodes",
    "-n": "--ntasks",
    "-c": "--cpus-per-task",
    "-t": "--time",
    "-a": "--array",
    "-o": "--output",
    "-e": "--error",
    "-D": "--chdir",
    "-A": "--account",
    "-p": "--partition",
    "-G": "--gpus",
    "-d": "--dependency",
    "-H": "--hold",
}
FLAGS = {"--requeue", "--no-requeue", "--exclusive", "--hold", "--parsable", "--wait"}
IGNORED_NOTE = {
    "--partition": "gpupool has one pool: ask for a GPU model with --gres=gpu:TYPE:N",
}
# Slurm's filename patterns (-o, -e) -> sh, read when the job runs
PATTERNS = {
    "j": "${SLURM_JOB_ID}",
    "J": "${SLURM_JOB_ID}",
    "A": "${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}",
    "a": "${SLURM_ARRAY_TASK_ID:-4294967294}",
    "N": "$(uname -n)",
    "u": "${USER:-$(id -un)}",
    "%": "%",
}
KNOWN = {
    *SHORT.values(),
    "--ntasks-per-node",
    "--gres",
    "--gpus-per-node",
    "--mem",
    "--mem-per-cpu",
    "--signal",
    "--requeue",
    "--no-requeue",
    "--hold",
}
SLURM_MEMORY = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


class SbatchError(ValueError):
    """A line the CLI cannot read (or, with --strict, will not ignore)."""


@dataclass
class Batch:
    """What a batch script's ``#SBATCH`` lines ask for: the JobSpec's fields, the array's
    indexes, the job's static Slurm variables and what was ignored."""

    spec: dict[str, Any] = field(default_factory=dict)
    array: str | None = None
    slurm_env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    interpreter: list[str] = field(default_factory=lambda: ["sh"])
    output: str | None = None  # -o: a file the output is written to as well (a pattern)
    error: str | None = None  # -e: the same for the errors


def options(text: str) -> list[tuple[int, str, str | None]]:
    """The ``#SBATCH`` options of a script as (line, --long-name, value): those before its
    first command, as sbatch reads them."""
    found: list[tuple[int, str, str | None]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if number == 1 and line.startswith("#!"):
            continue
        if line and not line.startswith("#"):
            break  # sbatch stops at the first command
        match = SBATCH.match(line)
        if match is None:
            continue
        words = shlex.split(match.group(1), comments=True)
        index = 0
        while index < len(words):
            word = words[index]
            name, value = _split(word)
            takes = value is None and name not in FLAGS and index + 1 < len(words)
            if takes and not words[index + 1].startswith("-"):
                index += 1
                value = words[index]
            found.append((number, name, value))
            index += 1
    return found


def _split(word: str) -> tuple[str, str | None]:
    if word.startswith("--"):
        name, equals, value = word.partition("=")
        return name, value if equals else None
    if word.startswith("-") and len(word) >= 2:
        name = SHORT.get(word[:2], word[:2])
        return name, (word[2:] or None)
    raise SbatchError(f"'{word}' is not an option (write -x VALUE or --long=VALUE)")


def parse(text: str, strict: bool = False) -> Batch:
    """The job a batch script asks for; SbatchError for a value that cannot be read, and,
    with ``strict``, for any option gpupool would ignore."""
    batch = Batch()
    first = text.splitlines()[0] if text else ""
    if first.startswith("#!"):
        batch.interpreter = shlex.split(first[2:].strip()) or ["sh"]
    seen: dict[str, tuple[int, str | None]] = {}
    for number, name, value in options(text):
        seen[name] = (number, value)
    resources: dict[str, Any] = {}
    nodes = _nodes(seen)
    per_node = _int_of(seen, "--ntasks-per-node")
    if per_node is None and "--ntasks" in seen:
        per_node = math.ceil(_int_of(seen, "--ntasks") / nodes)
    tasks_per_node = per_node or 1
    for name, (number, value) in seen.items():
        try:
            _one(batch, resources, name, value, nodes, tasks_per_node, strict)
        except SbatchError as error:
            raise SbatchError(f"line {number}: {error}") from None
    if nodes > 1:
        batch.spec["nodes"] = nodes
    if resources:
        batch.spec["resources"] = resources
    batch.slurm_env |= {
        "SLURM_NNODES": str(nodes),
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NTASKS": str(nodes * tasks_per_node),
        "SLURM_NTASKS_PER_NODE": str(tasks_per_node),
    }
    if "name" in batch.spec:
        batch.slurm_env["SLURM_JOB_NAME"] = batch.spec["name"]
    if "cpus" in resources:
        batch.slurm_env["SLURM_CPUS_PER_TASK"] = _format(resources["cpus"] / tasks_per_node)
    return batch


def _one(  # noqa: C901 - one branch per option, as the table above
    batch: Batch,
    resources: dict[str, Any],
    name: str,
    value: str | None,
    nodes: int,
    tasks_per_node: int,
    strict: bool,
) -> None:
    spec = batch.spec
    if name in ("--nodes", "--ntasks", "--ntasks-per-node"):
        return  # read first (they size the others)
    if name not in KNOWN:
        if strict:
            raise SbatchError(f"{name} has no gpupool equivalent (--strict): remove the line")
        shown = name if value is None else f"{name}={value}"
        batch.warnings.append(f"{shown} ignored: it has no gpupool equivalent")
        return
    if name not in FLAGS and value is None:
        raise SbatchError(f"{name} needs a value")
    if name == "--job-name":
        spec["name"] = value
    elif name in ("--gres", "--gpus-per-node"):
        count, gpu_type = _gpus(name, value)
        resources["gpus"] = count
        if gpu_type:
            spec["gpu_types"] = [gpu_type]
    elif name == "--gpus":
        count, gpu_type = _gpus(name, value)
        if count % nodes:
            raise SbatchError(f"--gpus={value} does not split evenly over {nodes} nodes")
        resources["gpus"] = count // nodes
        if gpu_type:
            spec["gpu_types"] = [gpu_type]
    elif name == "--cpus-per-task":
        resources["cpus"] = _positive(name, value) * tasks_per_node
    elif name == "--mem":
        resources["memory_bytes"] = _memory(value)
    elif name == "--mem-per-cpu":
        cpus = resources.get("cpus") or tasks_per_node
        resources["memory_bytes"] = _memory(value) * math.ceil(cpus)
    elif name == "--time":
        seconds = slurm_time(value)
        if seconds is not None:
            spec["max_runtime_seconds"] = seconds
    elif name == "--array":
        batch.array = value
    elif name == "--chdir":
        spec["workdir"] = value
    elif name == "--dependency":
        spec["depends_on"] = dependencies(value)
    elif name == "--signal":
        spec["grace_period_seconds"] = _signal(value)
    elif name == "--requeue":
        spec["preemptible"] = True
    elif name == "--no-requeue":
        spec["preemptible"] = False
    elif name == "--hold":
        spec["hold"] = True
    elif name == "--account":
        spec["team"] = value
    elif name == "--output":
        batch.output = _pattern(name, value)
    elif name == "--error":
        batch.error = _pattern(name, value)
    elif name in IGNORED_NOTE:
        batch.warnings.append(f"{name} {value} ignored: {IGNORED_NOTE[name]}")


def _nodes(seen: dict[str, tuple[int, str | None]]) -> int:
    if "--nodes" not in seen:
        return 1
    number, value = seen["--nodes"]
    least = (value or "").split("-")[0]
    if not least.isdigit() or int(least) < 1:
        raise SbatchError(f"line {number}: --nodes={value}: give a number of nodes, e.g. -N 2")
    return int(least)


def _int_of(seen: dict[str, tuple[int, str | None]], name: str) -> int | None:
    if name not in seen:
        return None
    number, value = seen[name]
    if value is None or not value.isdigit() or int(value) < 1:
        raise SbatchError(f"line {number}: {name}={value}: give a whole number, 1 or more")
    return int(value)


def _positive(name: str, value: str | None) -> float:
    try:
        number = float(value or "")
    except ValueError:
        number = 0
    if not number > 0:
        raise SbatchError(f"{name}={value}: give a number above 0")
    return number


def _gpus(name: str, value: str | None) -> tuple[int, str | None]:
    """``gpu:2``, ``gpu:a100:2``, ``gpu`` (one); for --gpus: ``2``, ``a100:2``."""
    parts = (value or "").split(":")
    if name == "--gres":
        if parts[0] != "gpu":
            raise SbatchError(f"--gres={value}: gpupool gives GPUs only (--gres=gpu[:TYPE]:N)")
        parts = parts[1:] or ["1"]
    if len(parts) == 1 and not parts[0].isdigit():
        parts = [parts[0], "1"]
    count = parts[-1]
    if not count.isdigit() or int(count) < 1 or len(parts) > 2:
        raise SbatchError(f"{name}={value}: write [TYPE:]N GPUs, e.g. a100:2")
    return int(count), parts[0] if len(parts) == 2 else None


def _memory(value: str | None) -> int:
    """Slurm's sizes: a number of MiB, or with a K, M, G or T suffix."""
    text = (value or "").strip().upper()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)B?", text)
    if match is None:
        try:
            return parse_bytes(value or "")
        except (ValueError, TypeError):
            raise SbatchError(f"--mem={value}: write a size such as 16G or 4096M") from None
    return int(float(match.group(1)) * SLURM_MEMORY[match.group(2) or "M"])


def slurm_time(value: str | None) -> float | None:
    """Slurm's time limits in seconds: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS;
    None for 0, INFINITE or UNLIMITED (no limit)."""
    text = (value or "").strip()
    if text.upper() in ("INFINITE", "UNLIMITED", "0"):
        return None
    days = 0
    if "-" in text:
        head, _, text = text.partition("-")
        if not head.isdigit():
            raise SbatchError(f"--time={value}: write minutes, HH:MM:SS or D-HH:MM:SS")
        days = int(head)
        parts = text.split(":")
        units = [3600, 60, 1][: len(parts)]
    else:
        parts = text.split(":")
        units = {1: [60], 2: [60, 1], 3: [3600, 60, 1]}.get(len(parts), [])
    if not units or not all(p.isdigit() for p in parts):
        raise SbatchError(f"--time={value}: write minutes, HH:MM:SS or D-HH:MM:SS")
    seconds = days * 86400 + sum(int(p) * u for p, u in zip(parts, units, strict=True))
    return float(seconds) if seconds else None


def dependencies(value: str | None) -> list[str]:
    """``afterok:1:2,afterany:3`` as gpupool's short forms: afterok:1, afterok:2, afterany:3."""
    text = value or ""
    if "?" in text:
        raise SbatchError(
            f"--dependency={value}: gpupool waits for all of its dependencies; '?' (any "
            "of them) has no equivalent"
        )
    found = []
    for item in filter(None, text.split(",")):
        kind, _, jobs = item.partition(":")
        if kind not in ("afterok", "afterany", "afternotok") or not jobs:
            raise SbatchError(
                f"--dependency={value}: gpupool takes afterok, afterany and afternotok, "
                "each with job ids (afterok:12:13)"
            )
        for job in jobs.split(":"):
            found.append(f"{kind}:{job.split('+')[0]}")
    return found


def _signal(value: str | None) -> float:
    _, _, time = (value or "").partition("@")
    if not time.isdigit():
        raise SbatchError(f"--signal={value}: write [B:]SIG@SECONDS, e.g. --signal=USR1@90")
    return float(time)


def _pattern(name: str, value: str | None) -> str:
    """A filename pattern of -o or -e, checked: the % codes gpupool can fill."""
    text = value or ""
    for match in re.finditer(r"%(\d*)(.?)", text):
        if match.group(2) not in PATTERNS and match.group(2) != "x":
            known = " ".join(f"%{code}" for code in [*PATTERNS, "x"])
            raise SbatchError(
                f"{name}={value}: %{match.group(2)} has no gpupool equivalent: use {known}"
            )
    if not text or "\0" in text:
        raise SbatchError(f"{name} needs a file name, e.g. {name}=logs/%x-%j.out")
    return text


def _shell_path(pattern: str, name: str, relative_to_outputs: bool) -> str:
    """``pattern`` as a double-quoted sh word (its % codes read when the job runs);
    relative: below $GPUPOOL_OUTPUT_DIR when ``relative_to_outputs``."""
    parts: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "%":
            match = re.match(r"%\d*(.)", pattern[index:])
            if match is not None and (match.group(1) in PATTERNS or match.group(1) == "x"):
                code = match.group(1)
                parts.append(_quoted(name) if code == "x" else PATTERNS[code])
                index += len(match.group(0))
                continue
        parts.append(_quoted(char))
        index += 1
    word = "".join(parts)
    if relative_to_outputs and not pattern.startswith("/"):
        word = "${GPUPOOL_OUTPUT_DIR}/" + word
    return f'"{word}"'


def _quoted(text: str) -> str:
    return re.sub(r'([\\$`"])', r"\\\1", text)


def _format(number: float) -> str:
    return str(int(number)) if number == int(number) else f"{number:g}"


def command(batch: Batch, script: str) -> list[str]:
    """The job's command: ``sh -c`` setting the Slurm variables known only when the job runs
    from gpupool's own, then ``exec`` of the script by its interpreter."""
    dynamic = (
        'SLURM_JOB_ID="$GPUPOOL_JOB_ID" SLURM_JOBID="$GPUPOOL_JOB_ID" '
        'SLURM_NODEID="${GPUPOOL_TASK_INDEX:-0}" SLURM_PROCID="${GPUPOOL_TASK_INDEX:-0}"'
    )
    array = (
        '; if [ -n "${GPUPOOL_ARRAY_ID:-}" ]; then export SLURM_ARRAY_JOB_ID="$GPUPOOL_ARRAY_ID" '
        'SLURM_ARRAY_TASK_ID="$GPUPOOL_ARRAY_INDEX" '
        'SLURM_ARRAY_TASK_COUNT="$GPUPOOL_ARRAY_TASK_COUNT"; fi'
    )
    run = shlex.join([*batch.interpreter, script])
    if batch.output is None and batch.error is None:
        return ["sh", "-c", f'export {dynamic}{array}; exec {run} "$@"', "sbatch"]
    return ["sh", "-c", f"export {dynamic}{array}; {_written(batch, script, run)}", "sbatch"]


def _written(batch: Batch, script: str, run: str) -> str:
    """sh that runs the script with its output (-o) and errors (-e) written to their files
    as well as to the job's log (tee), and exits with the script's status."""
    name = batch.spec.get("name") or os.path.basename(script)
    below = "workdir" not in batch.spec  # no -D: relative paths go to the output directory
    files = []
    for var, pattern in (("o", batch.output), ("e", batch.error)):
        if pattern is not None:
            files.append(f"{var}={_shell_path(pattern, name, below)}")
            files.append(f'mkdir -p "$(dirname "${var}")"')
    # fd 3, 5: the job's own stdout and stderr; fd 4: the script's status, read into $s
    script_run = "{ " + run + ' "$@"; echo $? >&4; }'
    if batch.output is not None and batch.error is not None:
        piped = "{ " + script_run + ' 2>&1 1>&6 | tee -a "$e" >&5; } 6>&1 | tee -a "$o" >&3'
    elif batch.output is not None:
        piped = "{ " + run + ' "$@" 2>&1; echo $? >&4; } | tee -a "$o" >&3'
    else:
        piped = script_run + ' 2>&1 1>&3 | tee -a "$e" >&5'
    return "; ".join([*files, "exec 3>&1 5>&2", f"s=$( {{ {piped}; }} 4>&1 )", 'exit "${s:-1}"'])


# -- the command -------------------------------------------------------------------------------


def sbatch(
    script: Annotated[str, typer.Argument(metavar="SCRIPT", help="The batch script.")],
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Refuse the script when an #SBATCH option has no gpupool equivalent."
        ),
    ] = False,
    output: OutputOption = Output.TABLE,
) -> None:
    """Submit a Slurm batch script: its #SBATCH lines become the job's fields; prints its id.

    -J -N --ntasks-per-node --gres=gpu[:TYPE]:N --gpus[-per-node] -c --mem -t -a -o -e -D
    --dependency --signal --requeue -H -A are read (-o and -e: the output is written to that
    file too, below $GPUPOOL_OUTPUT_DIR unless absolute or with -D); -p is ignored with a
    warning, and so is any other option unless --strict refuses it. The script runs from its
    directory, sent with the job as its code, with SLURM_JOB_ID, SLURM_ARRAY_TASK_ID,
    SLURM_NNODES, SLURM_NTASKS set.
    """
    from gpupool.cli.connection import connect
    from gpupool.cli.jobs import array_submitted, send_code
    from gpupool.cli.output import CliError, err, escape, print_json

    path = Path(script)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CliError("bad_script", f"{script}: cannot be read: {error}") from None
    try:
        batch = parse(text, strict)
    except SbatchError as error:
        raise CliError("bad_script", f"{script}: {error}", 2) from None
    for warning in batch.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(f'{script}: {warning}')}")
    spec = dict(batch.spec) | {"env": dict(batch.slurm_env)}
    workdir = spec.get("workdir")
    with connect() as client:
        if workdir is not None:  # -D: it runs there, the script by its path (shared disks)
            spec["workdir"] = os.path.abspath(workdir)
            spec["command"] = command(batch, str(path.resolve()))
        else:  # its directory travels with it, as gpupool run --code sends one
            spec["code"] = send_code(client, str(path.resolve().parent))
            spec["command"] = command(batch, f"./{path.name}")
        job = client.submit(spec, batch.array)
    if output == Output.JSON:
        print_json(job)
        return
    if batch.array is not None:
        err.print(f"[dim]array {job['id']}: {escape(array_submitted(job))}[/dim]")
    typer.echo(job["id"])
