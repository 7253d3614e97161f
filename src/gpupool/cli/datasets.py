"""Datasets: make a version from a directory (uploading only what the server lacks) or from
a job's outputs, list datasets, show a version's files, delete versions.

``gpupool dataset create NAME --from DIR`` makes the dataset with its version 1, or, when
the team has a dataset of that name already, adds its next version: versions are never
changed, only added (and deleted). A job reads one with ``gpupool run --dataset
NAME[:VERSION][:/MOUNT]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli.connection import connect, read_config
from gpupool.cli.options import OutputOption
from gpupool.cli.output import (
    CliError,
    Output,
    escape,
    memory,
    new_table,
    out,
    print_json,
    timestamp,
)
from gpupool.client import Client

dataset_app = typer.Typer(
    help="Datasets: immutable, numbered versions of your teams' data, mounted read-only in "
    "jobs (gpupool run --dataset NAME[:VERSION][:/MOUNT]).",
    no_args_is_help=True,
)
UPLOAD_TIMEOUT_S = 3600.0
TeamOption = Annotated[
    str | None, typer.Option("--team", help="The dataset's team, when several of yours have one.")
]
FILES_SHOWN = 50


@dataset_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="The dataset's name (letters, digits, . _ -).")],
    source: Annotated[
        Path | None,
        typer.Option("--from", "-f", help="A directory (or a file) of this machine to upload."),
    ] = None,
    from_job: Annotated[
        int | None,
        typer.Option("--from-job", "-j", help="A job whose outputs the version holds."),
    ] = None,
    path: Annotated[
        str | None,
        typer.Option("--path", "-p", help="With --from-job: a path inside the job's outputs."),
    ] = None,
    team: TeamOption = None,
    description: Annotated[
        str | None, typer.Option("--description", "-d", help="What this version is.")
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Make the next version of a dataset (its version 1 when it is new).

    --from DIR hashes every file, then uploads only the files the server does not hold for
    your team yet: a version that changes 1 % of the files sends about 1 % of the bytes.
    --from-job copies what an ended job left in $GPUPOOL_OUTPUT_DIR, on the server.
    """
    if (source is None) == (from_job is None):
        raise CliError("invalid_request", "give either --from DIR or --from-job JOB")
    if path and from_job is None:
        raise CliError("invalid_request", "--path goes with --from-job")
    config = read_config()
    client = Client(config.url, config.token, timeout=UPLOAD_TIMEOUT_S)
    try:
        if from_job is not None:
            found = client.create_dataset_version(
                name, from_job=from_job, path=path, team=team, description=description
            )
            said = f"from job {from_job}"
        else:
            from gpupool.client import datasets

            try:
                scanned = datasets.scan(source)  # type: ignore[arg-type]
            except datasets.ScanError as error:
                raise CliError(error.code, error.message) from None

            def connect() -> Client:
                return Client(config.url, config.token, timeout=UPLOAD_TIMEOUT_S)

            sent = datasets.send(client, name, scanned, team, description, connect=connect)
            found = sent.version
            said = (
                f"uploaded {sent.uploaded_blobs} blobs, {memory(sent.uploaded_bytes)} of "
                f"{memory(sent.total_bytes)}"
            )
            if scanned.skipped:
                said += f"; left out {len(scanned.skipped)} links or special files"
    finally:
        client.close()
    if output == Output.JSON:
        print_json(found)
        return
    out.print(
        escape(
            f"{found['name']}:{found['version']} (team {found['team']}): "
            f"{found['file_count']} files, {memory(found['size_bytes'])}; {said}"
        )
    )


@dataset_app.command("ls")
def ls(team: TeamOption = None, output: OutputOption = Output.TABLE) -> None:
    """List the datasets of your teams, with their latest version."""
    with connect() as client:
        found = client.datasets(team)
    if output == Output.JSON:
        print_json(found)
        return
    table = new_table("NAME", "TEAM", "LATEST", "VERSIONS", "SIZE", "UPDATED")
    for dataset in found:
        table.add_row(
            escape(dataset["name"]),
            escape(dataset["team"]),
            str(dataset["latest_version"] or "-"),
            str(dataset["version_count"]),
            memory(dataset["size_bytes"]),
            timestamp(dataset["updated_at"]),
        )
    out.print(table)


@dataset_app.command("show")
def show(
    reference: Annotated[
        str, typer.Argument(metavar="NAME[:VERSION]", help="A dataset, or one of its versions.")
    ],
    team: TeamOption = None,
    all_files: Annotated[
        bool, typer.Option("--all", help=f"List every file (else the first {FILES_SHOWN}).")
    ] = False,
    output: OutputOption = Output.TABLE,
) -> None:
    """Show a dataset's versions and its latest version (or the version named): its files,
    bytes, blobs, who made it and when."""
    name, version = parse_reference(reference)
    with connect() as client:
        dataset = client.dataset(name, team) if version is None else None
        wanted = version or (dataset or {}).get("latest_version")
        found = client.dataset_version(name, wanted, team) if wanted else None
    if output == Output.JSON:
        print_json(found if dataset is None else dataset | {"latest": found})
        return
    if dataset is not None:
        print_versions(dataset)
        out.print("")
    if found is not None:
        print_version(found, all_files)


@dataset_app.command("rm")
def rm(
    reference: Annotated[
        str,
        typer.Argument(
            metavar="NAME[:VERSION]", help="A version, or the dataset with all its versions."
        ),
    ],
    team: TeamOption = None,
) -> None:
    """Delete a version (or the whole dataset); refused while a job that has not ended uses
    it."""
    name, version = parse_reference(reference)
    with connect() as client:
        client.delete_dataset(name, version, team)
    out.print(escape(f"deleted {reference}"))


