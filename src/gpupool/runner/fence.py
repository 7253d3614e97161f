"""The node's fence around the tasks of gangs over several nodes (stdlib only).

Such a task keeps the node's network (NCCL and RDMA need it), so no namespace walls it off.
What can be fenced is fenced with one nftables table of gpupool's per node (``inet
gpupool_fence_<digest of the node's fence directory>``, so that several nodes of a pool on
one machine keep their own), rebuilt whole and replaced in one transaction (``nft -f``) by
the runner of each such task, at its start and at its end:

- a socket owned by any account but the platform's (``platform_uids``: root and the
  server's) is refused, with a TCP reset, the platform's TCP listeners on this node: those
  that the platform's accounts hold in the node's Ray processes (``platform_pids``, the
  ``ray start`` of the node and what it started: GCS on the head, raylet, object manager,
  dashboard and agents, metrics, workers, the node agent among them) when the table is
  rebuilt, and Ray's worker port range; without ``platform_pids``, every listener of those
  accounts. The server's API port stays open (jobs use ``gpupool`` inside; the sign-in
  throttle makes bad tokens harmless); other gangs' MPI agents are jobs' own listeners,
  fenced as rendezvous:
- each gang's rendezvous ports on this node (torch's store, the MPI agent's port) accept
  local connections from the gang owner's account only (``meta skuid``), and connections
  from other machines from the gang's nodes' addresses only (``ip saddr``).

Each runner keeps its gang's part in a record of the node's fence directory (a directory of
the platform's, under the data directory); the record of a runner that is gone (killed with
-9) is dropped at the next rebuild. Not root, or no ``nft``: the task runs, and its notes
(its events) say that the fence is not enforced.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import subprocess

from gpupool.runner.layout import atomic_write_json, process_create_time, read_json
from gpupool.runner.wire import (
    FENCE_TABLE_PREFIX,
    FencePolicy,
    SpecError,
    ip_list,
    port_list,
    uid_list,
)

NOT_ENFORCED = "the node's network fence is not enforced"  # how its notes begin
LOCK_FILE = ".lock"
REJECT = "reject with tcp reset"
NFT_SECONDS = 10.0  # how long nft may take to replace the table
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's "st" column


class Fence:
    """One gang task's part of the node's fence: ``apply`` before the task runs, ``close``
    when it has ended. ``notes``: why the fence is not enforced, for the task's events."""

    def __init__(self, policy: FencePolicy, name: str, owner_uid: int | None) -> None:
        self.policy = policy
        self.record = os.path.join(policy.dir, f"{name}.json")
        self.owner_uid = owner_uid
        self.applied = False
        self.notes: list[str] = []

    def apply(self) -> None:
        problem = self._problem()
        if problem is not None:
            self.notes.append(f"{NOT_ENFORCED}: {problem}")
            return
        try:
            os.makedirs(self.policy.dir, mode=0o700, exist_ok=True)
            atomic_write_json(self.record, self._gang())
            self.applied = True
            failure = update(self.policy)
        except OSError as e:
            failure = f"cannot keep its rules in {self.policy.dir}: {e}"
        if failure is not None:
            self.notes.append(f"{NOT_ENFORCED}: {failure}")

    def close(self) -> None:
        """Take the gang's rules out of the node's table (the table goes with the last)."""
        if not self.applied:
            return
        self.applied = False
        with contextlib.suppress(OSError):
            os.unlink(self.record)
        with contextlib.suppress(OSError):
            update(self.policy)

    def _problem(self) -> str | None:
        if os.geteuid() != 0:
            return "the runner is not root (nftables rules need it)"
        if self.policy.nft is None:
            return "nftables (nft) is not installed on the node"
        if self.owner_uid is None or self.owner_uid in self.policy.platform_uids:
            return "the job runs under the platform's own account"
        return None

    def _gang(self) -> dict[str, object]:
        return {
            "runner_pid": os.getpid(),
            "runner_create_time": process_create_time(),
            "uid": self.owner_uid,
            "rendezvous": self.policy.rendezvous,
            "peers": self.policy.peers,
        }


