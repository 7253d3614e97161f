"""Python environments on a node: the package index this site uses, this node's interpreters,
and what a runner is told to build or show (spec.json's ``environment``).

The server resolves an environment against the same index (``services.environments``), so
the index's options are worked out here, once per settings: ``env_index_url`` "pip" reads the
machine's pip configuration (its files, then ``PIP_*`` variables), as ``pip install`` would,
and turns it into uv's options (uv reads no pip configuration itself).
"""

from __future__ import annotations

import configparser
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpupool.domain.environments import hex_of
from gpupool.settings import Settings

PIP_SECTIONS = ("global", "install")
# what uv must not do on its own: read uv.toml files, fetch interpreters, phone home
UV_ENV = {"UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
PYTHON_FIND_SECONDS = 30.0


@dataclass(frozen=True)
class PackageIndex:
    """Where packages come from: uv's options, the local paths they read (shown to a
    sandboxed build) and the environment uv needs (a CA bundle)."""

    options: tuple[str, ...]
    local_paths: tuple[str, ...]
    env: tuple[tuple[str, str], ...]

    def uv_env(self) -> dict[str, str]:
        return {**UV_ENV, **dict(self.env)}


def _index_of(
    index_url: str, extra: str, find_links: str, no_index: bool, environ: tuple
) -> PackageIndex:
    pip = _pip_configuration(dict(environ)) if index_url == "pip" else {}
    url = pip.get("index-url") if index_url == "pip" else index_url
    extras = _split(extra) + _split(pip.get("extra-index-url", ""))
    links = _split(find_links) + _split(pip.get("find-links", ""))
    off = no_index or _true(pip.get("no-index", ""))
    options: list[str] = []
    if off:
        options.append("--no-index")
    else:
        if url:
            options += ["--index-url", url]
        for item in extras:
            options += ["--extra-index-url", item]
    for item in links:
        options += ["--find-links", item]
    local = [_local_path(item) for item in [*([] if off else extras), *links, url or ""]]
    env = []
    cert = pip.get("cert") or dict(environ).get("SSL_CERT_FILE")
    if cert:
        env.append(("SSL_CERT_FILE", cert))
    return PackageIndex(tuple(options), tuple(p for p in local if p), tuple(env))


def package_index(settings: Settings) -> PackageIndex:
    """The index this node resolves and builds environments from (see the module's doc)."""
    environ = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_")))
    return _index_of(
        settings.env_index_url,
        settings.env_extra_index_urls,
        settings.env_find_links,
        settings.env_no_index,
        environ + (("HOME", os.environ.get("HOME", "")),),
    )


def uv_binary() -> str:
    """uv's executable: the one its wheel installed beside gpupool."""
    from uv import find_uv_bin

    return os.fsdecode(find_uv_bin())


def platform_tag() -> str:
    """What this machine's wheels must fit, as uv's --python-platform says it:
    ``x86_64-manylinux_2_36`` on a glibc 2.36 x86-64 Linux."""
    machine = platform.machine() or "x86_64"
    libc, version = platform.libc_ver()
    if libc == "glibc" and re.match(r"^\d+\.\d+$", version):
        major, minor = version.split(".")
        return f"{machine}-manylinux_{major}_{minor}"
    return f"{machine}-unknown-linux-gnu"


def server_python() -> str:
    """The Python version this server runs (a version environments get by default)."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def find_python(version: str) -> str | None:
    """This node's interpreter of ``version`` (3.11), as uv finds it; None when there is
    none (uv downloads none)."""
    if version == server_python():
        base = Path(sys.base_prefix) / "bin" / f"python{version}"
        if base.exists():
            return str(base)
    try:
        found = subprocess.run(
            [uv_binary(), "python", "find", "--no-config", version],
            capture_output=True,
            text=True,
            timeout=PYTHON_FIND_SECONDS,
            env={**os.environ, **UV_ENV},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = found.stdout.strip().splitlines()[-1:] if found.returncode == 0 else []
    return path[0] if path and path[0].startswith("/") else None


def runner_spec(
    settings: Settings,
    environment: dict[str, Any],
    index: PackageIndex | None = None,
    python_of: Callable[[str], str | None] = find_python,
    uv: str | None = None,
) -> dict[str, Any]:
    """spec.json's ``environment`` (``runner.wire.EnvironmentSpec``) for a task's
    ``environment`` (``TaskSpec.environment``: id, name, python, lock or prefix); ValueError
    when this node has no interpreter for it."""
    env_id, name = environment["id"], environment["name"]
    if environment.get("prefix"):
        return {"id": env_id, "name": name, "dir": environment["prefix"], "prefix": True}
    version = environment["python"]
    python = python_of(version)
    if python is None:
        raise ValueError(
            f"this node has no Python {version} for environment {name}: install one (uv "
            "python find finds none), or make the environment with --python "
            f"{server_python()}"
        )
    index = index or package_index(settings)
    options = list(index.options)
    if not settings.env_allow_source_builds:
        options.append("--no-build")
    home = str(Path(python).resolve().parents[1])
    return {
        "id": env_id,
        "name": name,
        "dir": str(settings.envs_dir / hex_of(env_id)),
        "prefix": False,
        "lock": environment["lock"],
        "python": python,
        "python_version": version,
        "uv": uv or uv_binary(),
        "cache": str(settings.envs_dir / ".uv-cache"),
        "index": options,
        "uv_env": index.uv_env(),
        "shown": list(dict.fromkeys([home, *index.local_paths])),
        "timeout": settings.env_build_timeout_seconds,
        "max_bytes": settings.envs_max_bytes,
    }


class NodeEnvironments:
    """What a node's executor tells its runners of the environments they need: this
    node's settings (where environments live, the index), bound once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.index = package_index(settings)  # the settings' and pip's, as the node started
        self.uv = uv_binary()
        self._pythons: dict[str, str | None] = {}  # version -> this node's interpreter

    def runner_spec(self, environment: dict[str, Any]) -> dict[str, Any]:
        return runner_spec(self.settings, environment, self.index, self.python, self.uv)

    def python(self, version: str) -> str | None:
        """This node's interpreter of ``version``, looked for once."""
        if version not in self._pythons:
            self._pythons[version] = find_python(version)
        return self._pythons[version]


def _pip_configuration(environ: dict[str, str]) -> dict[str, str]:
    """pip's settings that matter here, as pip reads them: its configuration files (the
    global ones, the user's, ``PIP_CONFIG_FILE``; ``[global]`` then ``[install]``), then
    ``PIP_*`` environment variables."""
    home = environ.get("HOME") or str(Path.home())
    parser = configparser.RawConfigParser()
    parser.read([f for f in _pip_files(home, environ) if os.path.isfile(f)])
    found: dict[str, str] = {}
    for section in PIP_SECTIONS:
        if parser.has_section(section):
            found.update({k: v for k, v in parser.items(section)})
    for key in ("index-url", "extra-index-url", "find-links", "no-index", "cert"):
        value = environ.get("PIP_" + key.upper().replace("-", "_"))
        if value is not None:
            found[key] = value
    return found


def _pip_files(home: str, environ: dict[str, str]) -> list[str]:
    """pip's configuration files, in the order it reads them (a later one wins)."""
    xdg = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files = [f"{d}/pip/pip.conf" for d in xdg] + ["/etc/pip.conf"]
    files += [f"{home}/.pip/pip.conf", f"{home}/.config/pip/pip.conf"]
    if environ.get("PIP_CONFIG_FILE"):
        files.append(environ["PIP_CONFIG_FILE"])
    return files


def _split(text: str) -> list[str]:
    return [item for item in re.split(r"[\s,]+", text.strip()) if item]


def _true(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def _local_path(item: str) -> str | None:
    """The directory an index or find-links location reads on this machine, if local."""
    path = item.removeprefix("file://") if item.startswith("file://") else item
    if path.startswith("/"):
        return path.rstrip("/") or "/"
    return None
