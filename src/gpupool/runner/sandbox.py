"""The job sandbox: a bubblewrap command line derived from a policy (stdlib only).

The policy is data (spec.json's ``sandbox``, written by the executor from the server's
settings); ``bwrap_argv`` turns it into the launcher's argument list, as JupyterHub's
SystemdSpawner turns its settings into a transient unit. Inside the sandbox a job has its
own mount, PID and IPC namespaces, sees the system read-only, a private ``/tmp`` and
``/dev/shm``, its own ``/proc``, only the device nodes of its GPUs, and of gpupool's data
directory only its own working, output and checkpoint directories.

How it runs, outermost first:

- ``bwrap`` with an empty environment, so nothing a user controls (``LD_PRELOAD``...) reaches
  a program that starts privileged. As root it sets the sandbox up with its privileges and
  ``setpriv`` drops them to the job's account; otherwise it makes a user namespace mapped to
  the runner's own account, and forbids further ones.
- ``/bin/sh`` reads the job's environment from a file that exists only inside the sandbox
  (never on a command line, where every user could read it in ``/proc``) and execs the
  command, so a missing or non-executable program ends with 127 or 126 as in a shell.
"""

from __future__ import annotations

import os
import stat

from gpupool.runner.paths import within
from gpupool.runner.wire import ImageSpec, SandboxPolicy, SpecError

SANDBOX_ENV_FILE = "/run/gpupool/env"
CGROUP_ROOT = "/sys/fs/cgroup"
SHIM = '. /run/gpupool/env && exec "$@"'
SETPRIV_DROP = ("--inh-caps=-all", "--bounding-set=-all", "--no-new-privs")


def makes_user_namespace(account: dict[str, object] | None) -> bool:
    """Whether the sandbox gets a user namespace of its own (the runner is not root)."""
    return account is None and os.geteuid() != 0


def bwrap_argv(
    policy: SandboxPolicy,
    command: list[str],
    cwd: str,
    job_dirs: list[str],
    account: dict[str, object] | None,
    env_fd: int,
    status_fd: int,
    block_fd: int | None = None,
    readonly_dirs: list[str] | None = None,
    cgroup_views: list[tuple[str, str]] | None = None,
    network_given: bool = False,
    image: ImageSpec | None = None,
) -> list[str]:
    """The whole command line: bwrap, its mounts, the account switch, the shim, the command.
    With ``block_fd``, bwrap makes the sandbox, reports it, and waits for a byte there
    before it starts the job (so that the runner can record it and limit it first).
    ``readonly_dirs``: directories of the job's own that it may read, not change (its model
    version's files), shown like its own directories even inside a hidden path.
    ``cgroup_views``: ``(host directory, path inside)`` of the job's own cgroup, the only
    one its ``/sys/fs/cgroup`` shows (read-only). ``network_given``: bwrap is started
    inside the workload's own network namespace already (a warm one), and makes none.
    ``image``: a container image's tree is the root, read-only (``_image_root``), and the
    host's system is not shown (the executor gives only an admin's shared paths then)."""
    own_network = policy.network.isolated and not network_given
    argv = [policy.bwrap, *_namespaces(account, own_network)]
    argv += ["--die-with-parent", "--new-session"]
    argv += _filesystem(policy, job_dirs, readonly_dirs or [], cgroup_views or [], image)
    argv += ["--perms", "0444", "--ro-bind-data", str(env_fd), SANDBOX_ENV_FILE]
    argv += ["--chdir", cwd, "--clearenv", "--json-status-fd", str(status_fd)]
    argv += ["--block-fd", str(block_fd), "--"] if block_fd is not None else ["--"]
    argv += _account_switch(policy, account, image)
    return [*argv, policy.shell, "-c", SHIM, "sh", *command]


def env_file(env: dict[str, str]) -> bytes:
    """The job's environment as ``export NAME='value'`` lines for the shim to source."""
    lines = [f"export {name}={_quote(value)}\n" for name, value in sorted(env.items())]
    return "".join(lines).encode()


def visible_paths(policy: SandboxPolicy, job_dirs: list[str]) -> list[str]:
    """Every host directory a job can see, for checking a program exists in the sandbox."""
    return [*policy.readonly, *policy.readwrite, *job_dirs]


def pid_namespace(pid: int) -> int | None:
    """The inode of the PID namespace ``pid`` lives in, or None when it cannot be read."""
    try:
        link = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
    return int(link[link.index("[") + 1 : -1]) if link.startswith("pid:[") else None


