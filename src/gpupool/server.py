"""The composition root: ``gpupool server`` and ``gpupool db``, wiring settings to the app."""

from __future__ import annotations

import gc
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

import gpupool
from gpupool.cli.output import CliError

if TYPE_CHECKING:
    from gpupool.domain.inventory import NodeInventory
    from gpupool.services.core import DataDirLock
    from gpupool.services.identity import RecoveredToken
    from gpupool.services.platform import Platform
    from gpupool.settings import Settings

# The server's heavy modules (uvicorn, SQLAlchemy, Alembic, the app) are imported inside the
# commands, so that every other CLI command starts fast.

console = Console(stderr=True)
db_app = typer.Typer(help="Database schema: upgrade, current revision.", no_args_is_help=True)


def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8765).")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Data directory (GPUPOOL_DATA_DIR).")
    ] = None,
    declare_gpus: Annotated[
        str | None,
        typer.Option(
            help="GPUs to declare where no NVIDIA driver answers: [COUNTx]MODEL[:MEMORY], "
            "e.g. 8xA100 or 4xA100-SXM4-80GB:80GiB (GPUPOOL_DECLARED_GPUS)."
        ),
    ] = None,
    declare_cpus: Annotated[
        int | None,
        typer.Option(
            help="CPUs this node offers to jobs, instead of the host's count "
            "(GPUPOOL_DECLARED_CPUS); each job asks for 1 unless run with --cpus.",
            min=1,
        ),
    ] = None,
    declare_memory: Annotated[
        str | None,
        typer.Option(
            help="Host memory this node offers to jobs, e.g. 512GiB, instead of the host's "
            "(GPUPOOL_DECLARED_MEMORY)."
        ),
    ] = None,
    ray: Annotated[
        bool,
        typer.Option(
            "--ray",
            help="Make a pool of several machines: start a Ray head on --host (port "
            "--ray-port), which other machines join with 'gpupool node join' (GPUPOOL_RAY).",
        ),
    ] = False,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="Use the running Ray cluster at HOST:PORT (its GCS) instead of starting a "
            "head; its nodes need the pool's Ray token (GPUPOOL_RAY_ADDRESS).",
        ),
    ] = None,
    ray_port: Annotated[
        int | None, typer.Option(help="The Ray head's port (default 6380; GPUPOOL_RAY_PORT).")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning.")] = "info",
) -> None:
    """Run the gpupool server (API, web UI, scheduler) in the foreground."""
    from gpupool.settings import Settings

    overrides = {
        "host": host,
        "port": port,
        "data_dir": data_dir,
        "declared_gpus": declare_gpus,
        "declared_cpus": declare_cpus,
        "declared_memory": declare_memory,
        "ray": ray or None,
        "ray_address": ray_address,
        "ray_port": ray_port,
    }
    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)  # it narrates every step at INFO
    import uvicorn

    from gpupool.api.app import create_app

    lock, platform = _open(settings)
    _banner(settings, platform.first_start)
    if platform.watcher is not None:
        _inventory_banner(platform.watcher.inventory)
    if platform.cluster is not None:
        _cluster_banner(settings, platform.cluster)
    _isolation_banner(platform.isolation())
    app = create_app(platform)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        access_log=False,
        ws="websockets-sansio",  # the proxy's WebSockets (notebooks' kernels)
        # every local client connects from 127.0.0.1: none may choose, with
        # X-Forwarded-For, the address that throttles and workloads see
        proxy_headers=False,
        http=_http_with_peer_pids(),
    )
    # what startup loaded lives as long as the server: out of the cyclic collector's full
    # passes, which a scheduling cycle's allocations set off (an explaining cycle of the scale
    # benchmark: 476 to 555 ms of CPU, 361 with this; the scheduler no longer pauses the
    # collector itself: docs/scheduling.md)
    gc.collect()
    gc.freeze()
    try:
        # the TCP address users reach, and the Unix socket that jobs with a network of
        # their own reach through their runners
        sockets = [config.bind_socket(), _api_socket(settings)]
        uvicorn.Server(config).run(sockets=sockets)
    finally:
        platform.close()
        lock.release()


