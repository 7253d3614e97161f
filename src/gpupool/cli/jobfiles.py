"""`gpupool apply -f FILE`: the documents of a job file, made in one transaction.

The file is read here (YAML, several documents separated by ``---``), changed by ``--set``,
and sent as it is to ``POST /api/v1/apply``: the server checks every field against the
API's own request bodies. An error points into the file: a YAML syntax error at its line
and column, a field the server refused (``documents.1.spec.resources.gpus``) at that
field's node, or the nearest node above it when the field is not written.

ruamel.yaml (which keeps each node's position) is imported only when a command here runs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli.connection import connect
from gpupool.cli.documents import Format, dump
from gpupool.cli.output import CliError, err, escape, out
from gpupool.client.api import ApiError

TOP = ("apiVersion", "kind", "metadata", "spec")
SOURCE_STDIN = "-"


@dataclass
class Loaded:
    """One document: its data (plain dicts and lists, sent as JSON) and the node it was
    read from (None for a document made by the CLI), which knows positions."""

    data: dict[str, Any]
    node: Any


def read_source(source: str) -> tuple[str, str]:
    """The text of ``source`` (a path, or - for stdin) and how messages name it."""
    if source == SOURCE_STDIN:
        return sys.stdin.read(), "<stdin>"
    path = Path(source)
    try:
        return path.read_text(encoding="utf-8"), source
    except FileNotFoundError:
        raise CliError("job_file_not_found", f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CliError("bad_job_file", f"{source}: cannot be read: {error}") from None


def load_documents(text: str, name: str) -> list[Loaded]:
    """Every non-empty document of ``text``; CliError at the line and column of a syntax
    error, or of a document that is not a mapping."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    yaml = YAML(typ="rt")
    try:
        nodes = [node for node in yaml.load_all(text) if node is not None]
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        problem = error.problem or error.context or "not valid YAML"
        raise CliError("bad_job_file", f"{where}: {problem}") from None
    except YAMLError as error:
        raise CliError("bad_job_file", f"{name}: not valid YAML: {error}") from None
    if not nodes:
        raise CliError("bad_job_file", f"{name}: no document (a Job, a Dataset, a Notebook ...)")
    loaded = []
    for index, node in enumerate(nodes):
        if not isinstance(node, dict):
            line = _line_of(node)
            where = f"{name}:{line}" if line else name
            raise CliError(
                "bad_job_file",
                f"{where}: document {index + 1} is not a mapping: write apiVersion, kind, "
                "metadata and spec (see gpupool apply --help)",
            )
        data = plain(node)
        data.pop("status", None)  # what apply -o printed of a made document: not sent back
        loaded.append(Loaded(data, node))
    return loaded


def send_codes(client: Any, documents: list[Loaded], base: Path) -> None:
    """A Job's ``spec.code`` written as a directory (``code: .``, ``code: ../src``; relative
    to the file's directory) is packed and sent, as ``gpupool run --code`` sends one, and
    replaced by the snapshot's ref."""
    from gpupool.cli.jobs import send_code

    for doc in documents:
        spec = doc.data.get("spec")
        if str(doc.data.get("kind", "")).lower() != "job" or not isinstance(spec, dict):
            continue
        code = spec.get("code")
        if not isinstance(code, str) or code.startswith("sha256:"):
            continue
        directory = (base / code).resolve()
        if not directory.is_dir():
            raise CliError(
                "bad_job_file",
                f"spec.code: {code} is not a directory (relative to {base}): give the "
                "directory to send, or a snapshot's sha256: ref",
            )
        spec["code"] = send_code(client, str(directory))


@dataclass(frozen=True)
class Source:
    """A Dataset's ``spec.from`` as written, replaced by the manifest the CLI uploaded: put
    back in what is printed, so that the printed document applies again."""

    index: int
    written: str
    manifest: str


