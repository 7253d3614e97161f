"""Jobs: run, ls, show, logs, cancel, why."""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpupool.cli import arrays
from gpupool.cli.connection import connect
from gpupool.cli.listing import (
    gpus_text,
    is_gang,
    launcher_text,
    list_jobs,
    node_gpus_text,
    reason_text,
)
from gpupool.cli.options import OutputOption
from gpupool.cli.output import (
    CliError,
    Output,
    duration,
    err,
    escape,
    memory,
    new_table,
    out,
    print_json,
    report_error,
    share,
    status_text,
    timestamp,
)
from gpupool.client import ApiError, Client
from gpupool.client.api import LogPart
from gpupool.domain.units import format_bytes, format_duration, parse_duration

if TYPE_CHECKING:
    from gpupool.client.code import Sent

TARGET_HELP = "The job id, or ID_INDEX for a task of a job array (12_7)."
WAITING = {"pending", "starting"}
POLL = 0.25
RUN_SETTINGS = {"allow_interspersed_args": False}
# the panels of gpupool run --help: small ones, so that it reads at 80 columns
RESOURCES, NODES, QUEUE, WHAT = "Resources", "Several nodes", "Queue and limits", "The job"
JOB_FILE_SUFFIXES = (".yaml", ".yml", ".json")  # a lone one as the command is a mistake
GANG_EXAMPLE = "gpupool run --nodes 2 --gpus-per-node 4 --launcher torch -- python train.py"


class Network(StrEnum):
    """Whose network a job uses (JobSpec.network)."""

    ISOLATED = "isolated"
    HOST = "host"


class RunOutput(StrEnum):
    """What ``gpupool run -o`` takes: a dry run's document may be printed as YAML too."""

    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


class Launcher(StrEnum):
    """What each node of a job over several nodes starts (JobSpec.launcher)."""

    TORCH = "torch"
    TENSORFLOW = "tensorflow"
    MPI = "mpi"


# each launcher mode's flag (its name): its launcher, and what it does
MODES = {
    "torchrun": (Launcher.TORCH, "starts one torchrun per node"),
    "per-node": (Launcher.TORCH, "runs the command as is once per node"),
    "chief": (Launcher.TENSORFLOW, "makes the first node the chief"),
    "mpirun": (Launcher.MPI, "runs the command as mpirun's own line"),
}


# -- run -------------------------------------------------------------------------------------


def _check_env(values: list[str] | None) -> list[str]:
    """--env takes variables (NAME=VALUE) and one Python environment (NAME or NAME@ID, as
    ``gpupool env ls`` lists them); anything else is a usage error (exit 2)."""
    environments = []
    for value in values or []:
        if "=" in value and not value.startswith("="):
            continue
        if not ENVIRONMENT_REF.match(value):
            raise typer.BadParameter(
                f"'{value}' is neither a variable (NAME=VALUE, e.g. --env BATCH=64) nor a "
                "Python environment (NAME or NAME@ID, as gpupool env ls lists them)"
            )
        environments.append(value)
    if len(environments) > 1:
        raise typer.BadParameter(
            f"a job runs in one Python environment: {', '.join(environments)} are several"
        )
    return values or []


def split_env(values: list[str] | None) -> tuple[list[str], str | None]:
    """--env's values: (the variables, the Python environment or None)."""
    variables = [v for v in values or [] if "=" in v and not v.startswith("=")]
    environments = [v for v in values or [] if v not in variables]
    return variables, environments[0] if environments else None


ENVIRONMENT_REF = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}(@(sha256:)?[0-9a-f]{8,64})?$")


def _check_duration(value: str | None) -> str | None:
    """Accept '90', '90s', '30m', '2h', '1d'; anything else is a usage error (exit 2)."""
    if value is not None:
        try:
            parse_duration(value)
        except ValueError as error:
            raise typer.BadParameter(str(error)) from None
    return value


def _seconds(value: str | None) -> float | None:
    return None if value is None else parse_duration(value)


def _check_not_a_job_file(command: list[str]) -> None:
    """Refuse a lone job file as the command (`gpupool run -f job.yaml`: -f is --follow),
    unless it is an executable program that happens to have such a name."""
    if len(command) != 1 or Path(command[0]).suffix.lower() not in JOB_FILE_SUFFIXES:
        return
    path = Path(command[0])
    if path.is_file() and not os.access(path, os.X_OK):
        raise CliError(
            "job_file_as_command",
            f"{command[0]} is a job file, not a program (-f is --follow): gpupool run "
            f"takes a command; job files will be run with `gpupool apply -f FILE` (coming). "
            "To run it as a program, make it executable (chmod +x).",
            2,
        )


def _check_gpu_type(gpu_type: list[str] | None, gpus: float | None, gpu_memory: str | None) -> None:
    """A GPU type picks among the GPUs a job asks for: without --gpus or --gpu-memory there
    are none, and the job would run without a GPU (the server refuses it too)."""
    if gpu_type and gpus is None and gpu_memory is None:
        raise typer.BadParameter(
            "a GPU type picks among the GPUs a job asks for, and this job asks for none: add "
            "--gpus 1 (or a share such as --gpus 0.5) or --gpu-memory 20GiB",
            param_hint="'--gpu-type'",
        )


