"""What the runner does so that a job stays its team's own (stdlib only).

The job's directories belong to its Unix account; its working directory must be readable by
that account (checked as the account, in a forked child, not as the runner) and may not lie
in or above gpupool's data directory; its environment says who and where it is; its
program must be one the sandbox shows; its CPU, memory and GPU memory are held to what it
asked for. Each function returns a problem as ``(exit code, message)`` or None.
"""

from __future__ import annotations

import os

from gpupool.runner import sandbox
from gpupool.runner.layout import CODE_NOT_EXECUTABLE, CODE_NOT_FOUND, CODE_RUNNER_ERROR
from gpupool.runner.paths import conflict, within
from gpupool.runner.wire import RunnerSpec

Problem = tuple[int, str]
SANDBOX_TMP = "/tmp"
MPS_CONTROL = "control"


def prepare_dirs(spec: RunnerSpec) -> Problem | None:
    """Create the job's output and checkpoint directories, owned by its account; give it
    its unpacked code too (the executor made it, as the server's account)."""
    own = [spec.checkpoint_dir, spec.output_dir]
    own += [d for d in (spec.code_dir, spec.workspace) if d]
    for directory in own:
        try:
            os.makedirs(directory, exist_ok=True)
            if spec.account is not None and os.geteuid() == 0:
                _own(directory, int(spec.account["uid"]), int(spec.account["gid"]))
        except OSError as e:
            return CODE_RUNNER_ERROR, f"cannot prepare {directory}: {e.strerror or e}"
    if spec.sandbox is not None and spec.account is None and os.geteuid() == 0:
        return CODE_RUNNER_ERROR, "a job never runs as root, and this spec names no account"
    return None


def check_workdir(spec: RunnerSpec) -> Problem | None:
    """The working directory exists, is the job's to use, and its account may read it."""
    workdir = spec.workdir
    if workdir is None:
        return None
    if not os.path.isabs(workdir):
        return CODE_NOT_FOUND, f"working directory {workdir} is not an absolute path"
    if not os.path.isdir(workdir):
        return CODE_NOT_FOUND, f"working directory {workdir} does not exist"
    secret = conflict(os.path.realpath(workdir), spec.protected, spec.sandbox is None)
    if secret is not None:
        return CODE_NOT_EXECUTABLE, (
            f"working directory {workdir} is in or above gpupool's own files ({secret}); "
            "choose a directory of your own"
        )
    if spec.account is not None and not readable_as(workdir, spec.account):
        name = spec.account.get("name") or spec.account["uid"]
        return CODE_NOT_EXECUTABLE, (
            f"working directory {workdir} is not readable by the Unix account {name} that "
            "the job runs as: let that account read it, or choose another directory"
        )
    return None


def workload_env(spec: RunnerSpec) -> dict[str, str]:
    """The job's environment: the spec's, plus who it runs as and the MPS limits."""
    env = spec.workload_env()
    if spec.account is not None:
        name = str(spec.account.get("name") or spec.account["uid"])
        env["USER"] = env["LOGNAME"] = name
    if spec.account is not None or spec.sandbox is not None:
        env["HOME"] = env["TMPDIR"] = SANDBOX_TMP  # private to the sandbox; the host's is not
    env.update(mps_env(spec))
    return env


def mps_dir(spec: RunnerSpec) -> str | None:
    """The MPS control daemon's pipe directory when one runs, else None."""
    directory = spec.mps_pipe_dir
    if directory and os.path.exists(os.path.join(directory, MPS_CONTROL)):
        return directory
    return None


def mps_env(spec: RunnerSpec) -> dict[str, str]:
    """MPS client settings: its pipe directory; for a fraction, its SMs and pinned memory."""
    directory = mps_dir(spec)
    if directory is None or not spec.gpu_uuids:
        return {}
    env = {"CUDA_MPS_PIPE_DIRECTORY": directory}
    shares = [spec.gpu_shares.get(uuid, 1.0) for uuid in spec.gpu_uuids]
    if min(shares) < 1:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, round(min(shares) * 100)))
    limits = (spec.gpu_memory or {}).get("limits") or {}
    pinned = [f"{i}={limits[u] // 2**20}M" for i, u in enumerate(spec.gpu_uuids) if u in limits]
    if pinned:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(pinned)
    return env


