"""What a hostile job tries against another team's job and the server, kept as data.

Each action is a few lines of Python run inside the hostile job, against ``T`` (the targets:
paths and PIDs the attacker is assumed to know). An action that raises is *blocked*; one that
returns is *allowed*, and its return value says what it got. Every later workload (multi-node
tasks, notebooks, deployments) runs this same list: ``command(targets)`` is the job.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Action:
    name: str
    code: str  # the body of a function of T; raise to be blocked


ACTIONS: tuple[Action, ...] = (
    Action("read the database", "return open(T['db'], 'rb').read(16)"),
    Action("open the database for writing", "return open(T['db'], 'r+b').name"),
    Action("read the other team's log", "return open(T['victim_log']).read(80)"),
    Action("list the other team's checkpoints", "return os.listdir(T['victim_checkpoints'])"),
    Action(
        "read the other team's checkpoint",
        "return open(os.path.join(T['victim_checkpoints'], 'model.ckpt')).read()",
    ),
    Action(
        "write into the other team's checkpoint directory",
        "return open(os.path.join(T['victim_checkpoints'], 'evil'), 'w').name",
    ),
    Action(
        "write into the other team's working directory",
        "return open(os.path.join(T['victim_workdir'], 'evil'), 'w').name",
    ),
    Action(
        "open the other team's attempt state for writing",
        "return open(T['victim_state'], 'r+').name",
    ),
    Action(
        "forge the other team's exit record",
        "tmp = T['victim_state'] + '.forged'\n"
        "open(tmp, 'w').write(json.dumps({'exit_code': 0, 'ended_at': 1.0}))\n"
        "os.replace(tmp, T['victim_state'])\n"
        "return 'forged'",
    ),
    Action("ask the other team's runner to stop", "return open(T['victim_stop'], 'w').name"),
    Action(
        "read the server's environment",
        "return open(f\"/proc/{T['server_pid']}/environ\").read(40)",
    ),
    Action("read the admin's saved CLI token", "return open(T['admin_config']).read(40)"),
    Action(
        "signal the other team's workload",
        "os.kill(T['victim_pid'], signal.SIGTERM); return 'sent'",
    ),
    Action(
        "signal the other team's runner",
        "os.kill(T['victim_runner_pid'], signal.SIGTERM); return 'sent'",
    ),
    Action("signal the server", "os.kill(T['server_pid'], signal.SIGTERM); return 'sent'"),
    Action(
        "see GPUs it was not given",
        "given = os.environ.get('CUDA_VISIBLE_DEVICES', '')\n"
        "os.environ.pop('CUDA_VISIBLE_DEVICES', None)\n"
        "nodes = [n for n in os.listdir('/dev') if n.startswith('nvidia') and n[6:].isdigit()]\n"
        "if len(nodes) > T['gpus_given']:\n"
        "    return nodes\n"
        "raise PermissionError(f'only {nodes} for {given}')",
    ),
    Action(
        "see other jobs' directories in the data directory",
        "own = os.environ['GPUPOOL_JOB_ID']\n"
        "others = [n for n in os.listdir(T['jobs_dir']) if n != own]\n"
        "if others:\n"
        "    return others\n"
        "raise PermissionError('only its own')",
    ),
    Action(
        "learn the other team's job from the node listing",
        # with the attacker's own token (its job's environment): the API shows another team's
        # job as anonymous; PermissionError only once it was seen so (else nothing was tried)
        "import urllib.request\n"
        "token = os.environ['HOSTILE_TOKEN']\n"
        "ask = urllib.request.Request(T['api'] + '/nodes', headers={'Authorization': token})\n"
        "held = [h for n in json.load(urllib.request.urlopen(ask, timeout=30))\n"
        "        for g in n['gpus'] for h in g['holders']]\n"
        "victim = (T['victim_id'], T['victim_user'])\n"
        "named = [h for h in held if h['job_id'] in victim or h['user'] in victim]\n"
        "if named:\n"
        "    return named\n"
        "if not any(h['other_team'] and h['team'] is None for h in held):\n"
        "    raise LookupError(f'the other team\\'s job is not listed at all: {held}')\n"
        "raise PermissionError('listed as another team\\'s job')",
    ),
    Action(
        "read another user's workspace",
        "return os.listdir(os.path.join(T['data_dir'], 'workspaces', T.get('victim_user', 'x')))",
    ),
    Action(
        "list other users' workspaces",
        "own = os.path.basename(os.environ.get('GPUPOOL_WORKSPACE', ''))\n"
        "where = os.path.join(T['data_dir'], 'workspaces')\n"
        "others = [n for n in os.listdir(where) if n != own] if os.path.isdir(where) else []\n"
        "if others:\n"
        "    return others\n"
        "raise PermissionError('only its own')",
    ),
    Action(
        "list the data directory",
        "names = [n for n in os.listdir(T['data_dir']) if n not in ('jobs', 'workspaces')]\n"
        "if names:\n"
        "    return names\n"
        "raise PermissionError('only the way to its own directories')",
    ),
    Action(
        "list other jobs' cgroups",
        # the host's cgroup tree names every job of the node, with its id and PIDs
        "import re\n"
        "found = []\n"
        "for top, dirs, _ in os.walk('/sys/fs/cgroup'):\n"
        "    found += [d for d in dirs if re.match(r'job-\\d+-attempt-', d)]\n"
        "    dirs[:] = dirs if top.count('/') < 8 else []\n"
        "if found:\n"
        "    return found\n"
        "raise PermissionError('no other job in its view of /sys/fs/cgroup')",
    ),
    Action(
        "call the other team's workload on its port",
        # a notebook's kernel channels, a replica's or a listening job's port: on the node's
        # loopback they answered any process of the node, past the platform's checks
        "with socket.create_connection(('127.0.0.1', T['victim_port']), timeout=5) as s:\n"
        "    return s.recv(64).decode()",
    ),
    Action(
        "take the port the other team's workload serves on",
        "s = socket.create_server(('127.0.0.1', T['victim_port']))\n"
        "with socket.create_connection(('127.0.0.1', T['victim_port']), timeout=5) as c:\n"
        "    got = c.recv(64)\n"
        "if b'team-a' in got:\n"
        "    return got.decode()\n"
        "raise PermissionError('it holds a port of its own network only')",
    ),
    Action(
        "reach a service of the node's loopback",
        # the server's own port is offered to a job (its API); any other listener of the
        # node (Ray, the node's agents, another team's port) is out of reach
        "with socket.create_connection(('127.0.0.1', T['node_port']), timeout=5) as s:\n"
        "    return 'connected'",
    ),
    Action(
        "lock the other clients out with bad tokens",
        # failed tokens count against their sender alone: the test then signs in as others
        "import urllib.error, urllib.request\n"
        "codes = []\n"
        "for i in range(40):\n"
        "    bad = {'Authorization': f'Bearer gpt_bad{i}'}\n"
        "    bad = urllib.request.Request(T['api'] + '/jobs', headers=bad)\n"
        "    try:\n"
        "        urllib.request.urlopen(bad, timeout=10)\n"
        "        codes.append(200)\n"
        "    except urllib.error.HTTPError as e:\n"
        "        codes.append(e.code)\n"
        "if 200 in codes:\n"
        "    return codes\n"
        "raise PermissionError(f'refused: {sorted(set(codes))}')",
    ),
)

PROLOGUE = """
import json, os, signal, socket, sys
T = json.loads(sys.argv[1])
results = {}
"""

EPILOGUE = """
print("HOSTILE=" + json.dumps(results), flush=True)
print("UID=" + str(os.getuid()), flush=True)
"""


def script() -> str:
    """The hostile job's program: every action, each in a function of its own."""
    parts = [PROLOGUE]
    for index, action in enumerate(ACTIONS):
        body = "\n".join("    " + line for line in action.code.splitlines())
        parts.append(
            f"def action_{index}(T):\n{body}\n"
            f"try:\n"
            f"    got = action_{index}(T)\n"
            f"    results[{action.name!r}] = 'ALLOWED: ' + repr(got)[:200]\n"
            f"except Exception as e:\n"
            f"    results[{action.name!r}] = 'blocked: ' + type(e).__name__\n"
        )
    parts.append(EPILOGUE)
    return "\n".join(parts)


def command(targets: dict[str, object]) -> list[str]:
    return [sys.executable, "-c", script(), json.dumps(targets)]


def outcomes(log: str) -> dict[str, str]:
    """The hostile job's results, from its log."""
    line = next(x for x in log.splitlines() if x.startswith("HOSTILE="))
    return json.loads(line[len("HOSTILE=") :])


def uid(log: str) -> int:
    """The account the hostile job ran as."""
    line = next(x for x in log.splitlines() if x.startswith("UID="))
    return int(line[len("UID=") :])


def allowed(found: dict[str, str]) -> dict[str, str]:
    """The actions that were not blocked (or not run at all): what a test must see empty."""
    missing = {a.name: "not run" for a in ACTIONS if a.name not in found}
    return missing | {name: got for name, got in found.items() if not got.startswith("blocked")}