def _check_gang(
    gpus: float | None, gpus_per_node: float | None, launcher: Launcher | None
) -> float | None:
    """The GPUs per node asked, once --gpus and --gpus-per-node agree and the launcher
    options fit together (what the server would refuse, said before anything is sent)."""
    if gpus is not None and gpus_per_node is not None and gpus != gpus_per_node:
        raise typer.BadParameter(
            f"--gpus {gpus:g} and --gpus-per-node {gpus_per_node:g} both say how many GPUs "
            "each node of the job gets: give one of them",
            param_hint="'--gpus-per-node'",
        )
    per_node = gpus if gpus is not None else gpus_per_node
    if launcher is Launcher.MPI and per_node is not None and not float(per_node).is_integer():
        raise typer.BadParameter(
            f"MPI starts one rank per GPU, so each node asks for whole GPUs, not {per_node:g}: "
            "use --gpus-per-node 1 or more (or leave it out for CPU-only ranks)",
            param_hint="'--gpus-per-node'",
        )
    return per_node


def launcher_mode(launcher: Launcher | None, flags: dict[str, bool]) -> str | None:
    """The mode its flag names (--torchrun, --per-node, --chief, --mpirun: JobSpec's
    launcher_mode), once there is one and it is of the launcher given."""
    chosen = [mode for mode, on in flags.items() if on]
    if len(chosen) > 1:
        raise typer.BadParameter(
            f"--{chosen[0]} and --{chosen[1]} are both modes of a launcher: give one",
            param_hint=f"'--{chosen[1]}'",
        )
    if not chosen:
        return None
    mode, (wanted, does) = chosen[0], MODES[chosen[0]]
    if launcher is not wanted:
        example = f": {GANG_EXAMPLE} --{mode}" if wanted is Launcher.TORCH else ""
        raise typer.BadParameter(
            f"--{mode} {does}, so it needs --launcher {wanted.value}{example}",
            param_hint=f"'--{mode}'",
        )
    return mode


def build_spec(
    command: list[str],
    *,
    gpus: float | None = None,
    gpu_memory: str | None = None,
    cpus: float | None = None,
    memory_: str | None = None,
    pids: int | None = None,
    name: str | None = None,
    team: str | None = None,
    priority: int | None = None,
    env: list[str] | None = None,
    workdir: str | None = None,
    preemptible: bool | None = None,
    gpu_types: list[str] | None = None,
    max_runtime: float | None = None,
    grace_period: float | None = None,
    code: str | None = None,
    gang: dict[str, Any] | None = None,
    network: str | None = None,
    after: list[str] | None = None,
) -> dict[str, Any]:
    """The JobSpec JSON; fields left out take the server's defaults. ``gang``: ``nodes``,
    ``launcher``, ``launcher_mode``, ``procs_per_node``, ``allow_cross_fabric``, ``retries``,
    as given."""
    resources = {
        "gpus": gpus,
        "gpu_memory_bytes": gpu_memory,
        "cpus": cpus,
        "memory_bytes": memory_,
        "pids": pids,
    }
    spec: dict[str, Any] = {
        "command": command,
        "env": dict(item.split("=", 1) for item in env or []),
        "resources": {k: v for k, v in resources.items() if v is not None},
        "name": name,
        "team": team,
        "priority": priority,
        "workdir": workdir,
        "code": code,
        "preemptible": preemptible,
        "gpu_types": gpu_types or None,
        "max_runtime_seconds": max_runtime,
        "grace_period_seconds": grace_period,
        "network": network,
        "depends_on": list(after) if after else None,  # the server reads the short forms
        **(gang or {}),
    }
    return {k: v for k, v in spec.items() if v is not None}