def send_datasets(documents: list[Loaded], base: Path, dry_run: bool, source: str) -> list[Source]:
    """A Dataset's ``spec.from`` (a directory or a file, relative to the file's directory)
    hashed, its manifest and the blobs the team lacks uploaded (``dry_run``: the manifest
    only, and what would be sent said), and replaced by ``manifest``, as ``gpupool dataset
    create --from`` sends one (over clients of its own: an upload may take long); the version
    itself is made with the file. ``source``: how messages name the file."""
    from gpupool.cli.connection import read_config
    from gpupool.cli.datasets import UPLOAD_TIMEOUT_S
    from gpupool.client import Client
    from gpupool.client import datasets as uploads

    sources: list[Source] = []
    for index, doc in enumerate(documents):
        spec = doc.data.get("spec")
        if str(doc.data.get("kind", "")).lower() != "dataset" or not isinstance(spec, dict):
            continue
        written = spec.get("from")
        if not isinstance(written, str) or not written:
            continue
        name = _name(doc.data)
        if not isinstance(name, str) or not name:
            line = _line_of(doc.node)
            raise CliError(
                "bad_job_file",
                f"{source}{f':{line}' if line else ''}: document {index + 1} (Dataset): give "
                "the dataset's name in metadata.name",
            )
        at = position(doc.node, ["spec", "from"]) if doc.node is not None else None
        where = (f"{source}:{at[0]}:{at[1]}" if at else source) + f": document {index + 1} "
        where += f"(Dataset {name})"
        try:
            found = uploads.scan(base / written)
        except uploads.ScanError as error:
            raise CliError(error.code, f"{where}: spec.from: {error.message}") from None
        team = spec.get("team") if isinstance(spec.get("team"), str) else None
        config = read_config()
        connect = partial(Client, config.url, config.token, timeout=UPLOAD_TIMEOUT_S)
        client = connect()
        try:
            done = uploads.upload(client, name, found, team, dry_run, connect)
        except ApiError as error:
            raise CliError(error.code, f"{where}: {error.message}") from None
        finally:
            client.close()
        del spec["from"]
        spec["manifest"] = done.manifest
        sources.append(Source(index, written, done.manifest))
        err.print(f"[dim]{escape(uploaded_text(name, written, done, dry_run))}[/dim]")
    return sources


def uploaded_text(name: str, written: str, done: Any, dry_run: bool) -> str:
    """'dataset corpus from data/: 3 files, 12 kB; sent 2 blobs, 8 kB' (or, in a dry run,
    'would send 2 blobs, 8 kB')."""
    from gpupool.domain.units import format_bytes

    plural = "" if done.file_count == 1 else "s"
    blobs = "" if done.missing_blobs == 1 else "s"
    what = f"{done.missing_blobs} blob{blobs}, {format_bytes(done.missing_bytes)}"
    said = f"would send {what}" if dry_run else f"sent {what}"
    if not done.missing_blobs:
        said = "the server has every file"
    return (
        f"dataset {name} from {written}: {done.file_count} file{plural}, "
        f"{format_bytes(done.total_bytes)}; {said}"
    )


def as_written(shown: list[dict[str, Any]], sources: list[Source]) -> list[dict[str, Any]]:
    """The documents the server read, each Dataset's ``from`` in place of the manifest it
    was sent as."""
    for source in sources:
        spec = shown[source.index].get("spec")
        if isinstance(spec, dict) and spec.get("manifest") == source.manifest:
            spec.pop("manifest")
            shown[source.index]["spec"] = {"from": source.written, **spec}
    return shown