def admin_token(
    user: Annotated[str, typer.Option(help="The admin to issue the token for.")] = "admin",
    data_dir: Annotated[
        Path | None, typer.Option(help="The server's data directory (GPUPOOL_DATA_DIR).")
    ] = None,
) -> None:
    """On the server's host: a new API token for an admin, when the first one is lost.

    It opens the database in the data directory itself (the server may be running or not),
    so it works only for an account that can read and write that directory: the server's,
    or root. The admin's other tokens keep working; revoke them with 'gpupool tokens revoke'.
    """
    import time

    from gpupool.errors import GpupoolError
    from gpupool.services.identity import issue_admin_token
    from gpupool.settings import Settings

    settings = Settings(**({"data_dir": data_dir} if data_dir is not None else {}))
    try:
        found = issue_admin_token(settings, user, time.time())
    except GpupoolError as error:
        raise CliError(error.code, error.message) from None
    _print_recovered(found)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Migrate the database to this gpupool's schema (a SQLite file is backed up first)."""
    from gpupool.settings import Settings
    from gpupool.store import db as store

    settings = Settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    store.upgrade(settings.database)
    console.print(f"database at revision {store.head_revision()}")


@db_app.command("current")
def db_current() -> None:
    """Print the database's schema revision and the one this gpupool needs."""
    from gpupool.settings import Settings
    from gpupool.store import db as store

    database = store.Database(Settings().database)
    console.print(
        f"current: {store.current_revision(database.engine)}  needed: {store.head_revision()}"
    )


def _api_socket(settings: Settings):  # noqa: ANN202 - a bound socket.socket
    from gpupool.runner import bridge

    return bridge.listen(str(settings.api_socket))