def run(
    command: Annotated[
        list[str], typer.Argument(metavar="-- CMD [ARGS]...", help="The program and its arguments.")
    ],
    gpus: Annotated[
        float | None,
        typer.Option(
            help="Whole GPUs (1, 2, 8) or a share of one (0.5); with --nodes, per node.",
            metavar="N",
            rich_help_panel=RESOURCES,
        ),
    ] = None,
    gpu_memory: Annotated[
        str | None,
        typer.Option(
            help="GPU memory to reserve, e.g. 20GiB.", metavar="BYTES", rich_help_panel=RESOURCES
        ),
    ] = None,
    gpu_type: Annotated[
        list[str] | None,
        typer.Option(
            "--gpu-type",
            help="Only GPUs whose model contains this, e.g. A100; repeatable (any of).",
            metavar="MODEL",
            rich_help_panel=RESOURCES,
        ),
    ] = None,
    cpus: Annotated[
        float | None,
        typer.Option(help="CPU cores (default 1).", metavar="N", rich_help_panel=RESOURCES),
    ] = None,
    memory_: Annotated[
        str | None,
        typer.Option(
            "--memory", help="Host memory, e.g. 16GiB.", metavar="BYTES", rich_help_panel=RESOURCES
        ),
    ] = None,
    shm_size: Annotated[
        str | None,
        typer.Option(
            "--shm-size",
            help="The size of its /dev/shm, e.g. 2GiB (at most --memory; default: half the "
            "node's memory), as docker run --shm-size.",
            metavar="BYTES",
            rich_help_panel=RESOURCES,
        ),
    ] = None,
    pids: Annotated[
        int | None,
        typer.Option(
            help="The most processes and threads at once (default and most: the server's "
            "GPUPOOL_JOB_PIDS_MAX); past it, the job ends with PidsExceeded.",
            min=16,
            metavar="N",
            rich_help_panel=RESOURCES,
        ),
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(
            help="Run over this many nodes, one task per node with the resources asked, all "
            "started together ($GPUPOOL_TASK_INDEX, $GPUPOOL_TASK_COUNT).",
            min=1,
            metavar="N",
            rich_help_panel=NODES,
        ),
    ] = None,
    gpus_per_node: Annotated[
        float | None,
        typer.Option(
            help="GPUs on each node: --gpus, clearer with --nodes (give one).",
            metavar="N",
            rich_help_panel=NODES,
        ),
    ] = None,
    launcher: Annotated[
        Launcher | None,
        typer.Option(
            help="What each node starts: torch (a process per GPU, torchrun's env), "
            "tensorflow (TF_CONFIG) or mpi (mpirun over the nodes); default: the command. "
            "Lines start with \\[rank N] (gpupool logs JOB --rank N).",
            case_sensitive=False,
            metavar="NAME",
            rich_help_panel=NODES,
        ),
    ] = None,
    torchrun: Annotated[
        bool,
        typer.Option(
            "--torchrun",
            help="With --launcher torch: one torchrun per node starts the processes.",
            rich_help_panel=NODES,
        ),
    ] = False,
    per_node: Annotated[
        bool,
        typer.Option(
            "--per-node",
            help="With --launcher torch: the command as is, once per node, with Kubeflow "
            "PyTorchJob's variables (MASTER_ADDR, RANK, PET_*), for one that runs torchrun.",
            rich_help_panel=NODES,
        ),
    ] = False,
    chief: Annotated[
        bool,
        typer.Option(
            "--chief",
            help="With --launcher tensorflow: the first node is the chief, the rest workers.",
            rich_help_panel=NODES,
        ),
    ] = False,
    mpirun: Annotated[
        bool,
        typer.Option(
            "--mpirun",
            help="With --launcher mpi: the command is the mpirun line (mpirun -n 8 ./a.out), "
            "run on the first node over gpupool's hostfile.",
            rich_help_panel=NODES,
        ),
    ] = False,
    procs_per_node: Annotated[
        int | None,
        typer.Option(
            help="With a launcher: processes (ranks) per node (default: one per GPU); they "
            "divide the node's GPUs evenly. WORLD_SIZE is nodes × N.",
            min=1,
            max=1024,
            metavar="N",
            rich_help_panel=NODES,
        ),
    ] = None,
    allow_cross_fabric: Annotated[
        bool,
        typer.Option(
            "--allow-cross-fabric",
            help="Take nodes on different fabrics (slower links) rather than wait.",
            rich_help_panel=NODES,
        ),
    ] = False,
    retries: Annotated[
        int | None,
        typer.Option(
            help="Requeue it this many times when a node under it fails (default 0).",
            min=0,
            metavar="N",
            rich_help_panel=NODES,
        ),
    ] = None,
    network: Annotated[
        Network | None,
        typer.Option(
            help="isolated: a network of its own (default on one node); host: the node's, "
            "where an admin allows it.",
            rich_help_panel=WHAT,
        ),
    ] = None,
    team: Annotated[
        str | None,
        typer.Option(
            help="Team to charge (if you have several).", metavar="TEAM", rich_help_panel=QUEUE
        ),
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option(
            help="Higher runs first: members -1000..100, admins up to 1000.",
            metavar="N",
            rich_help_panel=QUEUE,
        ),
    ] = None,
    preemptible: Annotated[
        bool | None,
        typer.Option(
            "--preemptible/--no-preemptible",
            help="May be stopped and requeued for others (default: yes); resume from "
            "$GPUPOOL_CHECKPOINT_DIR.",
            show_default=False,
            rich_help_panel=QUEUE,
        ),
    ] = None,
    max_runtime: Annotated[
        str | None,
        typer.Option(
            help="Stop and fail it after this long: 90s, 30m, 2h, 1d. Gives ETAs.",
            metavar="TIME",
            callback=_check_duration,
            rich_help_panel=QUEUE,
        ),
    ] = None,
    grace_period: Annotated[
        str | None,
        typer.Option(
            help="From SIGTERM to SIGKILL when it is stopped, e.g. 60s.",
            metavar="TIME",
            callback=_check_duration,
            rich_help_panel=QUEUE,
        ),
    ] = None,
    array: Annotated[
        str | None,
        typer.Option(
            "--array",
            help="A job array, one task per index, as sbatch --array: 0-999, 1,3,5-7, 0-99:2; "
            "%50 at the end: at most 50 at once ($GPUPOOL_ARRAY_INDEX). Prints its id.",
            metavar="INDEXES",
            rich_help_panel=QUEUE,
        ),
    ] = None,
    hold: Annotated[
        bool,
        typer.Option(
            "--hold",
            help="Submit it held: it waits with reason Held and never starts until "
            "gpupool release JOB.",
            rich_help_panel=QUEUE,
        ),
    ] = False,
    after: Annotated[
        list[str] | None,
        typer.Option(
            "--after",
            help="Start only once this job has ended: ID or NAME (it succeeded), "
            "afterany:ID (ended) or afternotok:ID (did not succeed); repeatable (all of). "
            "Until then it waits with reason Dependency.",
            metavar="[COND:]JOB",
            rich_help_panel=QUEUE,
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="A display name.", metavar="TEXT", rich_help_panel=WHAT)
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            "-e",
            help="A variable of the job (NAME=VALUE; repeatable), or the Python environment "
            "it runs in (NAME or NAME@ID: gpupool env ls).",
            callback=_check_env,
            metavar="NAME=VALUE",
            rich_help_panel=WHAT,
        ),
    ] = None,
    workdir: Annotated[
        str | None,
        typer.Option(
            help="The job's working directory, read-write (default: this one; '' for its "
            "output directory); a path on the node, readable by the job's account.",
            metavar="DIR",
            rich_help_panel=WHAT,
        ),
    ] = None,
    code: Annotated[
        bool,
        typer.Option(
            "--code",
            help="Send the working directory with the job (for a server on another machine; "
            ".gitignore and .gpupoolignore respected), unpacked on the node.",
            rich_help_panel=WHAT,
        ),
    ] = False,
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            help="Run in a container image of your team or the site (gpupool image ls): its "
            "tree is the job's read-only root, its Env, Entrypoint and WorkingDir apply; "
            "without --workdir the job starts in the image's WorkingDir.",
            metavar="REF",
            rich_help_panel=WHAT,
        ),
    ] = None,
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            "--dataset",
            help="A dataset of the job's team to read, read-only: NAME (its latest version), "
            "NAME:VERSION, and :/MOUNT after either (default /datasets/NAME); repeatable "
            "(gpupool dataset ls).",
            metavar="NAME[:VER][:/MOUNT]",
            rich_help_panel=WHAT,
        ),
    ] = None,
    volume: Annotated[
        list[str] | None,
        typer.Option(
            "--volume",
            help="A volume of the job's team to mount read-write: NAME:/MOUNT; repeatable "
            "(gpupool volume ls).",
            metavar="NAME:/MOUNT",
            rich_help_panel=WHAT,
        ),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Wait, stream the log, exit with the job's code.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Check the job on the server and submit nothing; print it as a job file's "
            "document (-o yaml, the default, or json) for gpupool apply -f.",
        ),
    ] = False,
    output: Annotated[
        RunOutput,
        typer.Option(
            "--output",
            "-o",
            help="table (default) or json; with --dry-run, yaml (default) or json.",
            case_sensitive=False,
        ),
    ] = RunOutput.TABLE,
) -> None:
    """Submit a job: gpupool run --gpus 1 -- python train.py. Prints the job id.

    Over several nodes (a distributed job, e.g. PyTorch DDP on 2 nodes of 4 GPUs):
    gpupool run --nodes 2 --gpus-per-node 4 --launcher torch -- python train.py
    """
    _check_not_a_job_file(command)
    gpus = _check_gang(gpus, gpus_per_node, launcher)
    flags = {"torchrun": torchrun, "per-node": per_node, "chief": chief, "mpirun": mpirun}
    mode = launcher_mode(launcher, flags)
    _check_gpu_type(gpu_type, gpus, gpu_memory)
    if array is not None and follow:
        raise typer.BadParameter(
            "--follow follows one job: follow a task of the array with gpupool logs -f ID_INDEX",
            param_hint="'--follow'",
        )
    directory = os.getcwd() if workdir is None else (os.path.abspath(workdir) if workdir else None)
    if code and directory is None:
        raise typer.BadParameter(
            "--code sends a directory: name it with --workdir DIR, or leave --workdir out to "
            "send this one",
            param_hint="'--code'",
        )
    if image is not None and workdir is None and not code:
        directory = None  # the image's WorkingDir, as docker starts there
    env, environment = split_env(env)
    spec = build_spec(
        command,
        gpus=gpus,
        gpu_memory=gpu_memory,
        cpus=cpus,
        memory_=memory_,
        pids=pids,
        name=name,
        team=team,
        priority=priority,
        env=env,
        workdir=None if code else directory,
        preemptible=preemptible,
        gpu_types=gpu_type,
        max_runtime=_seconds(max_runtime),
        grace_period=_seconds(grace_period),
        gang=_gang_fields(nodes, launcher, mode, procs_per_node, allow_cross_fabric, retries),
        network=network.value if network else None,
        after=after,
    )
    if environment is not None:
        spec["environment"] = environment
    if image is not None:
        spec["image"] = image
    if (dry_run and follow) or (output == RunOutput.YAML and not dry_run):
        raise typer.BadParameter(
            "--dry-run submits nothing to follow; -o yaml prints a dry run's document",
            param_hint="'--dry-run'",
        )
    if hold:
        spec["hold"] = True
    if shm_size is not None:
        spec["shm_bytes"] = shm_size  # the server reads the quantity
    if dataset:
        spec["datasets"] = list(dataset)  # the server reads the short forms
    if volume:
        spec["volumes"] = list(volume)
    with connect() as client:
        if code:
            spec["code"] = send_code(client, directory)
        if dry_run:
            print_dry_run(client, spec, array, output)
            return
        job = client.submit(spec, array)
        if array is not None and output != Output.JSON:
            err.print(f"[dim]array {job['id']}: {escape(array_submitted(job))}[/dim]")
        if output == Output.JSON:
            print_json(job)
        elif follow:
            err.print(f"[dim]job {job['id']} submitted[/dim]")
        else:
            typer.echo(job["id"])
        if follow:
            raise typer.Exit(follow_until_end(client, job))


