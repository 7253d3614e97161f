"""Container images on a node: an image's root file tree, unpacked once per node, and its
config (Env, Entrypoint, Cmd, WorkingDir).

The server keeps each image as an OCI image layout of its own (``<hex>/``, tagged
``image``); a node unpacks it with ``umoci unpack --rootless`` into its image cache
(``<hex>/rootfs``, beside ``image.json``, the config a job's start reads), once, shared by
every job that uses it. The runner binds the tree as the sandbox's read-only root.

Unpacking is where a hostile image is made harmless. umoci keeps every path of a layer
inside the root (a ``..`` or absolute member lands inside it), refuses a hard link to
something outside it, writes device nodes as empty files, and leaves symbolic links as
they are (a link out of the root is resolved inside the sandbox's root, where the host is
not). What umoci keeps and a sandbox must not hold is removed here: setuid and setgid bits,
and any special file left (FIFOs, sockets, device nodes).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

TAG = "image"  # the tag of the one image in each stored layout
ROOTFS = "rootfs"
CONFIG = "image.json"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
UNPACK_TIMEOUT_S = 3600.0
# where a job in an image given GPUs finds the driver's libraries (on LD_LIBRARY_PATH, as
# NVIDIA's CUDA images expect them), and which libraries those are
DRIVER_DIR = "/usr/local/nvidia/lib64"
DRIVER_NAMES = (
    "libcuda.so",
    "libnvidia-ml.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so",
    "libcudadebugger.so",
)
WORD_SIZES = ("x86-64", "AArch64", "64bit")  # ldconfig -p: this machine's libraries
SPECIAL = stat.S_IFCHR, stat.S_IFBLK, stat.S_IFIFO, stat.S_IFSOCK


class ImageError(Exception):
    """The image cannot be read or unpacked; ``message`` says why, for the job's owner."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class ImageConfig:
    """What of an image's config a job's start uses."""

    env: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    workdir: str = ""

    def env_map(self) -> dict[str, str]:
        """Env as a mapping, PATH set (docker's default PATH when the image has none)."""
        env = dict(entry.partition("=")[::2] for entry in self.env if "=" in entry)
        env.setdefault("PATH", DEFAULT_PATH)
        return env

    def command(self, command: list[str]) -> list[str]:
        """What a job runs, as docker does: the Entrypoint, then the job's command in place
        of the image's Cmd."""
        return [*self.entrypoint, *command]

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ImageConfig:
        def strings(value: object) -> list[str]:
            return [str(v) for v in value] if isinstance(value, list) else []

        workdir = data.get("workdir") or data.get("WorkingDir") or ""
        return cls(
            env=strings(data.get("env", data.get("Env"))),
            entrypoint=strings(data.get("entrypoint", data.get("Entrypoint"))),
            cmd=strings(data.get("cmd", data.get("Cmd"))),
            workdir=str(workdir) if str(workdir).startswith("/") else "",
        )


@dataclass(frozen=True)
class Unpacked:
    """An image's tree on this node and its config."""

    root: Path  # the rootfs directory, bound at / in the sandbox
    config: ImageConfig
    size_bytes: int = 0