def members(namespace: int) -> list[int]:
    """Host PIDs of every process in the PID namespace ``namespace`` (its init included)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and pid_namespace(int(entry)) == namespace:
            found.append(int(entry))
    return found


def _namespaces(account: dict[str, object] | None, own_network: bool = False) -> list[str]:
    shared = ["--unshare-pid", "--unshare-ipc", "--unshare-cgroup-try"]
    if own_network:  # only its own loopback, which bwrap brings up; egress comes from pasta
        shared.append("--unshare-net")
    if makes_user_namespace(account):
        # Unprivileged: a user namespace mapping the runner's account, and no further ones.
        return ["--unshare-user", "--disable-userns", *shared]
    return shared


def _filesystem(
    policy: SandboxPolicy,
    job_dirs: list[str],
    readonly: list[str],
    cgroup_views: list[tuple[str, str]],
    image: ImageSpec | None = None,
) -> list[str]:
    tree = _Tree()
    argv = [] if image is None else _image_root(image, policy, job_dirs, readonly, tree)
    # the sandbox's own file systems first: a path shown below /tmp (a checkout there, with
    # the server's Python) must be mounted onto the private /tmp, not covered by it
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", *_shm_size(policy)]
    argv += ["--tmpfs", "/dev/shm"]
    for path in sorted(policy.readonly, key=_depth):  # a parent first, or it would cover
        argv += tree.show(path, "--ro-bind")
    for path in sorted(policy.readwrite, key=_depth):
        argv += tree.show(path, "--bind")
    inside = [p for p in job_dirs if any(within(p, h) for h in policy.hidden)]
    for path in job_dirs:  # a working directory above the hidden paths: shown, then masked
        if path not in inside:
            argv += tree.show(path, "--bind")
    for secret in policy.hidden:
        argv += tree.mask(secret)
    for path in inside:  # the job's own directories, inside the data directory
        argv += tree.show(path, "--bind")
    for path in readonly:
        argv += tree.show(path, "--ro-bind")
    for host, inside in policy.devices:
        argv += [*tree.parents(inside), "--dev-bind", host, inside]
    for host, inside, writable in policy.mounts:  # datasets read-only, volumes read-write
        argv += [*tree.parents(inside), "--bind" if writable else "--ro-bind", host, inside]
    if image is not None:  # driver libraries (a job given GPUs), setpriv, their directories
        for host, inside in [*image.libraries, *image.helper_mounts()]:
            argv += [*tree.parents(inside), "--ro-bind", host, inside]
        argv += tree.parents(SANDBOX_ENV_FILE)
        if image.workdir and not tree.exists(image.workdir):
            argv += [*tree.parents(image.workdir), "--perms", "0755", "--dir", image.workdir]
    return argv + _cgroups(tree, cgroup_views)


def shm_note(policy: SandboxPolicy) -> str | None:
    """Why the job's /dev/shm is not the size it asked for, when it is not (for its events):
    a bwrap before --size (0.8) makes it tmpfs's default, half the node's memory."""
    if policy.shm_bytes is None or policy.bwrap_size:
        return None
    return (
        f"the /dev/shm size ({policy.shm_bytes} bytes) is not enforced: this node's "
        "bubblewrap has no --size (0.8 or later has); /dev/shm is tmpfs's default size"
    )


def _shm_size(policy: SandboxPolicy) -> list[str]:
    """bwrap's ``--size`` for the /dev/shm that follows, when the job asked for one."""
    if policy.shm_bytes is None or not policy.bwrap_size:
        return []
    return ["--size", str(policy.shm_bytes)]


def image_targets(
    image: ImageSpec, policy: SandboxPolicy, job_dirs: list[str], readonly: list[str]
) -> list[str]:
    """Every path the sandbox mounts over an image's root: its own file systems, the job's
    directories, what an admin shares, devices, driver libraries, the runner's files."""
    targets = ["/proc", "/dev", "/tmp", CGROUP_ROOT, os.path.dirname(SANDBOX_ENV_FILE)]
    targets += [*policy.readonly, *policy.readwrite, *job_dirs, *readonly]
    # [1]: where each is shown (a mount is (host, inside) or (host, inside, read-write))
    targets += [shown[1] for shown in [*policy.devices, *policy.mounts, *image.libraries]]
    if image.workdir and not _is_directory(image.root, image.workdir):
        targets.append(image.workdir)  # made empty, as docker does for a missing WorkingDir
    return [os.path.normpath(t) for t in targets]


