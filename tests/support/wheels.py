"""Small, real wheels made on the spot, for environments built without any index but a
directory (uv's --find-links): each a pure-Python package whose module says its version."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def make_wheel(
    where: Path, name: str, version: str, requires: tuple[str, ...] = (), body: str = ""
) -> Path:
    """``name-version-py3-none-any.whl`` in ``where``: module ``name`` (dashes as
    underscores) with ``__version__``, ``body`` appended; ``requires``: its dependencies."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{dist}/__init__.py": f"__version__ = {version!r}\n{body}",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpupool-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = [f"{path},sha256={_digest(text)},{len(text.encode())}" for path, text in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def wheelhouse(where: Path) -> Path:
    """A directory of wheels: alpha 1.0 and 2.0, beta 0.1 (needs alpha>=1), gamma 1.0 and
    1.1 (each with a 1 MiB data module, for the disk a version's files take)."""
    make_wheel(where, "alpha", "1.0")
    make_wheel(where, "alpha", "2.0")
    make_wheel(where, "beta", "0.1", requires=("alpha>=1",))
    blob = "DATA = " + repr("x" * (1 << 20)) + "\n"
    make_wheel(where, "gamma", "1.0", body=blob)
    make_wheel(where, "gamma", "1.1", body=blob)
    return where


def index_env(where: Path) -> dict[str, str]:
    """A server's settings that resolve and build environments from ``where`` alone."""
    return {
        "GPUPOOL_ENV_INDEX_URL": "",
        "GPUPOOL_ENV_NO_INDEX": "true",
        "GPUPOOL_ENV_FIND_LINKS": str(where),
    }


def _digest(text: str) -> str:
    raw = hashlib.sha256(text.encode()).digest()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def lock_line(wheel: Path) -> str:
    """``name==version --hash=sha256:...`` of a wheel, as a lock pins it."""
    name, version = wheel.name.split("-")[:2]
    return f"{name}=={version} --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}\n"