def layout_digest(layout: Path) -> str:
    """The manifest digest of the image tagged ``image`` in the OCI layout ``layout``."""
    try:
        index = json.loads((layout / "index.json").read_text())
        for entry in index.get("manifests") or []:
            if (entry.get("annotations") or {}).get("org.opencontainers.image.ref.name") == TAG:
                return str(entry["digest"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ImageError(f"the image's layout cannot be read: {e}") from e
    raise ImageError("the image's layout holds no image tagged 'image'")


def read_config(layout: Path, digest: str) -> ImageConfig:
    """The config of the image ``digest`` in ``layout`` (its manifest's config blob)."""
    try:
        manifest = json.loads(_blob(layout, digest).read_text())
        config = json.loads(_blob(layout, str(manifest["config"]["digest"])).read_text())
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ImageError(f"the image's config cannot be read: {e}") from e
    return ImageConfig.from_json(config.get("config") or {})


def layout_size(layout: Path) -> int:
    """The bytes of the layout's blobs (layers, config, manifest)."""
    blobs = layout / "blobs" / "sha256"
    try:
        return sum(entry.stat().st_size for entry in blobs.iterdir())
    except OSError:
        return 0


def _blob(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or not hexdigest.isalnum():
        raise ImageError(f"unexpected digest {digest!r}")
    return layout / "blobs" / "sha256" / hexdigest


def unpack_once(layout: Path, digest: str, cache: Path, umoci: str = "umoci") -> Unpacked:
    """The image ``digest`` (stored in ``layout``) unpacked in this node's ``cache``: at
    once when it is there already, else unpacked (rootless, neutralised) into a directory of
    its own and renamed into place, so that a crash or a concurrent start never shows a
    half tree. One unpack per node: starts that need it at once wait on a lock of the
    digest (``.<hex>.lock`` in the cache) and use the tree the first one made.

    On a pool the layout is the server's image store's, read by the node from the path the
    server gave: the store must be a file system every node shares at that path."""
    hexdigest = digest.removeprefix("sha256:")
    final = cache / hexdigest
    found = _unpacked(final)
    if found is not None:
        return found
    if not (layout / "index.json").exists():
        raise ImageError(
            f"the image {digest} is not in the image store at {layout.parent} as this node "
            "sees it (on a pool, GPUPOOL_IMAGES_STORE must be a file system every node "
            "mounts at the server's path)"
        )
    cache.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = os.open(cache / f".{hexdigest}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = _unpacked(final)  # made by the start this one waited for
        return found if found is not None else _unpack(layout, digest, cache, umoci)
    finally:
        os.close(lock)


def _unpacked(final: Path) -> Unpacked | None:
    """The image's tree in the cache, when it is there whole (its config written last)."""
    config_path = final / CONFIG
    if not config_path.exists():
        return None
    return Unpacked(final / ROOTFS, ImageConfig.from_json(json.loads(config_path.read_text())))


def _unpack(layout: Path, digest: str, cache: Path, umoci: str) -> Unpacked:
    """Unpack the image (``unpack_once`` holds its lock)."""
    hexdigest = digest.removeprefix("sha256:")
    final = cache / hexdigest
    config_path = final / CONFIG
    work = Path(tempfile.mkdtemp(prefix=f".{hexdigest[:12]}-", dir=cache))
    try:
        bundle = work / "bundle"
        argv = [umoci, "unpack", "--rootless", "--image", f"{layout}:{TAG}", str(bundle)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=UNPACK_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ImageError(f"umoci could not unpack the image: {e}") from e
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no message"]
            raise ImageError(f"the image cannot be unpacked: {said[0].strip(' ⨯•')}")
        config = read_config(layout, digest)
        rootfs = bundle / ROOTFS
        neutralise(rootfs)
        rootfs.chmod(0o755)
        (bundle / CONFIG).write_text(json.dumps(asdict(config)))
        try:
            os.rename(bundle, final)
        except OSError:
            if not config_path.exists():  # another start put it there first: use that one
                raise
        return Unpacked(final / ROOTFS, config)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def neutralise(rootfs: Path) -> list[str]:
    """Strip setuid and setgid bits and remove special files below ``rootfs`` (never
    following a link); the paths changed, relative to the root."""
    changed: list[str] = []
    for directory, dirs, files in os.walk(rootfs):
        for name in [*dirs, *files]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            kind = stat.S_IFMT(info.st_mode)
            if kind in SPECIAL:
                os.unlink(path)
                changed.append(os.path.relpath(path, rootfs))
            elif kind in (stat.S_IFREG, stat.S_IFDIR) and info.st_mode & (
                stat.S_ISUID | stat.S_ISGID
            ):
                os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
                changed.append(os.path.relpath(path, rootfs))
    return changed


def launched_in_image(launch: dict[str, object], env: dict[str, str]) -> list[str]:
    """The command of a gang's task in an image, from its launch plan: gpupool's rank
    launcher runs on the host's Python, which an image does not hold, so the plan's one
    process is run as it is, as the launcher runs one (its ``env`` over ``env``, its
    ``env_defaults`` where neither sets the variable; ``env`` is updated). ImageError for a
    plan the launcher alone can run: several processes on the node, or files to write."""
    processes = launch.get("processes")
    if not isinstance(processes, list) or len(processes) != 1 or launch.get("files"):
        raise ImageError(
            "its launcher starts several processes on a node (or writes files for them), "
            "which a job in an image cannot do yet: run one process per node (no launcher, "
            "or --launcher torch with one GPU per node) or leave the image out"
        )
    process = processes[0]
    env.update({str(k): str(v) for k, v in (process.get("env") or {}).items()})
    for name, value in (process.get("env_defaults") or {}).items():
        env.setdefault(str(name), str(value))
    return [str(arg) for arg in process["argv"]]


def remove(cache: Path, digest: str) -> None:
    """Forget the image's tree on this node (a later start unpacks it again)."""
    shutil.rmtree(cache / digest.removeprefix("sha256:"), ignore_errors=True)


def driver_libraries(ldconfig_output: str, names: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(soname, host path)`` of the NVIDIA driver's user-space libraries the dynamic
    linker knows (``ldconfig -p``'s output): those whose name starts with one of ``names``,
    for this machine's word size, each once."""
    found: dict[str, str] = {}
    for line in ldconfig_output.splitlines():
        soname, arrow, path = line.strip().partition(" => ")
        if not arrow or not path.startswith("/"):
            continue
        soname, _, flags = soname.partition(" (")
        if not soname.startswith(names) or not any(w in flags for w in WORD_SIZES):
            continue
        found.setdefault(soname, path)
    return sorted(found.items())


def driver_mounts(ldconfig_output: str) -> list[tuple[str, str]]:
    """``(host path, path inside)`` of each driver library ``ldconfig -p`` lists, shown in
    DRIVER_DIR under its soname."""
    return [
        (path, f"{DRIVER_DIR}/{soname}")
        for soname, path in driver_libraries(ldconfig_output, DRIVER_NAMES)
    ]


def program_files(program: str | None, ldd_output: str) -> list[str]:
    """``[program, its dynamic loader, the libraries it loads]`` from ``ldd``'s output;
    ``[]`` when it cannot be told (no program, a static one, ldd failed)."""
    if not program:
        return []
    loader, libraries = None, []
    for line in ldd_output.splitlines():
        line = line.strip()
        name, arrow, rest = line.partition(" => ")
        path = (rest if arrow else name).split(" (", 1)[0].strip()
        if not path.startswith("/"):
            continue  # linux-vdso.so.1: no file
        if not arrow and os.path.basename(path).startswith("ld-"):
            loader = path
        else:
            libraries.append(path)
    return [program, loader, *libraries] if loader else []