def job_document(spec: dict[str, Any], array: str | None) -> dict[str, Any]:
    """The job file's document of a job that ``gpupool run`` would submit."""
    body = dict(spec)
    name = body.pop("name", None)
    if array is not None:
        body["array"] = {"indexes": array}
    document: dict[str, Any] = {"apiVersion": "gpupool/v1", "kind": "Job"}
    if name is not None:
        document["metadata"] = {"name": name}
    return document | {"spec": body}


def print_dry_run(client: Client, spec: dict[str, Any], array: str | None, output: str) -> None:
    """Check the job on the server (a dry run of its job file) and print the document as
    the server read it: what ``gpupool apply -f`` takes to submit the same job."""
    from gpupool.cli.documents import dump

    answer = client.apply([job_document(spec, array)], dry_run=True)
    fmt = "json" if output == RunOutput.JSON else "yaml"
    sys.stdout.write(dump([answer["documents"][0]["document"]], fmt))


def _gang_fields(
    nodes: int | None,
    launcher: Launcher | None,
    mode: str | None,
    procs_per_node: int | None,
    allow_cross_fabric: bool,
    retries: int | None,
) -> dict[str, Any]:
    """The spec's fields of a job over several nodes that were given (the rest: defaults)."""
    return {
        "nodes": nodes,
        "launcher": launcher.value if launcher else None,
        "launcher_mode": mode,
        "procs_per_node": procs_per_node,
        "allow_cross_fabric": True if allow_cross_fabric else None,
        "retries": retries,
    }


