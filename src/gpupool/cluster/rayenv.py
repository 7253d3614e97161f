"""What every Ray process of the pool runs with: token authentication, no outbound reports,
health checks, and Ray's processes kept on the address given.

From measurements on loopback (docs/cluster.md): Ray rewrites the address 127.0.0.1 to the
machine's external one unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set before Ray is
imported; it binds its servers to loopback only when the node address is exactly
"127.0.0.1"; and the head's dashboard reports usage unless the three settings of
``quiet_environment`` and a bootstrap file in its HOME say otherwise.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

LOOPBACK = "127.0.0.1"
NAMESPACE = "gpupool"
NODE_RESOURCE = "gpupool-node:"  # + the node's name: a custom resource that pins work there
TOKEN_FILE = "ray-token"
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
BOOTSTRAP_CONFIG = "provider: {type: local}\n"


def node_resource(name: str) -> str:
    """The custom resource a node offers (one unit) so that its agent is placed on it."""
    return NODE_RESOURCE + name


def name_of(resources: dict[str, float]) -> str | None:
    """The gpupool node name a Ray node carries in its resources, or None (not ours)."""
    for key in resources:
        if key.startswith(NODE_RESOURCE):
            return key[len(NODE_RESOURCE) :]
    return None


def ensure_token(path: Path) -> Path:
    """The pool's Ray secret at ``path``, made (0600) when missing."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    return path


def write_token(path: Path, token: str) -> Path:
    """Keep a secret handed over by the server (``gpupool node join``), readable by us only."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token)
    os.replace(tmp, path)
    return path


def quiet_home(directory: Path) -> Path:
    """A HOME for the head that holds a bootstrap config of a local provider: with it (and
    the usage settings) the dashboard sends nothing out."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    (directory / "ray_bootstrap_config.yaml").write_text(BOOTSTRAP_CONFIG)
    return directory


def ray_environment(
    token_path: Path,
    address_host: str,
    health_period_ms: int = 500,
    health_failures: int = 3,
) -> dict[str, str]:
    """The variables every Ray process of the pool gets (added to its environment)."""
    env = {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token_path),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
        "RAY_health_check_period_ms": str(health_period_ms),
        "RAY_health_check_timeout_ms": str(health_period_ms),
        "RAY_health_check_failure_threshold": str(health_failures),
        "RAY_health_check_initial_delay_ms": "0",
        # the driver gives up on a lost head after this; the bridge is expendable, but it
        # must not hang for a minute before the server can say the cluster is unreachable
        "RAY_gcs_rpc_server_reconnect_timeout_s": "20",
    }
    if address_host == LOOPBACK:
        env[LOOPBACK_SWITCH] = "0"
    return env


def only_loopback() -> bool:
    """True where loopback is this machine's only network interface (a namespace made for
    a pool on one machine): there Ray's address rewriting finds 127.0.0.1 itself."""
    import socket

    return [name for _, name in socket.if_nameindex()] == ["lo"]


def split_address(address: str) -> tuple[str, int]:
    """'host:port' -> (host, port); ValueError with what to write otherwise."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"'{address}' is not a Ray address: write HOST:PORT, e.g. 10.0.0.1:6380")
    return host, int(port)
