"""Container images for tests, made without docker: an OCI image layout written here from
tar layers this module builds (so that a test can put anything in a layer, a hostile one
included), and a real registry (Debian's ``docker-registry``) on 127.0.0.1 that ``skopeo``
pushes them to.

A base image holds the host's static busybox as ``/bin/busybox`` with ``/bin/sh`` and the
usual applets as links to it, and a marker ``/etc/os-release``: the smallest image a job runs
a shell in.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.server import free_port

REGISTRY = Path("/usr/bin/docker-registry")
BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "cat", "ls", "env", "pwd", "id", "echo", "test", "stat", "sleep", "true")
OS_RELEASE = 'NAME="gpupool test image"\nID=gpupool-test\n'
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


def missing_tools() -> str | None:
    """Why image tests cannot run here (a tool is missing), or None."""
    for tool in ("skopeo", "umoci"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install-system-deps.sh test installs it)"
    if not REGISTRY.exists():
        return "docker-registry is not installed (scripts/install-system-deps.sh test)"
    if not _static(BUSYBOX):
        return "busybox-static is not installed (scripts/install-system-deps.sh test)"
    return None


def _static(path: Path) -> bool:
    """Whether ``path`` is an executable with no program interpreter (runs in any root)."""
    try:
        head = path.read_bytes()[:4096]
    except OSError:
        return False
    return head.startswith(b"\x7fELF") and b"/ld-linux" not in head and b"ld.so" not in head


@dataclass
class Member:
    """One member of a layer's tar: ``kind`` is file, dir, symlink, hardlink, char, block
    or fifo; ``target`` is a link's."""

    path: str
    kind: str = "file"
    data: bytes = b""
    mode: int = 0o644
    target: str = ""
    uid: int = 0
    gid: int = 0


KINDS = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "char": tarfile.CHRTYPE,
    "block": tarfile.BLKTYPE,
    "fifo": tarfile.FIFOTYPE,
}


def layer(members: list[Member]) -> bytes:
    """An uncompressed tar of ``members``, written as given (no path is cleaned)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            info = tarfile.TarInfo(member.path)
            info.type = KINDS[member.kind]
            info.mode, info.uid, info.gid, info.mtime = member.mode, member.uid, member.gid, 0
            if member.kind in ("symlink", "hardlink"):
                info.linkname = member.target
            if member.kind in ("char", "block"):
                info.devmajor, info.devminor = 1, 3
            data = member.data if member.kind == "file" else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


def base_members(marker: str = OS_RELEASE) -> list[Member]:
    """A busybox root: /bin/sh and applets, /etc/os-release holding ``marker``."""
    members = [Member(d, "dir", mode=0o755) for d in ("bin", "etc", "tmp", "usr", "var")]
    members.append(Member("bin/busybox", data=BUSYBOX.read_bytes(), mode=0o755))
    members += [Member(f"bin/{a}", "symlink", target="busybox") for a in APPLETS]
    members.append(Member("etc/os-release", data=marker.encode()))
    return members


@dataclass
class ImageConfig:
    env: list[str] = field(default_factory=lambda: ["PATH=/bin:/usr/bin"])
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    workdir: str = ""


class Layout:
    """An OCI image layout on disk, written blob by blob."""

    def __init__(self, path: Path) -> None:
        self.path = path
        (path / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        if not (path / "index.json").exists():
            (path / "index.json").write_text('{"schemaVersion": 2, "manifests": []}')

    def blob(self, data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        (self.path / "blobs" / "sha256" / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    def add(self, tag: str, layers: list[bytes], config: ImageConfig) -> str:
        """Write an image of ``layers`` (uncompressed tars) as ``tag``; its manifest digest."""
        described, diff_ids = [], []
        for tar in layers:
            diff_ids.append("sha256:" + hashlib.sha256(tar).hexdigest())
            packed = gzip.compress(tar, mtime=0)
            described.append({"mediaType": LAYER_TYPE, **self.blob(packed)})
        inner: dict[str, object] = {"Env": config.env}
        if config.entrypoint is not None:
            inner["Entrypoint"] = config.entrypoint
        if config.cmd is not None:
            inner["Cmd"] = config.cmd
        if config.workdir:
            inner["WorkingDir"] = config.workdir
        image_config = {
            "architecture": "amd64",
            "os": "linux",
            "config": inner,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, **self.blob(_json(image_config))},
            "layers": described,
        }
        reference = self.blob(_json(manifest))
        index = json.loads((self.path / "index.json").read_text())
        index["manifests"] = [
            m
            for m in index["manifests"]
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != tag
        ]
        index["manifests"].append(
            {
                "mediaType": MANIFEST_TYPE,
                **reference,
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }
        )
        (self.path / "index.json").write_text(json.dumps(index))
        return str(reference["digest"])

    def oci_archive(self, tag: str, into: Path) -> Path:
        """The image ``tag`` as an OCI archive (a tar of a layout), as ``image import`` takes."""
        subprocess.run(
            ["skopeo", "copy", "-q", f"oci:{self.path}:{tag}", f"oci-archive:{into}:{tag}"],
            check=True,
            capture_output=True,
        )
        return into

    def docker_archive(self, tag: str, into: Path, name: str) -> Path:
        """The image ``tag`` as ``docker save`` writes it."""
        subprocess.run(
            ["skopeo", "copy", "-q", f"oci:{self.path}:{tag}", f"docker-archive:{into}:{name}"],
            check=True,
            capture_output=True,
        )
        return into


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


class Registry:
    """A real registry (Debian's docker-registry) on 127.0.0.1, storing in a directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.layout = Layout(directory / "layout")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> Registry:
        config = self.directory / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.directory / 'storage'}\n"
            "  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.host}\n"
        )
        log = (self.directory / "registry.log").open("wb")
        self.process = subprocess.Popen(
            [str(REGISTRY), "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://{self.host}/v2/", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"the registry did not start: {(self.directory / 'registry.log')}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def push(
        self, name: str, layers: list[bytes], config: ImageConfig | None = None, tag: str = "1"
    ) -> str:
        """Build the image and push it as ``name:tag``; its reference in this registry."""
        local = f"{name.replace('/', '-')}-{tag}"
        self.layout.add(local, layers, config or ImageConfig())
        ref = f"{self.host}/{name}:{tag}"
        subprocess.run(
            [
                "skopeo",
                "copy",
                "-q",
                "--dest-tls-verify=false",
                f"oci:{self.layout.path}:{local}",
                f"docker://{ref}",
            ],
            check=True,
            capture_output=True,
        )
        return ref


def scratch_layout() -> Layout:
    """A layout in a fresh temporary directory (the caller removes it)."""
    return Layout(Path(tempfile.mkdtemp(prefix="gpupool-oci-")))