def send_code(client: Client, directory: str) -> str:
    """Pack ``directory``, upload it unless the server has it for us, say so; its ref."""
    # here, not at the top: packing's imports (pathspec, tarfile) would slow every command
    from gpupool.client import code as snapshots

    try:
        sent = snapshots.send(client, Path(directory))
    except snapshots.PackError as error:
        raise CliError(error.code, error.message) from None
    err.print(f"[dim]{escape(code_sent_text(directory, sent))}[/dim]")
    return sent.packed.ref


def code_sent_text(directory: str, sent: Sent) -> str:
    """'sent /home/ann/proj: 12 files, 40 KiB (9 KiB packed), sha256:0a1b2c3d4e5f'."""
    packed = sent.packed
    how = "sent" if sent.uploaded else "the server has"
    plural = "" if packed.files == 1 else "s"
    text = (
        f"{how} {directory}: {packed.files} file{plural}, {format_bytes(packed.file_bytes)} "
        f"({format_bytes(packed.size_bytes)} packed), {packed.ref[:19]}"
    )
    if packed.skipped:
        shown = ", ".join(packed.skipped[:3]) + (", ..." if len(packed.skipped) > 3 else "")
        text += f"; left out {len(packed.skipped)} link(s) or special file(s): {shown}"
    return text


def array_submitted(array: dict[str, Any]) -> str:
    """'4 tasks (0-3), at most 2 at once; gpupool ls --array 12'."""
    limit = f", at most {array['max_running']} at once" if array.get("max_running") else ""
    count = f"{array['size']} task{'' if array['size'] == 1 else 's'}"
    return f"{count} ({array['indexes']}){limit}; gpupool ls --array {array['id']}"


def follow_until_end(client: Client, job: dict[str, Any]) -> int:
    """``follow_job``; on Ctrl-C, say that the job goes on and exit 130."""
    try:
        return follow_job(client, job)
    except KeyboardInterrupt:
        err.print(f"stopped following job {job['id']}; it goes on (gpupool cancel {job['id']})")
        return 130


def follow_job(client: Client, job: dict[str, Any]) -> int:
    """Wait for the job to start, stream its log to stdout, return the exit code to use."""
    job = wait_until_started(client, job)
    write_log(client.follow_logs(job["id"], poll=POLL))
    job = client.wait(job["id"], poll=POLL)
    if job["status"] != "succeeded":
        err.print(f"job {job['id']} {status_text(job['status'])}: {escape(ended_note(job))}")
    return exit_code_of(job)


def waiting_text(job: dict[str, Any]) -> str:
    """'job 7 pending: InsufficientGpus (position 2): all 4 GPUs are busy'."""
    position = f" (position {job['position']})" if job.get("position") else ""
    reason = job.get("reason") or job["status"]
    message = f": {job['message']}" if job.get("message") else ""
    return f"job {job['id']} {job['status']}: {reason}{position}{message}"


def wait_until_started(client: Client, job: dict[str, Any]) -> dict[str, Any]:
    """Poll while the job is pending or starting, showing why on stderr."""
    if job["status"] not in WAITING:
        return job
    if not err.is_terminal:  # a log file: one plain line per change, no spinner
        return _poll_while_waiting(client, job, lambda text: err.print(escape(text)))
    with err.status(escape(_fit(waiting_text(job)))) as spinner:
        return _poll_while_waiting(client, job, lambda text: spinner.update(escape(_fit(text))))


def _fit(text: str) -> str:
    """Cut a spinner line to the terminal's width, so that it redraws in place."""
    room = max(err.width - 3, 10)
    return text if len(text) <= room else text[: room - 1] + "…"