def parse_reference(value: str) -> tuple[str, int | None]:
    """'images' -> ('images', None); 'images:3' -> ('images', 3)."""
    name, sep, version = value.partition(":")
    if not sep or version == "latest":
        return name, None
    if not version.isdigit() or int(version) < 1:
        raise CliError(
            "invalid_version", f"'{version}' is not a version: give NAME or NAME:3 (1, 2, 3 ...)"
        )
    return name, int(version)


def print_versions(dataset: dict[str, Any]) -> None:
    out.print(f"[bold]{escape(dataset['name'])}[/bold]  team {escape(dataset['team'])}")
    table = new_table("VERSION", "FILES", "SIZE", "BLOBS", "JOB", "CREATED", "BY")
    for version in dataset["versions"]:
        table.add_row(
            str(version["version"]),
            str(version["file_count"]),
            memory(version["size_bytes"]),
            str(version["blob_count"]),
            str(version["source_job_id"] or "-"),
            timestamp(version["created_at"]),
            escape(version["created_by"]),
        )
    out.print(table)


def print_version(version: dict[str, Any], all_files: bool = False) -> None:
    title = f"{version['name']}:{version['version']}"
    out.print(f"[bold]{escape(title)}[/bold]  team {escape(version['team'])}")
    if version.get("description"):
        out.print(escape(version["description"]))
    source = f" from job {version['source_job_id']}" if version.get("source_job_id") else ""
    out.print(
        escape(
            f"{version['file_count']} files, {memory(version['size_bytes'])}, "
            f"{version['blob_count']} blobs{source} · made {timestamp(version['created_at'])} "
            f"by {version['created_by']}"
        )
    )
    out.print(escape(f"manifest: {version['manifest']}"))
    files = version["files"] if all_files else version["files"][:FILES_SHOWN]
    table = new_table("FILE", "SIZE", "MODE", "SHA256")
    for file in files:
        table.add_row(
            escape(file["path"]), memory(file["size"]), f"{file['mode']:o}", file["sha256"]
        )
    out.print(table)
    if len(files) < len(version["files"]):
        out.print(f"... and {len(version['files']) - len(files)} more (--all lists them)")


volume_app = typer.Typer(
    help="Volumes: your teams' mutable directories, mounted read-write in jobs (gpupool run "
    "--volume NAME:/MOUNT), counted in the team's storage quota.",
    no_args_is_help=True,
)
VolumeTeam = Annotated[
    str | None, typer.Option("--team", help="The volume's team, when several of yours have one.")
]


@volume_app.command("create")
def create_volume(
    name: Annotated[str, typer.Argument(help="The volume's name (letters, digits, . _ -).")],
    size: Annotated[
        str | None, typer.Option("--size", help="Its size as said: 10G, 500GiB (shown).")
    ] = None,
    team: VolumeTeam = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Make an empty volume of your team; jobs mount it with --volume NAME:/MOUNT."""
    size_bytes = None
    if size is not None:
        from gpupool.domain.units import parse_bytes

        try:
            size_bytes = parse_bytes(size)
        except ValueError as error:
            raise CliError("invalid_size", f"--size {size}: {error}") from None
    with connect() as client:
        found = client.create_volume(name, team, size_bytes)
    if output == Output.JSON:
        print_json(found)
        return
    out.print(escape(f"volume {found['name']} (team {found['team']})"))


@volume_app.command("ls")
def ls_volumes(team: VolumeTeam = None, output: OutputOption = Output.TABLE) -> None:
    """List the volumes of your teams."""
    with connect() as client:
        found = client.volumes(team)
    if output == Output.JSON:
        print_json(found)
        return
    table = new_table("NAME", "TEAM", "USED", "SIZE", "CREATED", "BY")
    for volume in found:
        size = volume["size_limit_bytes"]
        table.add_row(
            escape(volume["name"]),
            escape(volume["team"]),
            _used(volume),
            memory(size) if size else "-",
            timestamp(volume["created_at"]),
            escape(volume["created_by"]),
        )
    out.print(table)


@volume_app.command("show")
def show_volume(
    name: Annotated[str, typer.Argument(help="The volume.")],
    team: VolumeTeam = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """A volume: what its files take now, against its size."""
    with connect() as client:
        found = client.volume(name, team)
    if output == Output.JSON:
        print_json(found)
        return
    size = found["size_limit_bytes"]
    lines = [
        f"volume {found['name']} (team {found['team']})",
        f"used: {_used(found)}",
        f"size: {memory(size) if size else 'none (the team storage quota bounds it)'}",
        f"created: {timestamp(found['created_at'])} by {found['created_by']}",
    ]
    out.print(escape("\n".join(lines)))


def _used(volume: dict) -> str:
    """What the volume takes, and how it stands against its size ('OVER': no new job mounts
    it until it is under)."""
    used, size = volume.get("used_bytes"), volume.get("size_limit_bytes")
    if used is None:
        return "-"
    if size:
        over = " OVER" if used > size else ""
        return f"{memory(used)} ({100 * used / size:.0f} %){over}"
    return memory(used)


@volume_app.command("rm")
def rm_volume(
    name: Annotated[str, typer.Argument(help="The volume to delete, with its files.")],
    team: VolumeTeam = None,
) -> None:
    """Delete a volume and its files; refused while a job that has not ended mounts it."""
    with connect() as client:
        client.delete_volume(name, team)
    out.print(escape(f"deleted volume {name}"))