def plain(node: Any) -> Any:
    """ruamel's round-trip nodes as plain dicts, lists and scalars (JSON's types)."""
    if isinstance(node, dict):
        return {str(k): plain(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return str(node)  # dates and other YAML types: as written


def parse_set(item: str) -> tuple[str | None, list[str], Any]:
    """``--set [NAME/]a.b=VALUE`` as (the document's name or None: every document, the path,
    the value read as YAML: 2 is a number, true a boolean, [a, b] a list). A path that
    does not start at apiVersion, kind, metadata or spec is taken inside spec."""
    key, equals, raw = item.partition("=")
    if not equals or not key.strip():
        raise typer.BadParameter(f"'{item}' is not KEY=VALUE, e.g. --set resources.gpus=2")
    target, slash, path = key.strip().rpartition("/")
    parts = [p for p in path.split(".")]
    if not all(parts):
        raise typer.BadParameter(f"'{key}' is not a dotted path, e.g. spec.resources.gpus")
    if parts[0] not in TOP:
        parts = ["spec", *parts]
    return (target if slash else None), parts, _yaml_value(raw)


def _yaml_value(raw: str) -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        return plain(YAML(typ="safe", pure=True).load(raw)) if raw.strip() else ""
    except YAMLError:
        return raw


def apply_sets(documents: list[Loaded], sets: list[str]) -> None:
    """Change the documents as ``--set`` asks (in order); CliError for a name no document
    has."""
    for item in sets:
        target, parts, value = parse_set(item)
        hit = False
        for doc in documents:
            if target is not None and _name(doc.data) != target:
                continue
            _put(doc.data, parts, value, item)
            hit = True
        if not hit:
            names = ", ".join(n for n in (_name(d.data) for d in documents) if n) or "none"
            raise CliError(
                "bad_set",
                f"--set {item}: no document is named '{target}' (names: {names})",
                2,
            )


def _put(data: Any, parts: list[str], value: Any, item: str) -> None:
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if isinstance(data, list):
            if not part.isdigit() or int(part) >= len(data):
                raise CliError("bad_set", f"--set {item}: '{part}' is not an index of the list", 2)
            if last:
                data[int(part)] = value
            else:
                data = data[int(part)]
            continue
        if not isinstance(data, dict):
            raise CliError("bad_set", f"--set {item}: '{parts[index - 1]}' is not a mapping", 2)
        if last:
            data[part] = value
        else:
            data = data.setdefault(part, {})


def _name(data: dict[str, Any]) -> str | None:
    metadata = data.get("metadata")
    return metadata.get("name") if isinstance(metadata, dict) else None


def position(node: Any, path: list[str]) -> tuple[int, int] | None:
    """The line and column (from 1) of ``path``'s node in ``node``, or of the deepest node
    of it that is written (a missing field: its mapping's key)."""
    found: tuple[int, int] | None = None
    for part in path:
        lc = getattr(node, "lc", None)
        if lc is None:
            break
        if isinstance(node, dict) and part in node:
            found = lc.key(part)
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            found = lc.item(int(part))
            node = node[int(part)]
        else:
            break
    if found is None:
        line = _line_of(node)
        return (line, 1) if line else None
    return found[0] + 1, found[1] + 1


def _line_of(node: Any) -> int | None:
    lc = getattr(node, "lc", None)
    return lc.line + 1 if lc is not None and lc.line is not None else None


def located(error: ApiError, documents: list[Loaded], name: str) -> CliError:
    """The server's refusal with the file's position of the field it names."""
    fields = error.details.get("fields") if isinstance(error.details, dict) else None
    where = name
    if isinstance(fields, list) and fields and isinstance(fields[0], dict):
        parts = str(fields[0].get("field", "")).split(".")
        if len(parts) >= 2 and parts[0] == "documents" and parts[1].isdigit():
            index = int(parts[1])
            if index < len(documents) and documents[index].node is not None:
                found = position(documents[index].node, parts[2:])
                if found is not None:
                    where = f"{name}:{found[0]}:{found[1]}"
    return CliError(error.code, f"{where}: {error.message}")


def apply(
    file: Annotated[
        str,
        typer.Option(
            "--filename",
            "-f",
            help="The job file (YAML: one document or several, separated by ---); - for stdin.",
            metavar="FILE",
        ),
    ],
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Change a field before sending: spec.resources.gpus=2 (a path outside "
            "apiVersion, kind, metadata and spec is inside spec); NAME/PATH=VALUE: only the "
            "document of that name. Repeatable.",
            metavar="[NAME/]PATH=VALUE",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Check the documents on the server as a submit would, make nothing, and "
            "print them as the server read them.",
        ),
    ] = False,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="yaml or json: print the documents as the server read them (with ids, "
            "unless --dry-run). Default: one line per document made; yaml with --dry-run.",
            metavar="FORMAT",
        ),
    ] = None,
    ignore_image: Annotated[
        bool,
        typer.Option(
            "--ignore-image",
            help="A Kubeflow manifest's container image that is no gpupool image does not "
            "refuse it: its job runs on the nodes' own system (a notice says so).",
        ),
    ] = False,
) -> None:
    """Make the Jobs, Environments, Datasets, Volumes, Notebooks, Deployments and
    Experiments of a job file, all in one transaction; Kubeflow manifests too.

    A document is apiVersion: gpupool/v1, kind (Job, Environment, Dataset, Volume, Notebook
    or Deployment), metadata.name, and spec: the fields of the API's request body of that
    kind (see examples/*.yaml and docs/jobfiles.md; the JSON schemas at /api/v1/schemas/).
    A Job's depends_on may name a Job that comes before it in the file, its datasets and
    volumes a Dataset or Volume before it: a pipeline in one file. A Dataset's from: DIR
    (relative to the file) is uploaded first, only the files the server lacks (with
    --dry-run: counted, not sent).

    A Kubeflow PyTorchJob, TFJob, MPIJob or TrainJob is taken as it is and runs as one
    gpupool job over its nodes (docs/kubeflow.md); each field gpupool does not honour is
    printed as a notice.
    """
    fmt = (output or (Format.YAML if dry_run else "")).lower()
    if fmt not in ("", Format.YAML, Format.JSON):
        raise typer.BadParameter("yaml or json", param_hint="'--output'")
    text, name = read_source(file)
    documents = load_documents(text, name)
    apply_sets(documents, set_ or [])
    base = Path.cwd() if file == SOURCE_STDIN else Path(file).resolve().parent
    with connect() as client:
        send_codes(client, documents, base)
        sources = send_datasets(documents, base, dry_run, name)
        try:
            answer = client.apply([d.data for d in documents], dry_run, ignore_image)
        except ApiError as error:
            if error.status in (404, 422, 409, 403):
                raise located(error, documents, name) from None
            raise
    made = answer["documents"]
    print_notices(made)
    if fmt:
        shown = as_written([m["document"] for m in made], sources)
        if not dry_run:  # what was made: each document with its id
            shown = [m["document"] | {"status": _made_status(m)} for m in made]
        sys.stdout.write(dump(shown, fmt))
        return
    for item in made:
        label = item["kind"].lower()
        named = f" ({escape(item['name'])})" if item.get("name") else ""
        tasks = len(item.get("job_ids") or [])
        more = f", an array of {tasks} tasks" if item["kind"] == "Job" and tasks > 1 else ""
        if item["id"] is None:  # a Kubeflow runtime: read for the file's TrainJobs
            out.print(f"{label}{named}: read, nothing made")
            continue
        source = item.get("translated_from")
        more += f", from {escape(source.split()[-1])}" if source else ""
        out.print(f"{label} {item['id']}{named}{more}")
    if dry_run:
        err.print("[dim]dry run: nothing was made[/dim]")


def print_notices(made: list[dict[str, Any]]) -> None:
    """Each field of a Kubeflow manifest that gpupool does not honour, on stderr."""
    for index, item in enumerate(made):
        notices = item.get("notices") or []
        if not notices:
            continue
        kind = (item.get("translated_from") or item["kind"]).split()[-1]
        named = f" {item['name']}" if item.get("name") else ""
        err.print(escape(f"document {index + 1} ({kind}{named}): not honoured:"))
        for notice in notices:
            err.print(f"  [yellow]{escape(notice['field'])}[/yellow]: {escape(notice['message'])}")


def _made_status(item: dict[str, Any]) -> dict[str, Any]:
    status: dict[str, Any] = {"id": item["id"]}
    if len(item.get("job_ids") or []) > 1:
        status["job_ids"] = item["job_ids"]
    return status