def _poll_while_waiting(
    client: Client, job: dict[str, Any], show: Callable[[str], None]
) -> dict[str, Any]:
    shown = ""
    while job["status"] in WAITING:
        text = waiting_text(job)
        if text != shown:
            show(text)
            shown = text
        time.sleep(POLL)
        job = client.job(job["id"])
    return job


def ended_note(job: dict[str, Any]) -> str:
    """Why a job ended, for a one-line note."""
    if job.get("message"):
        return job["message"]
    if job.get("exit_code") is not None:
        return f"exit code {job['exit_code']}"
    return job.get("reason") or job["status"]


def exit_code_of(job: dict[str, Any]) -> int:
    """Succeeded 0; failed with code N: N (a signal s: 128+s); cancelled 130; otherwise 1."""
    status, code = job["status"], job.get("exit_code")
    if status == "succeeded":
        return 0
    if status == "cancelled":
        return 130
    if status != "failed" or not code:
        return 1
    if code < 0:
        return min(128 - code, 255)
    return code if code <= 255 else 1


# -- ls --------------------------------------------------------------------------------------


def ls(
    all_: Annotated[bool, typer.Option("--all", "-a", help="Include ended jobs.")] = False,
    status: Annotated[
        list[str] | None, typer.Option("--status", "-s", help="Only this status; repeatable.")
    ] = None,
    team: Annotated[str | None, typer.Option(help="Only this team's jobs.")] = None,
    user: Annotated[str | None, typer.Option(help="Only this user's jobs.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many (newest first).", min=1)] = 100,
    array: Annotated[
        int | None,
        typer.Option(
            "--array", help="The tasks of this job array (ID_INDEX), in index order.", metavar="ID"
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """List jobs (by default those pending, starting or running).

    A job array is one row, its tasks counted by status; --array ID lists its tasks. With
    -o json, every job is listed, arrays' tasks too (each with its array_id and array_index).
    """
    list_jobs(all_, status, team, user, limit, array, output)


# -- show ------------------------------------------------------------------------------------


def _spec_lines(job: dict[str, Any]) -> list[str]:
    spec, resources = job["spec"], job["spec"]["resources"]
    each = "per node: " if is_gang(spec) else ""
    lines = [
        f"command:    {escape(shlex.join(spec['command']))}",
        f"resources:  {each}gpus {gpus_text(resources)}, cpus "
        f"{share(resources.get('cpus') or 0)}, memory {memory(resources.get('memory_bytes'))}"
        + (f", /dev/shm {memory(spec['shm_bytes'])}" if spec.get("shm_bytes") else ""),
    ]
    if is_gang(spec):
        lines.append(f"nodes:      {escape(gang_text(spec))}")
    if spec.get("env"):
        pairs = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(spec["env"].items()))
        lines.append(f"env:        {escape(pairs)}")
    if spec.get("workdir"):
        lines.append(f"workdir:    {escape(spec['workdir'])}")
    if spec.get("code"):
        lines.append(f"code:       {escape(code_text(spec['code'], job.get('code_snapshot')))}")
    if spec.get("depends_on"):
        lines.append(f"after:      {escape(depends_on_text(spec['depends_on']))}")
    if spec.get("image"):
        lines.append(f"image:      {escape(spec['image'])} ({spec.get('image_digest')})")
    lines.append(f"policy:     {escape(policy_text(spec))}")
    return lines


def depends_on_text(deps: list[dict[str, Any]]) -> str:
    """'afterok:12, afterany:13': the jobs it waits for, as --after takes them."""
    return ", ".join(f"{d.get('condition') or 'afterok'}:{d['job']}" for d in deps)


def gang_text(spec: dict[str, Any]) -> str:
    """'2 nodes × 4 GPUs (8 GPUs in all), launcher torch, one process per GPU'."""
    nodes, count = spec.get("nodes") or 1, spec["resources"].get("gpus") or 0
    text = f"{nodes} node{'' if nodes == 1 else 's'} × {node_gpus_text(spec['resources'])}"
    if nodes > 1 and count >= 1:
        text += f" ({share(nodes * count)} GPUs in all)"
    return f"{text}, launcher {launcher_text(spec)}"


def code_text(ref: str, snapshot: dict[str, Any] | None) -> str:
    """'sha256:<hex>, 12 files, 40 KiB (9 KiB packed)'."""
    if not snapshot:
        return ref
    plural = "" if snapshot["files"] == 1 else "s"
    return (
        f"{ref}, {snapshot['files']} file{plural}, {format_bytes(snapshot['unpacked_bytes'])} "
        f"({format_bytes(snapshot['size_bytes'])} packed)"
    )


def policy_text(spec: dict[str, Any]) -> str:
    """'preemptible, gpu types A100 or H100, max runtime 2h, grace 60s' (defaults left out)."""
    parts = ["preemptible" if spec.get("preemptible", True) else "not preemptible"]
    if spec.get("gpu_types"):
        parts.append("gpu types " + " or ".join(spec["gpu_types"]))
    if spec.get("max_runtime_seconds"):
        parts.append(f"max runtime {format_duration(spec['max_runtime_seconds'])}")
    if spec.get("grace_period_seconds") is not None:
        parts.append(f"grace {format_duration(spec['grace_period_seconds'])}")
    if spec.get("allow_cross_fabric"):
        parts.append("nodes may be on different fabrics")
    if spec.get("retries"):
        parts.append(f"retries {spec['retries']} when a node fails")
    return ", ".join(parts)


def service_text(job: dict[str, Any]) -> str:
    """'2 (preempted 1 time)' for the attempts line."""
    text = str(job["attempts"])
    preemptions = job.get("preemptions") or 0
    if not preemptions:
        return text
    return f"{text} (preempted {preemptions} {'time' if preemptions == 1 else 'times'})"


def attained_text(gpu_seconds: float | None) -> str:
    """'1.25 GPU-hours'; under 0.01 (36 s on one GPU), 'N GPU-seconds' so a start shows."""
    seconds = gpu_seconds or 0
    if 0 < seconds < 36:
        return f"{seconds:.0f} GPU-seconds"
    return f"{seconds / 3600:.2f} GPU-hours"


def _status_lines(job: dict[str, Any]) -> list[str]:
    lines = [f"status:     {status_text(job['status'])}  {escape(reason_text(job))}"]
    if job.get("message"):
        lines.append(f"message:    {escape(job['message'])}")
    if job.get("blockers"):
        lines.append(f"waits for:  {escape(', '.join(job['blockers']))}")
    lines += [
        f"user/team:  {escape(job['user'])} / {escape(job['team'])}   priority {job['priority']}",
        f"submitted:  {timestamp(job['submitted_at'])}",
        f"started:    {timestamp(job.get('started_at'))}",
        f"ended:      {timestamp(job.get('ended_at'))}",
        f"exit code:  {'-' if job.get('exit_code') is None else job['exit_code']}",
        f"attempts:   {service_text(job)}",
        f"attained:   {attained_text(job.get('attained_gpu_seconds'))}",
        f"checkpoint: {timestamp(job.get('checkpoint_at'))}",
    ]
    return lines


def _placement_lines(job: dict[str, Any]) -> list[str]:
    placement = job.get("placement")
    if not placement:
        return ["placement:  -"]
    lines = []
    for task in placement.get("tasks") or [placement]:
        which = f"task {task['task']} on " if "task" in task else ""
        lines.append(
            f"placement:  {which}node {escape(task['node'])}, cpus {share(task['cpus'])}, "
            f"memory {memory(task.get('memory_bytes') or None)}"
        )
        for gpu in task["gpus"]:
            reserved = f", {memory(gpu['memory_bytes'])}" if gpu.get("memory_bytes") else ""
            lines.append(f"  gpu {escape(gpu['uuid'])}  share {share(gpu['share'])}{reserved}")
    return lines


def show(
    target: Annotated[
        str, typer.Argument(metavar="JOB", help=TARGET_HELP, callback=arrays.check_target)
    ],
    output: OutputOption = Output.TABLE,
) -> None:
    """Show one job: spec, placement, status, exit code, attempts and events."""
    with connect() as client:
        job = client.job(arrays.job_id_of(client, target))
    if output == Output.JSON:
        print_json(job)
        return
    title = f"job {job['id']}" + (f" ({escape(job['name'])})" if job.get("name") else "")
    if job.get("array_id") is not None:
        title += f", task {arrays.task_id_text(job)} of job array {job['array_id']}"
    out.print(f"[bold]{title}[/bold]")
    for line in _spec_lines(job) + _status_lines(job) + _placement_lines(job):
        out.print(line)
    events = new_table("TIME", "REASON", "MESSAGE")
    for event in job.get("events", []):
        events.add_row(timestamp(event["at"]), escape(event["reason"]), escape(event["message"]))
    out.print("")
    out.print(events)


# -- logs, cancel ----------------------------------------------------------------------------


def write_log(parts: Iterable[LogPart]) -> bool:
    """The job's own output to stdout byte for byte; each later attempt's announcement on
    stderr ("--- attempt 2 started (requeued after preemption) ---"), on a line of its own.
    Whether any output was written."""
    ended_line, wrote = True, False
    for part in parts:
        if part.note:
            err.print(("" if ended_line else "\n") + f"--- {escape(part.note)} ---")
            ended_line = True
        if part.text:
            sys.stdout.write(part.text)
            sys.stdout.flush()
            ended_line, wrote = part.text.endswith("\n"), True
    return wrote


def logs(
    target: Annotated[
        str, typer.Argument(metavar="JOB", help=TARGET_HELP, callback=arrays.check_target)
    ],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Follow until it ends.")] = False,
    attempt: Annotated[
        int | None,
        typer.Option(
            help="Only this attempt's log (default: every attempt's, in order; with -f, from "
            "this attempt on).",
            min=1,
        ),
    ] = None,
    rank: Annotated[
        int | None,
        typer.Option(
            help="Only the lines of this rank of a job over several nodes (those starting "
            "\\[rank N]), without that prefix; works with -f.",
            min=0,
        ),
    ] = None,
    task: Annotated[
        int | None,
        typer.Option(
            help="Only the lines of this task (node) of a job over several nodes (those "
            "starting \\[task N]: torchrun per node, or no launcher), without that prefix.",
            min=0,
        ),
    ] = None,
) -> None:
    """Print a job's log, attempt after attempt; with -f, keep printing until the job has
    ended. A preempted job's next attempt is announced on stderr.

    A job over several nodes writes one log, each line starting with \\[rank N] or \\[task N]:
    --rank N (or --task N) prints only those lines, e.g. gpupool logs -f 12 --rank 1.
    """
    if rank is not None and task is not None:
        raise typer.BadParameter("give --rank or --task, not both", param_hint="'--task'")
    lines = {"rank": rank, "task": task}
    with connect() as client:
        job_id = arrays.job_id_of(client, target)
        job = client.job(job_id)
        if follow and job["status"] == "pending":
            err.print(f"[dim]{escape(not_started_text(target, job, follow))}[/dim]")
        if attempt is not None and not follow:
            parts = _one_attempt(client, job_id, attempt, lines)
        else:
            parts = client.follow_logs(
                job_id, poll=POLL, attempt=attempt or 1, follow=follow, **lines
            )
        if write_log(parts):
            return
        if not follow and job["status"] == "pending":
            err.print(f"[dim]{escape(not_started_text(target, job, follow))}[/dim]")
        elif rank is not None or task is not None:
            err.print(f"[dim]{escape(no_lines_text(rank, task))}[/dim]")


def not_started_text(target: str, job: dict[str, Any], follow: bool) -> str:
    """'job 7 has not started yet (InsufficientGpus: all 4 GPUs are busy): ...'; what -f
    does about it."""
    reason = job.get("reason") or "Queued"
    message = f": {job['message']}" if job.get("message") else ""
    said = f"{arrays.label_of(job)} has not started yet ({reason}{message})"
    if follow:
        return f"{said}; its log follows once it starts"
    return f"{said}; gpupool logs -f {target.strip()} waits for it and follows its log"


def no_lines_text(rank: int | None, task: int | None) -> str:
    """Why a filtered log printed nothing."""
    label = f"rank {rank}" if rank is not None else f"task {task}"
    return (
        f"no lines of {label} so far: a job over several nodes starts each line with "
        f"[rank N] or [task N] (gpupool logs JOB without --{label.split()[0]} shows them all)"
    )


def _one_attempt(
    client: Client, job_id: int, attempt: int, lines: dict[str, int | None]
) -> Iterator[LogPart]:
    """One attempt's log as written so far (only the ``lines`` asked for)."""
    offset = 0
    while True:
        chunk = client.logs(job_id, offset, attempt, **lines)
        if chunk["next_offset"] == chunk["offset"]:
            return
        if chunk["text"]:
            yield LogPart(chunk["attempt"], chunk["text"])
        offset = chunk["next_offset"]


def cancel(
    targets: Annotated[
        list[str],
        typer.Argument(
            metavar="JOB...",
            help="Job ids: an array's id cancels all its tasks not ended, ID_INDEX one task.",
            callback=arrays.check_targets,
        ),
    ],
) -> None:
    """Cancel jobs: pending ones at once, running ones are stopped."""
    failed = False
    with connect() as client:
        for target in targets:
            try:
                out.print(escape(arrays.cancel_target(client, target)))
            except ApiError as error:
                report_error(error.code, error.message)
                failed = True
    if failed:
        raise typer.Exit(1)


# -- why -------------------------------------------------------------------------------------


def why(
    target: Annotated[
        str, typer.Argument(metavar="JOB", help=TARGET_HELP, callback=arrays.check_target)
    ],
    output: OutputOption = Output.TABLE,
) -> None:
    """Why a job waits: reason, place in its team's queue, what blocks it, estimated start."""
    with connect() as client:
        job = client.job(arrays.job_id_of(client, target))  # an array's task is named so
        answer = client.why(job["id"])
    if output == Output.JSON:
        print_json(answer)
        return
    label = arrays.label_of(job)
    out.print(f"{label} {status_text(answer['status'])}: {escape(answer['summary'])}")
    for line in why_lines(answer):
        out.print(line)


def why_lines(answer: dict[str, Any]) -> list[str]:
    """The lines under the summary: reason, position, blockers, estimate (pending jobs)."""
    lines = [f"reason:     {escape(answer['code'])}"]
    trial = answer.get("trial")
    if trial:  # a trial of an experiment: its standing, rung by rung
        said = f"trial {trial['number']} of experiment {trial['experiment']}: {trial['state']}"
        lines.append(f"trial:      {escape(said)}")
        lines += [f"            {escape(rung)}" for rung in trial["rungs"]]
    if answer["status"] != "pending":
        return lines
    if answer.get("position"):
        lines.append(f"position:   {answer['position']} in its team's queue (1 is next)")
    blockers = answer.get("blockers") or []
    for index, blocker in enumerate(blockers):
        lines.append(("waits for:  " if index == 0 else "            ") + escape(blocker))
    lines.append(f"starts:     {escape(eta_text(answer))}")
    estimate = answer.get("estimate") or {}
    if estimate.get("duration_text"):
        lines.append(f"assumes:    this job runs {escape(estimate['duration_text'])}")
    for assumption in estimate.get("assumes") or []:
        lines.append(f"            {escape(assumption)}")
    return lines


def eta_text(answer: dict[str, Any]) -> str:
    """'about 2026-11-30 23:15:00 (in 25m), an estimate' or 'unknown: why'."""
    at = answer.get("eta")
    if at is None:
        return f"unknown: {answer.get('eta_unknown') or 'no estimate'}"
    left = at - time.time()
    when = "now" if left < 1 else f"in {duration(left)}"
    return f"about {timestamp(at)} ({when}), an estimate"
