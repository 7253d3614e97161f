"""Container images: pull one from a registry the site allows, import an archive, list and
remove your teams' images. A job runs in one with ``gpupool run --image REF``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli.connection import connect, read_config
from gpupool.cli.options import OutputOption
from gpupool.cli.output import CliError, Output, escape, memory, new_table, out, print_json
from gpupool.client import Client

image_app = typer.Typer(
    help="Container images: pull from a registry the site allows, import an archive, list "
    "and remove your teams' images; run a job in one with gpupool run --image.",
    no_args_is_help=True,
)
FETCH_TIMEOUT_S = 3600.0  # the server answers once the image is fetched and unpacked
TeamOption = Annotated[
    str | None,
    typer.Option(
        "--team",
        help="The image's team (default: your only team; an admin without one: the site's, "
        "for every team).",
    ),
]


@image_app.command("pull")
def pull(
    ref: Annotated[str, typer.Argument(help="[registry/]path[:tag][@sha256:...]")],
    team: TeamOption = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Pull an image from a registry the site allows (GPUPOOL_IMAGE_REGISTRIES). It is kept
    once by its manifest's digest, and unpacked so that jobs start in it at once."""
    config = read_config()
    client = Client(config.url, config.token, timeout=FETCH_TIMEOUT_S)
    try:
        found = client.pull_image(ref, team)
    finally:
        client.close()
    _said(found, "pulled", output)


@image_app.command("import")
def import_(
    archive: Annotated[
        Path, typer.Argument(help="An OCI archive, or what 'docker save' writes (a .tar).")
    ],
    name: Annotated[
        str | None,
        typer.Option("--name", help="path[:tag] to list it as (default: the archive's own)."),
    ] = None,
    team: TeamOption = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Import an image archive: docker save NAME -o FILE.tar, or skopeo copy ...
    oci-archive:FILE.tar."""
    try:
        size = archive.stat().st_size
        stream = archive.open("rb")
    except OSError as e:
        raise CliError("unreadable_archive", f"cannot read {archive}: {e.strerror}") from None
    config = read_config()
    client = Client(config.url, config.token, timeout=FETCH_TIMEOUT_S)
    try:
        with stream:
            found = client.import_image(stream, size, name, team)
    finally:
        client.close()
    _said(found, "imported", output)


@image_app.command("ls")
def ls(team: TeamOption = None, output: OutputOption = Output.TABLE) -> None:
    """List your teams' images and the site's."""
    with connect() as client:
        found = client.images(team)
    if output == Output.JSON:
        print_json(found)
        return
    table = new_table("NAME", "TEAM", "DIGEST", "SIZE", "SOURCE", "BY")
    for image in found:
        table.add_row(
            escape(image["name"]),
            escape(image["team"] or "(site)"),
            image["digest"][:19],
            memory(image["size_bytes"]),
            image["source"],
            escape(image["created_by"]),
        )
    out.print(table)


@image_app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="The image's name as listed, or its digest.")],
    team: TeamOption = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Show an image: its digest, size, and the Env, Entrypoint and WorkingDir a job gets."""
    with connect() as client:
        found = client.image(name, team)
    if output == Output.JSON:
        print_json(found)
        return
    _print(found)


@image_app.command("rm")
def rm(
    name: Annotated[str, typer.Argument(help="The image's name as listed, or its digest.")],
    team: TeamOption = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Remove an image of your team (refused while a job of the team runs in it)."""
    with connect() as client:
        found = client.remove_image(name, team)
    if output == Output.JSON:
        print_json(found)
        return
    out.print(escape(f"removed {found['name']} ({found['digest']})"))


def _said(found: dict[str, Any], how: str, output: Output) -> None:
    if output == Output.JSON:
        print_json(found)
        return
    owner = f"team {found['team']}" if found["team"] else "the site"
    out.print(
        escape(
            f"{how} {found['name']} for {owner}: {found['digest']}, {memory(found['size_bytes'])}"
        )
    )


def _print(image: dict[str, Any]) -> None:
    owner = f"team {image['team']}" if image["team"] else "the site (every team)"
    out.print(f"[bold]{escape(image['name'])}[/bold]  {escape(owner)}")
    out.print(
        escape(f"digest: {image['digest']}  ({image['source']}, {memory(image['size_bytes'])})")
    )
    out.print(escape(f"entrypoint: {' '.join(image['entrypoint']) or '-'}"))
    out.print(escape(f"cmd: {' '.join(image['cmd']) or '-'}"))
    out.print(escape(f"workdir: {image['workdir'] or '/'}"))
    for entry in image["env"]:
        out.print(escape(f"env: {entry}"))