def _image_root(
    image: ImageSpec,
    policy: SandboxPolicy,
    job_dirs: list[str],
    readonly: list[str],
    tree: _Tree,
) -> list[str]:
    """The image's tree as the sandbox's root, read-only: each entry of its top directory
    bound in place, except along the way to a path the sandbox mounts later (a job's
    directory, ``/proc``...): such a directory is made in the sandbox's own root and its
    entries are bound one by one, so that nothing is ever created in the image's tree (it
    is shared by every job that uses the image) and no mount point is missing."""
    targets = image_targets(image, policy, job_dirs, readonly)
    argv: list[str] = []

    def walk(inside_dir: str) -> None:
        host_dir = os.path.join(image.root, inside_dir.lstrip("/"))
        try:
            names = sorted(os.listdir(host_dir))
        except OSError:
            return
        for name in names:
            inside, host = os.path.join(inside_dir, name), os.path.join(host_dir, name)
            if inside in targets:
                continue  # mounted later
            info = os.lstat(host)
            if any(within(t, inside) for t in targets):  # split it: a target lies below
                if stat.S_ISDIR(info.st_mode):
                    mode = f"{stat.S_IMODE(info.st_mode) & 0o1777:04o}"
                    argv.extend(["--perms", mode, "--dir", inside])
                    tree.made.add(inside)
                    walk(inside)
            elif stat.S_ISLNK(info.st_mode):
                argv.extend(["--symlink", os.readlink(host), inside])
            elif stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
                argv.extend(["--ro-bind", host, inside])
                tree.mounts[inside] = True

    walk("/")
    return argv


def _is_directory(root: str, path: str) -> bool:
    """Whether ``path`` is a directory in the image, following no link (a link's target is
    another tree's path on this host)."""
    current = root
    for part in [p for p in path.split("/") if p]:
        current = os.path.join(current, part)
        if os.path.islink(current) or not os.path.isdir(current):
            return False
    return True


def _cgroups(tree: _Tree, views: list[tuple[str, str]]) -> list[str]:
    """The host's cgroup tree names every job on the node: cover it, and show the job's own
    cgroup where a container's is (``/sys/fs/cgroup``, or per v1 controller below it)."""
    argv = [*tree.parents(CGROUP_ROOT), "--perms", "0755", "--tmpfs", CGROUP_ROOT]
    tree.mounts[CGROUP_ROOT] = False
    for host, inside in views:
        argv += [*tree.parents(inside), "--ro-bind", host, inside]
        tree.mounts[inside] = True
    return [*argv, "--remount-ro", CGROUP_ROOT]


class _Tree:
    """What the sandbox's file tree holds so far, so that every directory bwrap must create
    on the way to a mount point is made traversable: bwrap makes them 0700, which would lock
    the job's account out of what is shown below them (``/root/.pyenv/...``)."""

    FRESH = ("/tmp", "/dev", "/dev/shm", "/proc")  # empty file systems of the sandbox's own

    def __init__(self) -> None:
        self.mounts: dict[str, bool] = dict.fromkeys(self.FRESH, False)  # path -> from host
        self.made: set[str] = set()

    def show(self, path: str, how: str) -> list[str]:
        if os.path.islink(path):
            return [*self.parents(path), "--symlink", os.readlink(path), path]
        if not os.path.exists(path):
            return []
        argv = [*self.parents(path), how, path, path]
        self.mounts[path] = True
        return argv

    def mask(self, secret: str) -> list[str]:
        """Cover a hidden path with an empty directory if something shown holds it."""
        if not self._exists(secret):
            return []
        self.mounts[secret] = False
        return ["--perms", "0755", "--tmpfs", secret]

    def parents(self, path: str) -> list[str]:
        missing = []
        parent = os.path.dirname(path)
        while parent not in ("/", "") and not self._exists(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        argv: list[str] = []
        for directory in reversed(missing):
            self.made.add(directory)
            argv += ["--perms", "0755", "--dir", directory]
        return argv

    def exists(self, path: str) -> bool:
        return self._exists(path)

    def _exists(self, path: str) -> bool:
        """Whether ``path`` is in the sandbox already: made, a mount point, or inside the
        innermost mount holding it when that mount shows a host tree."""
        if path in self.made or path in self.mounts:
            return True
        holders = [m for m in self.mounts if within(path, m)]
        return bool(holders) and self.mounts[max(holders, key=len)]


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


def _account_switch(
    policy: SandboxPolicy, account: dict[str, object] | None, image: ImageSpec | None = None
) -> list[str]:
    if account is None:
        return []
    if image is not None:  # the host's setpriv, by the host's loader, from HOST_HELPERS
        groups = ",".join(str(g) for g in account.get("groups") or [account["gid"]])
        ids = [f"--reuid={account['uid']}", f"--regid={account['gid']}", f"--groups={groups}"]
        return [*image.setpriv_argv(), *ids, *SETPRIV_DROP, "--"]
    if policy.setpriv is None:
        raise SpecError("sandbox.setpriv is needed to run a job under another account")
    groups = ",".join(str(g) for g in account.get("groups") or [account["gid"]])
    ids = [f"--reuid={account['uid']}", f"--regid={account['gid']}", f"--groups={groups}"]
    return [policy.setpriv, *ids, *SETPRIV_DROP, "--"]


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"