def missing_program(spec: RunnerSpec, env: dict[str, str]) -> Problem | None:
    """127 or 126 when the command cannot run, as a shell would say, before a sandbox is
    made; also 127 when its program lies outside what the sandbox shows."""
    if spec.sandbox is None:
        return None  # exec() tells
    if spec.image is not None:
        return None  # looked for in the image, by the sandbox's shell (127 or 126 too)
    name = spec.command[0]
    found = which(name, env.get("PATH", os.defpath), spec.cwd())
    if found is None:
        return CODE_NOT_FOUND, f"command not found: {name}"
    if not _executable(found):
        return CODE_NOT_EXECUTABLE, f"command is not executable: {name} (permission denied)"
    paths = sandbox.visible_paths(spec.sandbox, spec.job_dirs()) + spec.readonly_dirs()
    visible = [os.path.realpath(p) for p in paths]
    if not any(within(os.path.realpath(found), p) for p in visible):
        return CODE_NOT_FOUND, (
            f"command {name} ({found}) is not in the job's sandbox, which shows the system, "
            "the job's directories and the paths an admin shares (GPUPOOL_SANDBOX_READONLY_"
            "PATHS): install it there, or put it in the job's working directory"
        )
    return None


def sandbox_argv(
    spec: RunnerSpec,
    env_fd: int,
    status_fd: int,
    block_fd: int,
    cgroup=None,  # noqa: ANN001
    network_given: bool = False,
) -> list[str]:
    cwd = spec.cwd()
    if spec.image is not None and not (spec.workdir or spec.code_dir or spec.workspace):
        cwd = spec.image.workdir or "/"  # the image's WorkingDir, as docker starts there
    shared = mps_dir(spec)
    dirs = spec.job_dirs() + ([shared] if shared else [])
    shown = spec.readonly_dirs()
    return sandbox.bwrap_argv(
        spec.sandbox,
        spec.command,
        cwd,
        dirs,
        spec.account,
        env_fd,
        status_fd,
        block_fd,
        shown,
        cgroup.views() if cgroup is not None else [],
        network_given,
        spec.image,
    )


def preexec(cgroup, account: dict[str, object] | None):  # noqa: ANN001, ANN201
    """What the child does between fork and exec: join the cgroup, then become the account
    (in that order: once it is the account it may no longer move itself)."""
    if cgroup is None and account is None:
        return None

    def setup() -> None:
        if cgroup is not None:
            cgroup.join()
        if account is not None:
            become(account)

    return setup


def become(account: dict[str, object]) -> None:
    uid, gid = int(account["uid"]), int(account["gid"])
    os.setgroups([int(g) for g in account.get("groups") or [gid]])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def readable_as(path: str, account: dict[str, object]) -> bool:
    """Whether ``account`` may open and enter ``path``: asked as that account, in a child."""
    if os.geteuid() != 0:
        return os.access(path, os.R_OK | os.X_OK)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            become(account)
            os.close(os.open(path, os.O_RDONLY | os.O_DIRECTORY))
            code = 0 if os.access(path, os.X_OK) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def gpu_memory_watch(config: dict[str, object]):  # noqa: ANN201 - (watch or None, why not)
    from gpupool.runner import gpumemory  # only fractional jobs pay for it

    try:
        source = gpumemory.sampler(str(config["sampler"]))
    except gpumemory.SamplerError as e:
        return None, str(e)
    grace = float(config.get("grace_seconds") or 5.0)
    return gpumemory.GpuMemoryWatch(dict(config["limits"]), source, grace), ""


def memory_excess(cgroup, limit: int | None) -> dict[str, object] | None:  # noqa: ANN001
    """The record of a job the kernel killed for going over its memory limit, or None."""
    if cgroup.oom_kills() == 0:
        return None
    peak = cgroup.peak_memory()
    message = (
        f"ran out of its {_mib(limit)} of host memory"
        + (f" (peak {_mib(peak)})" if peak else "")
        + " and was killed by the kernel; ask for more with --memory"
    )
    return {
        "reason": "MemoryExceeded",
        "limit_bytes": limit,
        "peak_bytes": peak,
        "message": message,
    }


def which(name: str, path: str, cwd: str) -> str | None:
    """Where ``name`` would be executed from, as a shell finds it, or None. A path with a
    slash is returned when it exists, executable or not (the caller tells which)."""
    if "/" in name:
        candidate = name if os.path.isabs(name) else os.path.join(cwd, name)
        return candidate if os.path.exists(candidate) else None
    for directory in path.split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isabs(candidate) and _executable(candidate):
            return candidate
    return None


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _own(directory: str, uid: int, gid: int) -> None:
    """Give the directory (and, when its owner changed, what it holds) to the account."""
    st = os.lstat(directory)
    if (st.st_uid, st.st_gid) != (uid, gid):
        for root, dirs, files in os.walk(directory):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), uid, gid)
        os.lchown(directory, uid, gid)
    os.chmod(directory, 0o700)


def _mib(value: int | None) -> str:
    if value is None:
        return "unknown"
    return f"{value / 2**20:,.0f} MiB"
