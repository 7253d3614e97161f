"""Resolving an environment's packages into a lock, on the server, with uv.

What a user gives (a requirements file, a pyproject.toml's dependencies, a uv.lock's pinned
packages) is first reduced to plain requirements, each a package name from the site's index
with version ranges: no options (``-e``, ``--index-url``, ``-r``), no direct URL or path, so
that neither the server nor a node ever fetches from an address a user chose. ``uv pip
compile`` then pins every package with its hashes for the environment's Python and this
machine's platform, against the site's index (``executors.environments.package_index``), with
no source build unless the admin allows them (a source build runs the package's own code).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import tomllib

from packaging.requirements import InvalidRequirement, Requirement

from gpupool.domain.environments import SourceKind
from gpupool.errors import EnvironmentUnresolvable, InvalidEnvironment
from gpupool.executors.environments import package_index, platform_tag, uv_binary
from gpupool.settings import Settings

OUTPUT_TAIL = 30  # lines of uv's output in an error
MAX_REQUIREMENTS = 2000


def requirements_of(kind: SourceKind, text: str) -> list[str]:
    """The plain requirements ``text`` of ``kind`` asks for; InvalidEnvironment naming the
    line or package at fault."""
    if kind is SourceKind.REQUIREMENTS:
        found = _from_requirements(text)
    elif kind is SourceKind.PYPROJECT:
        found = _from_pyproject(text)
    else:
        found = _from_uv_lock(text)
    if not found:
        raise InvalidEnvironment(
            "no package is asked for: list at least one (e.g. numpy>=1.26)",
            fields=[{"field": kind.value, "message": "no packages"}],
        )
    if len(found) > MAX_REQUIREMENTS:
        raise InvalidEnvironment(f"{len(found)} packages: an environment takes at most 2000")
    return found


def resolve(settings: Settings, requirements: list[str], python: str) -> tuple[str, str]:
    """(lock, platform): every package pinned with its hashes, as uv resolved them against
    the site's index for ``python`` on this machine's platform; EnvironmentUnresolvable with
    uv's explanation when they cannot be."""
    index = package_index(settings)
    platform = platform_tag()
    cache = settings.envs_dir / ".uv-cache"  # shared with this node's builds
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    cache.chmod(0o700)
    with tempfile.TemporaryDirectory(prefix="gpupool-resolve-") as work:
        source = os.path.join(work, "requirements.in")
        with open(source, "w", encoding="utf-8") as f:
            f.write("\n".join(requirements) + "\n")
        command = [
            uv_binary(),
            "pip",
            "compile",
            "--no-config",
            "--quiet",
            "--generate-hashes",
            "--no-annotate",
            "--no-header",
            "--python-version",
            python,
            "--python-platform",
            platform,
            "--cache-dir",
            str(cache),
            *index.options,
            *([] if settings.env_allow_source_builds else ["--no-build"]),
            source,
        ]
        env = {**os.environ, **index.uv_env(), "HOME": work}
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                cwd=work,
                env=env,
                timeout=settings.env_resolve_timeout_seconds,
            )
        except subprocess.TimeoutExpired:
            raise EnvironmentUnresolvable(
                f"resolving took longer than {settings.env_resolve_timeout_seconds:.0f} s: "
                "try again, or ask fewer packages"
            ) from None
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        tail = "\n".join(lines[-OUTPUT_TAIL:])
        raise EnvironmentUnresolvable(
            f"the packages could not be resolved for Python {python} ({platform}):\n{tail}"
        )
    return done.stdout, platform


def _requirement(text: str, where: str) -> str:
    try:
        found = Requirement(text)
    except InvalidRequirement as e:
        raise InvalidEnvironment(f"{where}: '{text}' is not a requirement: {e}") from None
    if found.url:
        raise InvalidEnvironment(
            f"{where}: '{text}' names a URL or a path: an environment takes packages from "
            "the site's package index only (name and version range, e.g. numpy>=1.26)"
        )
    return str(found)


def _from_requirements(text: str) -> list[str]:
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            raise InvalidEnvironment(
                f"line {number}: '{line}' is an option: an environment takes package lines "
                "only (the index is the site's; no -e, -r, -c or --index-url)"
            )
        found.append(_requirement(line.rstrip("\\").strip(), f"line {number}"))
    return found


def _from_pyproject(text: str) -> list[str]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InvalidEnvironment(f"pyproject.toml is not valid TOML: {e}") from None
    deps = (data.get("project") or {}).get("dependencies")
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise InvalidEnvironment(
            "pyproject.toml has no [project] dependencies list: add one "
            '(dependencies = ["numpy>=1.26"])'
        )
    return [_requirement(d, "pyproject.toml") for d in deps]


def _from_uv_lock(text: str) -> list[str]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InvalidEnvironment(f"uv.lock is not valid TOML: {e}") from None
    packages = data.get("package")
    if not isinstance(packages, list):
        raise InvalidEnvironment("uv.lock has no [[package]] entries: is it a uv lock file?")
    found = []
    for package in packages:
        name, version = package.get("name"), package.get("version")
        source = package.get("source") or {}
        if "editable" in source or "virtual" in source:
            continue  # the project itself: its code travels with the job, not in the env
        if "registry" not in source:
            kind = next(iter(source), "unknown")
            raise InvalidEnvironment(
                f"uv.lock: package {name} comes from a {kind} source: an environment takes "
                "packages from the site's package index only"
            )
        if not isinstance(name, str) or not isinstance(version, str):
            raise InvalidEnvironment("uv.lock: a package has no name or version")
        found.append(_requirement(f"{name}=={version}", "uv.lock"))
    return found