def update(policy: FencePolicy) -> str | None:
    """Rebuild the node's table from the live gangs' records and the listeners now; None
    once nft took it, else why not. Serialised by a lock in the fence directory."""
    lock = os.open(os.path.join(policy.dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        gangs = live_gangs(policy.dir)
        if not gangs:
            return _nft(policy, drop(policy.table))
        gang_ports = {port for gang in gangs for port in gang["rendezvous"]}
        held = platform_listeners(policy)
        platform = sorted(held - set(policy.open_ports) - gang_ports)
        return _nft(policy, render(policy, platform, gangs))
    finally:
        os.close(lock)


def live_gangs(directory: str) -> list[dict[str, object]]:
    """The gangs' records in ``directory`` whose runner still runs; the others are removed
    (a runner killed with -9 could not take its rules out)."""
    found = []
    for entry in sorted(os.listdir(directory)):
        if not entry.endswith(".json") or entry.startswith("."):
            continue
        path = os.path.join(directory, entry)
        gang = read_json(path)
        if gang is not None and _runner_alive(gang) and _well_formed(gang):
            found.append(gang)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
    return found


def platform_listeners(policy: FencePolicy) -> set[int]:
    """The ports the platform listens on now: its accounts' listeners, in its processes
    where the policy names them."""
    sockets = _sockets(_tree(policy.platform_pids)) if policy.platform_pids else None
    return listeners(_tcp_tables(policy.netns), set(policy.platform_uids), sockets)


def listeners(tables: list[str], uids: set[int], sockets: set[int] | None = None) -> set[int]:
    """The TCP ports listened on by sockets of ``uids`` (and among ``sockets``, inodes,
    where given), from /proc/net/tcp and tcp6."""
    ports = set()
    for table in tables:
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != LISTEN or int(fields[7]) not in uids:
                continue
            if sockets is None or int(fields[9]) in sockets:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def render(policy: FencePolicy, platform: list[int], gangs: list[dict[str, object]]) -> str:
    """The node's table as an ``nft -f`` script that replaces it in one transaction."""
    local = "fib daddr type local tcp dport"
    output, inbound = [], []
    for gang in gangs:
        ports = _set(gang["rendezvous"])  # type: ignore[arg-type]
        if ports:
            output.append(f"{local} {ports} meta skuid != {gang['uid']} {REJECT}")
            inbound += _from_elsewhere(ports, gang["peers"])  # type: ignore[arg-type]
    if policy.open_ports:
        output.append(f"{local} {_set(policy.open_ports)} accept")
    closed = _set([*platform, *policy.closed_ranges])
    if closed:
        output.append(f"{local} {closed} meta skuid != {_set(policy.platform_uids)} {REJECT}")
    return "\n".join(
        [
            *drop(policy.table).splitlines(),
            f"table inet {policy.table} {{",
            *_chain("output", output),
            *_chain("input", inbound),
            "}",
            "",
        ]
    )


def drop(table: str) -> str:
    """A script that removes the table, whether it exists or not."""
    return f"table inet {table}\ndelete table inet {table}\n"


def table_name(fence_dir: str) -> str:
    """The table of the node whose fence directory is ``fence_dir``."""
    import hashlib

    digest = hashlib.sha256(os.path.realpath(fence_dir).encode()).hexdigest()[:10]
    return f"{FENCE_TABLE_PREFIX}_{digest}"


def _from_elsewhere(ports: str, peers: list[str]) -> list[str]:
    """Connections from other machines to a gang's ports: only its nodes' addresses."""
    rules = []
    for family, everyone in (("ip", "0.0.0.0/0"), ("ip6", "::/0")):
        version = 4 if family == "ip" else 6
        mine = [p for p in peers if ipaddress.ip_address(p).version == version]
        match = f"saddr != {_set(mine)}" if mine else f"saddr {everyone}"
        rules.append(f"meta iiftype != loopback {family} {match} tcp dport {ports} {REJECT}")
    return rules


def _chain(hook: str, rules: list[str]) -> list[str]:
    head = f"    type filter hook {hook} priority 0; policy accept;"
    return [f"  chain {hook} {{", head, *(f"    {rule}" for rule in rules), "  }"]


def _set(items: list[object]) -> str:
    """``{ 1, 2-5 }`` (ports, ranges, uids or addresses); empty: ``""``."""
    shown = [f"{i[0]}-{i[1]}" if isinstance(i, tuple | list) else str(i) for i in items]
    return "{ " + ", ".join(shown) + " }" if shown else ""


def _nft(policy: FencePolicy, script: str) -> str | None:
    assert policy.nft is not None
    argv = [policy.nft, "-f", "-"]
    if policy.netns is not None:
        argv = ["nsenter", f"--net={policy.netns}", *argv]
    try:
        done = subprocess.run(
            argv, input=script.encode(), capture_output=True, timeout=NFT_SECONDS, env={}
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run nft: {e}"
    if done.returncode == 0:
        return None
    said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
    return f"nft refused the rules: {said[0] if said else f'exit {done.returncode}'}"


def _tcp_tables(netns: str | None) -> list[str]:
    """/proc/net/tcp and tcp6 of the namespace fenced (the runner's own by default)."""
    base = "/proc/self/net" if netns is None else netns[: -len("/ns/net")] + "/net"
    return [f"{base}/tcp", f"{base}/tcp6"]


def _tree(roots: list[int]) -> set[int]:
    """``roots`` and their descendants, from each process's parent in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def _sockets(pids: set[int]) -> set[int]:
    """The inodes of the sockets that ``pids`` hold."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(int(target[8:-1]))
    return inodes


def _runner_alive(gang: dict[str, object]) -> bool:
    pid, created = gang.get("runner_pid"), gang.get("runner_create_time")
    if not isinstance(pid, int):
        return False
    now = process_create_time(pid)
    return now is not None and isinstance(created, int | float) and abs(now - created) < 1.0


def _well_formed(gang: dict[str, object]) -> bool:
    try:
        uid_list([gang.get("uid")])
        port_list(gang, "rendezvous")
        ip_list(gang.get("peers"))
    except SpecError:
        return False
    return True
