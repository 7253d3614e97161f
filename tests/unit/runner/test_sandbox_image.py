"""A job in a container image: the sandbox's argv binds the image's tree as the read-only root
(never the host's system), splits only the image's directories on the way to a mount point
(so nothing is created in the shared tree), binds the driver libraries it is given for a job
with GPUs, and starts the host's setpriv with the host's loader for a job under its account.
What libraries and helper files those are is read from ldconfig's and ldd's output."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.executors.images import DRIVER_DIR, driver_mounts, program_files
from gpupool.runner.sandbox import bwrap_argv
from gpupool.runner.wire import HOST_HELPERS, ImageSpec, SandboxPolicy, SpecError, image_json

LDCONFIG = """\t5 libs found in cache `/etc/ld.so.cache'
\tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1
\tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1
\tlibcuda.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so
\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6
"""
LDD = """\tlinux-vdso.so.1 (0x00007ffd4c7f2000)
\tlibcap-ng.so.0 => /lib/x86_64-linux-gnu/libcap-ng.so.0 (0x00007f1d2a1d2000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f1d29ff1000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f1d2a203000)
"""


def image_root(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    for directory in ("bin", "etc", "usr/lib", "var/lib/apt", "run", "tmp", "proc", "srv"):
        (root / directory).mkdir(parents=True)
    (root / "etc" / "os-release").write_text("ID=test\n")
    (root / "lib").symlink_to("usr/lib")
    return root


def argv_of(
    tmp_path: Path,
    image: ImageSpec,
    account: dict[str, object] | None = None,
    **fields: object,
) -> list[str]:
    data = tmp_path / "data"
    outputs = data / "jobs" / "1" / "outputs"
    outputs.mkdir(parents=True, exist_ok=True)
    raw = {"bwrap": "/usr/bin/bwrap", "readonly": [], "hidden": [str(data)], **fields}
    policy = SandboxPolicy(raw)
    return bwrap_argv(policy, ["true"], "/srv", [str(outputs)], account, 3, 4, image=image)


def test_the_images_tree_is_the_read_only_root_and_is_only_split_toward_mount_points(
    tmp_path: Path,
) -> None:
    root = image_root(tmp_path)
    argv = argv_of(tmp_path, ImageSpec(image_json(root=str(root), workdir="", libraries=[])))
    text = " ".join(argv)
    assert f"--ro-bind {root}/etc /etc" in text and f"--ro-bind {root}/bin /bin" in text
    assert "--symlink usr/lib /lib" in text
    assert f"--ro-bind {root}/var /var" in text  # no mount point below it: whole
    assert "--ro-bind /usr /usr" not in text and f"--ro-bind {root}/usr /usr" in text
    assert f"{root}/tmp" not in text and f"{root}/proc" not in text  # the sandbox's own
    # /run holds the runner's files: made in the sandbox's root, its entries bound one by one
    assert f"--ro-bind {root}/run" not in text and "--dir /run" in text
    assert argv.index("--proc") > argv.index(f"{root}/etc")


def test_driver_libraries_and_setpriv_are_shown_by_name(tmp_path: Path) -> None:
    root = image_root(tmp_path)
    libraries = driver_mounts(LDCONFIG)
    assert libraries == [
        ("/usr/lib/x86_64-linux-gnu/libcuda.so", f"{DRIVER_DIR}/libcuda.so"),
        ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", f"{DRIVER_DIR}/libcuda.so.1"),
        ("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", f"{DRIVER_DIR}/libnvidia-ml.so.1"),
    ]
    helpers = program_files("/usr/bin/setpriv", LDD)
    assert helpers == [
        "/usr/bin/setpriv",
        "/lib64/ld-linux-x86-64.so.2",
        "/lib/x86_64-linux-gnu/libcap-ng.so.0",
        "/lib/x86_64-linux-gnu/libc.so.6",
    ]
    spec = image_json(root=str(root), workdir="/work", libraries=libraries, setpriv=helpers)
    argv = argv_of(tmp_path, ImageSpec(spec), {"uid": 1000, "gid": 1000, "groups": [1000]})
    text = " ".join(argv)
    for host, inside in libraries:
        assert f"--ro-bind {host} {inside}" in text
    assert f"--ro-bind {root}/usr/lib /usr/lib" in text  # /usr split for /usr/local/nvidia
    assert "--dir /work" in text  # a WorkingDir the image lacks is made
    start = argv.index("--") + 1
    assert argv[start : start + 4] == [
        f"{HOST_HELPERS}/ld-linux-x86-64.so.2",
        "--library-path",
        HOST_HELPERS,
        f"{HOST_HELPERS}/setpriv",
    ]
    assert "--reuid=1000" in argv


def test_without_gpus_or_an_account_nothing_of_the_host_is_shown(tmp_path: Path) -> None:
    root = image_root(tmp_path)
    argv = argv_of(tmp_path, ImageSpec(image_json(root=str(root), workdir="", libraries=[])))
    host_binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
    assert all(path.startswith(str(root)) for path in host_binds), host_binds
    assert driver_mounts("") == [] and program_files(None, LDD) == []
    assert program_files("/usr/bin/static", "\tnot a dynamic executable\n") == []
    with pytest.raises(SpecError, match="setpriv"):  # an account, and no way to switch to it
        argv_of(
            tmp_path,
            ImageSpec(image_json(root=str(root), workdir="", libraries=[])),
            {"uid": 1, "gid": 1},
        )


def test_a_dataset_mounted_inside_a_directory_of_the_image_splits_it(tmp_path: Path) -> None:
    root = image_root(tmp_path)
    version = tmp_path / "cache" / "v1"
    version.mkdir(parents=True)
    image = ImageSpec(image_json(root=str(root), workdir="", libraries=[]))
    argv = argv_of(tmp_path, image, mounts=[[str(version), "/srv/data"]])
    text = " ".join(argv)
    assert f"--ro-bind {root}/srv /srv" not in text and "--dir /srv" in text
    assert f"--ro-bind {version} /srv/data" in text