def _http_with_peer_pids():  # noqa: ANN202 - an asyncio protocol class
    """uvicorn's HTTP protocol, which also keeps the pid of a caller on the Unix socket (a
    job's runner's bridge: SO_PEERCRED) in each request's state, where ``api.deps`` finds
    the job the call comes from; ASGI tells a Unix socket's caller no address."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from gpupool.api import peers

    class PeerPidProtocol(AutoHTTPProtocol):
        def connection_made(self, transport) -> None:  # noqa: ANN001 - asyncio's transport
            super().connection_made(transport)
            pid = peers.unix_peer_pid(transport.get_extra_info("socket"))
            if pid is not None:
                self.app_state = {**self.app_state, peers.PEER_PID: pid}

    return PeerPidProtocol


def _isolation_banner(status) -> None:  # noqa: ANN001 - IsolationStatus | None
    """Say how jobs are kept apart; loudly when they are not (README "Isolation")."""
    if status is None:
        return
    from gpupool.domain.isolation import IsolationMode

    if status.mode == IsolationMode.SANDBOX:
        console.print(f"isolation: {status.message}", soft_wrap=True)
    elif status.mode == IsolationMode.OFF:
        console.print(f"[bold yellow]WARNING[/bold yellow] {status.message}", soft_wrap=True)
    else:
        text = f"[bold red]ERROR[/bold red] {status.message}. Jobs wait until then."
        console.print(text, soft_wrap=True)


def _open(settings: Settings) -> tuple[DataDirLock, Platform]:
    """Check the declarations, take the data directory, open the platform; a problem is one
    'error [code]: ...' line and exit code 2, before a database or an admin is created."""
    from gpupool.discovery import DeclaredSettingError, check_declared
    from gpupool.errors import GpupoolError
    from gpupool.platform import open_platform
    from gpupool.services.core import DataDirLock

    lock = DataDirLock(settings.data_dir)
    try:
        check_declared(settings)
        lock.acquire(f"http://{settings.host}:{settings.port}")
        _sweep_part_files(settings)
        _check_dataset_store(settings)
        return lock, open_platform(settings)
    except DeclaredSettingError as error:
        raise CliError("bad_setting", f"{_SETTING_NAMES[error.setting]}: {error}", 2) from None
    except GpupoolError as error:
        lock.release()
        raise CliError(error.code, error.message, 2) from None


def _check_dataset_store(settings: Settings) -> None:
    """Refuse to start when the S3 dataset store is asked for but cannot be made (boto3,
    the s3 extra, not installed; no bucket named): said now, not at the first upload."""
    from gpupool.services import datasets

    datasets.blob_store(settings)


def _sweep_part_files(settings: Settings) -> None:
    """Remove the part files of uploads and model registrations that the last server left
    when it was killed (this one holds the data directory's lock: none is under way)."""
    from gpupool.services import datasets, jobs, models
    from gpupool.services.jobs import sweep_leftovers

    where = (
        settings.code_dir / jobs.CODE_INCOMING,
        settings.models_dir / models.MODEL_INCOMING,
        settings.datasets_dir / datasets.DATASET_INCOMING,
    )
    removed = sweep_leftovers(where)
    if removed:
        console.print(
            f"removed {len(removed)} partial files of uploads or model registrations cut short",
            soft_wrap=True,
        )


# What a declared setting is called where the operator gives it.
_SETTING_NAMES = {
    "declared_gpus": "--declare-gpus (GPUPOOL_DECLARED_GPUS)",
    "declared_cpus": "--declare-cpus (GPUPOOL_DECLARED_CPUS)",
    "declared_memory": "--declare-memory (GPUPOOL_DECLARED_MEMORY)",
    "declared_links": "GPUPOOL_DECLARED_LINKS",
}

NO_GPU_HINT = (
    "no GPU found (NVML and nvidia-smi found none, and none are declared), so jobs that ask "
    "for GPUs wait; on a host without a driver, declare them with --declare-gpus 4xA100 or "
    "GPUPOOL_DECLARED_GPUS=4xA100"
)


def _inventory_banner(inventory: NodeInventory | None) -> None:
    """Say what this node's GPUs were taken from when they were not discovered, and how to
    declare them when there are none."""
    if inventory is None:
        return
    if not inventory.gpus:
        console.print(f"[bold yellow]WARNING[/bold yellow] {NO_GPU_HINT}", soft_wrap=True)
    for warning in inventory.warnings:
        console.print(f"note: {warning}", soft_wrap=True, highlight=False)


def _cluster_banner(settings: Settings, cluster) -> None:  # noqa: ANN001 - services.Cluster
    """Where the pool's head is, and what another machine runs to join."""
    from gpupool.services.cluster import join_token

    state = cluster.state()
    url = settings.public_url or f"http://{settings.host}:{settings.port}"
    lines = [f"pool: Ray head at {state.address}; nodes up: {', '.join(state.nodes_up) or 'none'}"]
    if not state.reachable:
        lines.append(f"WARNING {state.problem}")
    lines.append(f"join:  {_cli_command()} node join {url} --token {join_token(settings)}")
    print("\n".join(lines), flush=True)


def node_join(
    server: Annotated[str, typer.Argument(help="The pool's server, e.g. http://10.0.0.1:8765.")],
    token: Annotated[str, typer.Option(help="The pool's join token (the server prints it).")],
    name: Annotated[
        str | None, typer.Option(help="The node's name (default: this host's name).")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="The node's own files: its jobs' records and logs (default: "
            "~/.local/share/gpupool/nodes/NAME)."
        ),
    ] = None,
    declare_gpus: Annotated[
        str | None,
        typer.Option(help="GPUs to declare where no NVIDIA driver answers, e.g. 4xA100."),
    ] = None,
    declare_cpus: Annotated[
        int | None, typer.Option(help="CPUs this node offers to jobs.", min=1)
    ] = None,
    declare_memory: Annotated[
        str | None, typer.Option(help="Host memory this node offers to jobs, e.g. 256GiB.")
    ] = None,
    fabric_group: Annotated[
        str | None,
        typer.Option(help="The node's fabric group (default: derived from its network)."),
    ] = None,
    start_tries: Annotated[
        int,
        typer.Option(
            help="Tries of Ray's node start before giving up (a busy head, machines joining "
            "at once), waiting 1 s, 2 s, 4 s... between them.",
            min=1,
            envvar="GPUPOOL_JOIN_START_TRIES",
        ),
    ] = 6,
) -> None:
    """Join this machine to a pool: start its Ray node, wait until it is schedulable, then
    run in the foreground until stopped (Ctrl-C or SIGTERM stops the node)."""
    from gpupool.client.api import ApiError
    from gpupool.cluster.join import JoinError, JoinRequest, default_name, join, stay
    from gpupool.cluster.process import RayStartError
    from gpupool.settings import default_data_dir

    name = name or default_name()
    declared = {
        "GPUPOOL_DECLARED_GPUS": declare_gpus,
        "GPUPOOL_DECLARED_CPUS": str(declare_cpus) if declare_cpus else None,
        "GPUPOOL_DECLARED_MEMORY": declare_memory,
        "GPUPOOL_FABRIC_GROUP": fabric_group,
    }
    request = JoinRequest(
        server=server,
        token=token,
        name=name,
        data_dir=data_dir or default_data_dir() / "nodes" / name,
        declared={k: v for k, v in declared.items() if v is not None},
        start_tries=start_tries,
    )
    try:
        joined = join(request, say=lambda text: console.print(text, highlight=False))
    except ApiError as error:
        raise CliError(error.code, error.message, 2) from None
    except (JoinError, RayStartError) as error:
        raise CliError("join_failed", str(error), 2) from None
    print(
        f"node {name} joined the pool and is schedulable after {joined.schedulable_seconds:.1f} s "
        f"(Ray node up after {joined.ray_seconds:.1f} s)",
        flush=True,
    )
    raise typer.Exit(stay(joined, say=lambda text: console.print(text, highlight=False)))


def _print_recovered(found: RecoveredToken) -> None:
    running = "" if found.server_running else " (the server is not running: start it first)"
    lines = [
        f"A new API token for admin '{found.user}', shown once:",
        "",
        f"    {found.token}",
        "",
        f"CLI:     {_cli_command()} login {found.url} --token {found.token}{running}",
        f"Web UI:  {found.url}/  (user '{found.user}'; the token works as its password)",
    ]
    print("\n".join(lines), flush=True)


def _banner(settings, first) -> None:  # noqa: ANN001
    url = f"http://{settings.host}:{settings.port}"
    lines = [f"gpupool {gpupool.__version__} serving {url}  (data in {settings.data_dir})"]
    if first is not None:
        lines += [
            "",
            "First start: an admin user was created. Its API token is shown once:",
            "",
            f"    {first.token}",
            "",
            f"CLI:     {_cli_command()} login {url} --token {first.token}",
            f"Web UI:  {url}/  (user '{first.user}'; the token works as its password until you",
            f"         set one: gpupool users set-password {first.user})",
            "",
        ]
    print("\n".join(lines), flush=True)


def _cli_command() -> str:
    """How to call this gpupool: 'gpupool' when that name on PATH is this one, else the full
    path of the one beside this Python (``make serve`` runs .venv/bin/gpupool without
    putting .venv/bin on PATH)."""
    import shutil
    import sys

    beside = Path(sys.executable).parent / "gpupool"
    found = shutil.which("gpupool")
    if not beside.is_file() or (found and Path(found).resolve() == beside.resolve()):
        return "gpupool"
    return str(beside.absolute())
