"""A small synchronous client; errors become ``ApiError`` with the server's code.

A server that does not answer is ``ApiError`` too, with status 0 and the code
``server_unreachable`` (or ``server_timeout``): the one place that says how to fix it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

from gpupool.client.transport import Response, Transport, TransportError, Upload
from gpupool.domain.code import CodeLimits

API = "/api/v1"
FINAL = {"succeeded", "failed", "cancelled", "lost"}
RESOLVE_WAIT = 600.0  # seconds an environment's resolve may take on the server


class ApiError(Exception):
    """The server refused a request; ``code`` is stable, ``message`` says what to do."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message, self.details = status, code, message, details or {}


@dataclass(frozen=True)
class LogPart:
    """Text of one attempt's log; a part with a ``note`` (and no text) announces the start of
    a later attempt's log, e.g. "attempt 2 started (requeued after preemption)"."""

    attempt: int | None
    text: str
    note: str | None = None


@dataclass
class ClientConfig:
    url: str
    token: str


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(os.environ.get("GPUPOOL_CONFIG", Path(base) / "gpupool" / "config.json"))


def load_config() -> ClientConfig | None:
    """The URL and token from GPUPOOL_URL/GPUPOOL_TOKEN, else from the config file."""
    url, token = os.environ.get("GPUPOOL_URL"), os.environ.get("GPUPOOL_TOKEN")
    if url and token:
        return ClientConfig(url, token)
    path = config_path()
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return ClientConfig(data["url"], data["token"])


def save_config(config: ClientConfig) -> Path:
    """Write the config readable by its owner only (mode 0600)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"url": config.url, "token": config.token}, handle)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)
    return path


class Client:
    """One method per API operation; returns the decoded JSON."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        try:
            self.http = Transport(self.url, API, headers, timeout)
        except ValueError as error:
            message = f"{error}: give the server as http://HOST:PORT"
            raise ApiError(0, "invalid_url", message) from None

    @classmethod
    def from_config(cls, config: ClientConfig) -> Client:
        return cls(config.url, config.token)

    def close(self) -> None:
        self.http.close()

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, spec: dict[str, Any], array: str | dict[str, Any] | None = None) -> Any:
        """Queue a job; with ``array`` (sbatch --array form, "0-999%50", or a body such as
        {"indexes": [1, 3], "max_running": 2}), a job array: the array comes back."""
        if array is not None:
            spec = spec | {"array": {"indexes": array} if isinstance(array, str) else array}
        return self._call("POST", "/jobs", json=spec)

    def apply(
        self, documents: list[dict[str, Any]], dry_run: bool = False, ignore_image: bool = False
    ) -> dict[str, Any]:
        """Make the documents of a job file (a Job, an Environment, a Dataset, a Volume, a
        Kubeflow manifest ...) in one transaction, all or none; ``dry_run``: check them and
        make nothing; ``ignore_image``: a Kubeflow manifest's jobs run on the nodes' own
        system, whatever image it names. What each made comes back."""
        body: dict[str, Any] = {"documents": documents, "dry_run": dry_run}
        if ignore_image:
            body["ignore_image"] = True
        return self._call("POST", "/apply", json=body)

    def schemas(self, kind: str | None = None) -> Any:
        """The kinds a job file may hold; with ``kind``, the JSON schema of its document."""
        return self._call("GET", f"/schemas/{kind or ''}")

    def arrays(self, **filters: Any) -> list[dict[str, Any]]:
        """Job arrays, each with its tasks counted by status (filters as ``jobs``)."""
        params = {k: v for k, v in filters.items() if v not in (None, [], ())}
        return self._call("GET", "/jobs/arrays", params=params)

    def array(self, array_id: int) -> dict[str, Any]:
        return self._call("GET", f"/jobs/arrays/{array_id}")

    def array_task(self, array_id: int, index: int) -> dict[str, Any]:
        """The task of ``index`` of an array (``ID_INDEX``), as a job."""
        return self._call("GET", f"/jobs/arrays/{array_id}/tasks/{index}")

    def cancel_array(self, array_id: int) -> dict[str, Any]:
        """Cancel every task of the array not ended."""
        return self._call("POST", f"/jobs/arrays/{array_id}/cancel")

    def jobs(self, **filters: Any) -> list[dict[str, Any]]:
        params = {k: v for k, v in filters.items() if v not in (None, [], ())}
        return self._call("GET", "/jobs", params=params)

    def job(self, job_id: int) -> dict[str, Any]:
        return self._call("GET", f"/jobs/{job_id}")

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self._call("POST", f"/jobs/{job_id}/cancel")

    def hold(self, job_id: int) -> dict[str, Any]:
        """Hold a pending job: it never starts until released."""
        return self._call("POST", f"/jobs/{job_id}/hold")

    def release(self, job_id: int) -> dict[str, Any]:
        """Release a held job back to the queue."""
        return self._call("POST", f"/jobs/{job_id}/release")

    def why(self, job_id: int) -> dict[str, Any]:
        """Why the job waits: reason code, message, position, blockers, estimated start."""
        return self._call("GET", f"/jobs/{job_id}/why")

    def queue(self) -> dict[str, Any]:
        """Pending jobs by team, in queue order, with estimated start times."""
        return self._call("GET", "/jobs/queue")

    def events(self, job_id: int, after: int = 0) -> list[dict[str, Any]]:
        return self._call("GET", f"/jobs/{job_id}/events", params={"after": after})

    def logs(
        self, job_id: int, offset: int = 0, attempt: int | None = None, **lines: int | None
    ) -> dict[str, Any]:
        """One attempt's log (default: the latest) from ``offset``; see ``follow_logs``.
        ``rank=N`` or ``task=N``: only that rank's (task's) whole lines, without their
        prefix; ``next_offset`` may then move on with no text."""
        params = {"offset": offset} | ({"attempt": attempt} if attempt else {})
        params |= {name: value for name, value in lines.items() if value is not None}
        return self._call("GET", f"/jobs/{job_id}/logs", params=params)

    def follow_logs(
        self,
        job_id: int,
        poll: float = 0.25,
        attempt: int = 1,
        follow: bool = True,
        **lines: int | None,
    ) -> Iterator[LogPart]:
        """Every byte of the log, attempt after attempt from ``attempt``: each attempt's log
        is read to its end, then the next one's from its start, announced by a part with its
        ``note`` and no text. With ``follow``, it waits for more until the job has ended and
        its last log is read; without, it stops at the end of what is written so far.
        ``rank=N`` or ``task=N``: only those lines (see ``logs``)."""
        offset, announce = 0, False
        while True:
            chunk = self.logs(job_id, offset, attempt, **lines)
            if announce:
                yield LogPart(chunk["attempt"], "", chunk.get("note"))
                announce = False
            if chunk["next_offset"] != chunk["offset"]:  # read on, even past lines left out
                if chunk["text"]:
                    yield LogPart(chunk["attempt"], chunk["text"])
                offset = chunk["next_offset"]
            elif chunk.get("next_attempt"):
                attempt, offset, announce = chunk["next_attempt"], 0, True
            elif chunk["complete"] or not follow:
                return
            else:
                time.sleep(poll)

    def metrics(
        self, job_id: int, names: list[str] | None = None, after: int = 0, **filters: Any
    ) -> dict[str, Any]:
        """The job's metric series kept after the cursor ``after`` (``attempt``, ``limit``)."""
        params = {"after": after, "names": names or None} | filters
        return self._call("GET", f"/jobs/{job_id}/metrics", params=params)

    def all_metrics(self, job_id: int, names: list[str] | None = None) -> list[dict[str, Any]]:
        """Every series of the job, in as many answers as it takes (parts joined)."""
        series: dict[tuple[int, str], dict[str, Any]] = {}
        after, more = 0, True
        while more:
            answer = self.metrics(job_id, names, after)
            for part in answer["series"]:
                key = (part["attempt"], part["name"])
                whole = series.setdefault(key, {**part, "steps": [], "times": [], "values": []})
                for column in ("steps", "times", "values"):
                    whole[column] += part[column]
            after, more = answer["cursor"], answer["more"]
        return [series[key] for key in sorted(series)]

    def metrics_summary(self, job_id: int, names: list[str] | None = None) -> list[dict[str, Any]]:
        """Each metric of the job: its last value, min, max and points."""
        params = {"names": names or None}
        return self._call("GET", f"/jobs/{job_id}/metrics/summary", params=params)

    def wait(self, job_id: int, poll: float = 0.25, timeout: float | None = None) -> dict[str, Any]:
        """Poll until the job has ended; return it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["status"] in FINAL:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['status']} after {timeout} s")
            time.sleep(poll)

    # -- code snapshots ----------------------------------------------------------------------

    def code_limits(self) -> CodeLimits:
        """What the server takes of one code snapshot (checked before an upload)."""
        found = self._call("GET", "/code")
        return CodeLimits(found["max_bytes"], found["max_unpacked_bytes"], found["max_entries"])

    def code(self, ref: str) -> dict[str, Any]:
        """A snapshot the caller stored (``sha256:<hex>``); ApiError code_not_found if none."""
        return self._call("GET", f"/code/{ref}")

    def upload_code(self, ref: str, archive: BinaryIO, size: int) -> dict[str, Any]:
        """Store ``size`` bytes of ``archive`` (a .tar.gz) as ``ref``, which the server checks
        against their SHA-256; storing it again is harmless (PUT is idempotent)."""
        body = Upload(archive, size, "application/gzip")
        return self._call("PUT", f"/code/{ref}", upload=body)

    # -- pool --------------------------------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        return self._call("GET", "/nodes")

    def node(self, name: str) -> dict[str, Any]:
        """One node, with its latest changes (``events``)."""
        return self._call("GET", _node_path(name))

    def drain_node(self, name: str, reason: str | None = None) -> dict[str, Any]:
        """Keep new work off a node (admins); what runs there goes on to its end."""
        body = {"reason": reason} if reason is not None else None
        return self._call("POST", _node_path(name, "drain"), json=body)

    def undrain_node(self, name: str) -> dict[str, Any]:
        """Let new work on a drained node again (admins)."""
        return self._call("POST", _node_path(name, "undrain"))

    def remove_node(self, name: str) -> dict[str, Any]:
        """Take a node out of the pool (admins); ApiError node_busy while jobs hold it."""
        return self._call("DELETE", _node_path(name))

    def whoami(self) -> dict[str, Any]:
        return self._call("GET", "/whoami")

    def change_password(self, current: str | None, new: str) -> dict[str, Any]:
        """Change the caller's own password (``current`` None: it has none yet); returns
        who the caller is, as ``whoami``."""
        return self._call("POST", "/whoami/password", json={"current": current, "new": new})

    def isolation(self) -> dict[str, Any] | None:
        """How jobs are kept apart: mode (sandbox, off, unavailable), identity, message."""
        return self._call("GET", "/isolation")

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    # -- the pool ----------------------------------------------------------------------------

    def cluster(self) -> dict[str, Any]:
        """One machine or a Ray pool, and whether its head answers (admins: how to join)."""
        return self._call("GET", "/cluster")

    def join(self, token: str, name: str | None = None) -> dict[str, Any]:
        """For the pool's join token: the Ray head and secret; with ``name``, whether that
        node is up and schedulable yet. Needs no API token."""
        body = {"token": token} | ({"name": name} if name is not None else {})
        return self._call("POST", "/cluster/join", json=body)

    # -- admin -------------------------------------------------------------------------------

    def teams(self) -> list[dict[str, Any]]:
        return self._call("GET", "/teams")

    def team_history(self, hours: float = 24.0, buckets: int = 48) -> dict[str, Any]:
        """Each team's GPUs held, wanted and its fair share over the last ``hours``."""
        return self._call("GET", "/teams/history", params={"hours": hours, "buckets": buckets})

    def create_team(
        self,
        name: str,
        guarantee: dict[str, float] | None = None,
        limit: float | None = None,
        weight: float | None = None,
        storage: int | None = None,
    ) -> dict[str, Any]:
        """A new team; the quota fields left out take the server's defaults (none, 1);
        ``storage``: the most bytes its files may take."""
        quota = {"guarantee": guarantee, "limit": limit, "weight": weight, "storage": storage}
        body = {"name": name} | {k: v for k, v in quota.items() if v is not None}
        return self._call("POST", "/teams", json=body)

    def set_quota(
        self,
        name: str,
        guarantee: dict[str, float] | None = None,
        limit: float | None = None,
        weight: float = 1.0,
        storage: int | None = None,
    ) -> dict[str, Any]:
        """Replace a team's quota; ``limit`` None: no limit; ``storage`` (the most bytes its
        files may take) None: no storage quota."""
        body = {"guarantee": guarantee or {}, "limit": limit, "weight": weight}
        body["storage"] = storage
        return self._call("PUT", f"/teams/{quote(name, safe='')}/quota", json=body)

    def users(self) -> list[dict[str, Any]]:
        return self._call("GET", "/users")

    def create_user(
        self,
        name: str,
        role: str,
        teams: list[str],
        password: str | None = None,
        weight: float | None = None,
        unix_user: str | None = None,
    ) -> dict[str, Any]:
        """A new user; ``weight`` None: the server's default (1); ``unix_user``: the Unix
        account its jobs run under when the server is root (None: the server's default)."""
        body: dict[str, Any] = {"name": name, "role": role, "teams": teams, "password": password}
        optional = {"weight": weight, "unix_user": unix_user}  # left out: the server's default
        body |= {key: value for key, value in optional.items() if value is not None}
        return self._call("POST", "/users", json=body)

    def update_user(self, name: str, **changes: Any) -> dict[str, Any]:
        return self._call("PATCH", f"/users/{quote(name, safe='')}", json=changes)

    def add_member(self, team: str, user: str, admin: bool | None = None) -> dict[str, Any]:
        """Make ``user`` a member of ``team``; ``admin``: a team admin of it, or not (None:
        as it was). Returns the user (with its teams and the teams it is an admin of)."""
        body = None if admin is None else {"admin": admin}
        return self._call("PUT", _member_path(team, user), json=body)

    def remove_member(self, team: str, user: str) -> dict[str, Any]:
        """End ``user``'s membership of ``team``; returns the user (with its teams)."""
        return self._call("DELETE", _member_path(team, user))

    def delete_team(self, name: str) -> dict[str, Any]:
        """Delete a team without pending or running jobs; its finished jobs keep their
        records. Returns what was deleted: its name and how many finished jobs it had."""
        return self._call("DELETE", f"/teams/{quote(name, safe='')}")

    def tokens(self) -> list[dict[str, Any]]:
        return self._call("GET", "/tokens")

    def create_token(
        self, name: str, user: str | None = None, expires_in_days: float | None = None
    ) -> dict[str, Any]:
        body = {"name": name, "user": user, "expires_in_days": expires_in_days}
        return self._call("POST", "/tokens", json={k: v for k, v in body.items() if v is not None})

    def revoke_token(self, token_id: int) -> dict[str, Any]:
        return self._call("DELETE", f"/tokens/{token_id}")

    # -- models ------------------------------------------------------------------------------

    def models(self, team: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/models", params={"team": team})

    def model(self, name: str, team: str | None = None) -> dict[str, Any]:
        """The model with its versions, newest first."""
        return self._call("GET", _model_path(name), params={"team": team})

    def model_version(self, name: str, version: int, team: str | None = None) -> dict[str, Any]:
        return self._call("GET", _model_path(name, version), params={"team": team})

    def register_model(self, name: str, job_id: int, **fields: Any) -> dict[str, Any]:
        """A new version of ``name`` from the job's outputs; ``fields``: path, team,
        description, allow_failed."""
        body = {"job_id": job_id} | {k: v for k, v in fields.items() if v is not None}
        return self._call("POST", f"{_model_path(name)}/versions", json=body)

    # -- experiments ---------------------------------------------------------------------------

    def create_experiment(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Start a hyper-parameter search (``ExperimentSpec``'s fields)."""
        return self._call("POST", "/experiments", json=spec)

    def experiments(self, include_ended: bool = True) -> list[dict[str, Any]]:
        """Your teams' experiments, newest first."""
        return self._call("GET", "/experiments", params={"all": include_ended})

    def experiment(self, ref: str) -> dict[str, Any]:
        """One experiment, by id or name, with its trials."""
        return self._call("GET", _experiment_path(ref))

    def steer_experiment(self, ref: str, action: str) -> dict[str, Any]:
        """``action``: pause, resume or stop."""
        return self._call("POST", f"{_experiment_path(ref)}/{action}")

    # -- container images --------------------------------------------------------------------

    def images(self, team: str | None = None) -> list[dict[str, Any]]:
        """The images of your teams and the site's (every one, for an admin)."""
        return self._call("GET", "/images", params={"team": team})

    def image(self, name: str, team: str | None = None) -> dict[str, Any]:
        """One image, by the name it is listed under or its digest."""
        return self._call("GET", _image_path(name), params={"team": team})

    def pull_image(self, ref: str, team: str | None = None) -> dict[str, Any]:
        """Pull ``ref`` from a registry the site allows, for ``team`` (slow: give the client
        a long timeout)."""
        body = {"ref": ref} | ({"team": team} if team else {})
        return self._call("POST", "/images/pull", json=body)

    def import_image(
        self, archive: BinaryIO, size: int, name: str | None = None, team: str | None = None
    ) -> dict[str, Any]:
        """Import ``size`` bytes of ``archive`` (an OCI or docker archive) as ``name``."""
        body = Upload(archive, size, "application/x-tar")
        params = {"name": name, "team": team}
        return self._call("POST", "/images/import", params=params, upload=body)

    def remove_image(self, name: str, team: str | None = None) -> dict[str, Any]:
        """Remove the image; ApiError image_in_use while a job of its team runs in it."""
        return self._call("DELETE", _image_path(name), params={"team": team})

    # -- Python environments -------------------------------------------------------------------

    def environments(self, team: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/environments", params={"team": team})

    def environment(self, ref: str, team: str | None = None) -> dict[str, Any]:
        """``NAME``: the environment and its versions; ``NAME@ID``: that version, its lock
        included."""
        return self._call("GET", _environment_path(ref), params={"team": team})

    def create_environment(self, body: dict[str, Any]) -> dict[str, Any]:
        """A version of an environment (fields of POST /environments: name, team, python,
        and requirements, pyproject or lock). The server resolves it against its index
        before it answers, so this waits up to RESOLVE_WAIT seconds."""
        return self._slow_call("POST", "/environments", json=body)

    def register_environment(self, body: dict[str, Any]) -> dict[str, Any]:
        """An existing prefix as an environment (name, path, team, description); admins."""
        return self._call("POST", "/environments/prefixes", json=body)

    def remove_environment(self, ref: str, team: str | None = None) -> list[str]:
        return self._call("DELETE", _environment_path(ref), params={"team": team})

    # -- deployments -------------------------------------------------------------------------

    def deploy(self, spec: dict[str, Any]) -> dict[str, Any]:
        """A new deployment (fields of POST /deployments: name, model, version, replicas,
        command, resources, health_path, team)."""
        return self._call("POST", "/deployments", json=spec)

    def deployments(self, team: str | None = None, stopped: bool = False) -> list[dict[str, Any]]:
        return self._call("GET", "/deployments", params={"team": team, "stopped": stopped})

    def deployment(self, name: str, team: str | None = None) -> dict[str, Any]:
        """The deployment with its replicas, events and traffic; ``team``: its team, where
        several of yours have a deployment of this name."""
        return self._call("GET", _deployment_path(name), params={"team": team})

    def scale_deployment(self, name: str, replicas: int, team: str | None = None) -> dict[str, Any]:
        body = {"replicas": replicas}
        return self._call("POST", _deployment_path(name, "scale"), json=body, params={"team": team})

    def update_deployment(
        self, name: str, version: int | None = None, team: str | None = None
    ) -> dict[str, Any]:
        """Roll to ``version`` of its model (None: the latest), replica by replica."""
        body = {"version": version}
        return self._call(
            "POST", _deployment_path(name, "update"), json=body, params={"team": team}
        )

    def stop_deployment(self, name: str, team: str | None = None) -> dict[str, Any]:
        return self._call("POST", _deployment_path(name, "stop"), params={"team": team})

    def deployment_keys(self, name: str, team: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", _deployment_path(name, "keys"), params={"team": team})

    def create_deployment_key(
        self, name: str, key_name: str = "key", team: str | None = None
    ) -> dict[str, Any]:
        """A key that may call the deployment (its secret is in this answer only)."""
        body = {"name": key_name}
        return self._call("POST", _deployment_path(name, "keys"), json=body, params={"team": team})

    def revoke_deployment_key(
        self, name: str, key_id: int, team: str | None = None
    ) -> dict[str, Any]:
        path = _deployment_path(name, f"keys/{key_id}")
        return self._call("DELETE", path, params={"team": team})

    # -- notebooks ---------------------------------------------------------------------------

    def start_notebook(self, request: dict[str, Any]) -> dict[str, Any]:
        """A new notebook of yours (fields of POST /notebooks: name, team, resources)."""
        return self._call("POST", "/notebooks", json=request)

    def notebooks(self, mine: bool = False) -> list[dict[str, Any]]:
        return self._call("GET", "/notebooks", params={"mine": mine})

    def notebook(self, notebook_id: int) -> dict[str, Any]:
        return self._call("GET", f"/notebooks/{notebook_id}")

    def stop_notebook(self, notebook_id: int) -> dict[str, Any]:
        return self._call("POST", f"/notebooks/{notebook_id}/stop")

    def resume_notebook(self, notebook_id: int) -> dict[str, Any]:
        return self._call("POST", f"/notebooks/{notebook_id}/resume")

    def idle_notebook_gpus(self, longer_than: float = 60) -> list[dict[str, Any]]:
        """Admins: notebooks holding GPUs idle for more than ``longer_than`` seconds."""
        return self._call("GET", "/notebooks/idle-gpus", params={"longer_than": longer_than})

    # -- datasets ----------------------------------------------------------------------------

    def datasets(self, team: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/datasets", params={"team": team})

    def dataset(self, name: str, team: str | None = None) -> dict[str, Any]:
        """The dataset with its versions, newest first."""
        return self._call("GET", _dataset_path(name), params={"team": team})

    def dataset_version(
        self, name: str, version: int, team: str | None = None, files: bool = True
    ) -> dict[str, Any]:
        params = {"team": team, "files": "true" if files else "false"}
        return self._call("GET", _dataset_path(name, version), params=params)

    def upload_blob(
        self,
        sha256: str,
        source: BinaryIO,
        size: int,
        team: str | None = None,
        gzipped: bool = False,
    ) -> dict[str, Any]:
        """Store ``size`` bytes of ``source`` as the blob ``sha256`` (hex) for ``team``;
        ``gzipped``: they are the blob gzipped (the server inflates them)."""
        body = (_GzipUpload if gzipped else Upload)(source, size)
        return self._call("PUT", f"/dataset-blobs/{sha256}", params={"team": team}, upload=body)

    def plan_dataset_upload(
        self, name: str, manifest: str, team: str | None = None
    ) -> dict[str, Any]:
        """Which blobs of the uploaded manifest ``manifest`` (hex) the team lacks."""
        body = {"manifest": manifest} | ({"team": team} if team else {})
        return self._call("POST", f"{_dataset_path(name)}/uploads", json=body)

    def create_dataset_version(self, name: str, **fields: Any) -> dict[str, Any]:
        """A new version: ``manifest`` (an uploaded one) or ``from_job`` (and ``path``), with
        ``team`` and ``description``; from a job, the server copies the files (slow: give
        the client a long timeout)."""
        body = {k: v for k, v in fields.items() if v is not None}
        return self._call("POST", f"{_dataset_path(name)}/versions", json=body)

    def delete_dataset(
        self, name: str, version: int | None = None, team: str | None = None
    ) -> None:
        """Delete one version, or the dataset with all of them (``version`` None)."""
        self._call("DELETE", _dataset_path(name, version), params={"team": team})

    def volumes(self, team: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/volumes", params={"team": team})

    def volume(self, name: str, team: str | None = None) -> dict[str, Any]:
        return self._call("GET", f"/volumes/{quote(name, safe='')}", params={"team": team})

    def create_volume(
        self, name: str, team: str | None = None, size_bytes: int | None = None
    ) -> dict[str, Any]:
        body = {"name": name, "team": team, "size_bytes": size_bytes}
        return self._call("POST", "/volumes", json={k: v for k, v in body.items() if v})

    def delete_volume(self, name: str, team: str | None = None) -> None:
        self._call("DELETE", f"/volumes/{quote(name, safe='')}", params={"team": team})

    # -- transport ---------------------------------------------------------------------------

    def _slow_call(self, method: str, path: str, **kwargs: Any) -> Any:
        """A call whose answer may take long to come (up to ``RESOLVE_WAIT`` seconds)."""
        kept = self.http.timeout
        self.http.close()
        self.http.timeout = max(kept, RESOLVE_WAIT)
        try:
            return self._call(method, path, **kwargs)
        finally:
            self.http.close()
            self.http.timeout = kept

    def scheduler_config(self) -> dict[str, Any]:
        """The scheduler's live settings, their version, and the environment's."""
        return self._call("GET", "/scheduler/config")

    def change_scheduler_config(
        self, knobs: dict[str, Any], reason: str, if_version: int | None = None
    ) -> dict[str, Any]:
        """A new version of the settings: ``knobs`` change, the others keep their value."""
        body = {**knobs, "reason": reason, "if_version": if_version}
        return self._call("PUT", "/scheduler/config", json=body)

    def scheduler_history(self, limit: int = 100) -> list[dict[str, Any]]:
        return self._call("GET", "/scheduler/config/history", params={"limit": limit})

    def rollback_scheduler_config(
        self, version: int, reason: str, if_version: int | None = None
    ) -> dict[str, Any]:
        """A new version with ``version``'s knobs (0: the server environment's)."""
        body = {"version": version, "reason": reason, "if_version": if_version}
        return self._call("POST", "/scheduler/config/rollback", json=body)

    def history_trace(self, since: float) -> str:
        """The pool's history of the last ``since`` seconds as the simulator's CSV."""
        try:
            response = self.http.request("GET", "/scheduler/trace", params={"since": since})
        except TransportError as error:
            raise ApiError(0, error.code, error.message) from None
        if response.status >= 400:
            raise _error(response)
        return response.content.decode()

    def request_tune(self, options: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/scheduler/tunes", json=options)

    def tunes(self) -> list[dict[str, Any]]:
        return self._call("GET", "/scheduler/tunes")

    def tune(self, tune_id: int) -> dict[str, Any]:
        return self._call("GET", f"/scheduler/tunes/{tune_id}")

    def fidelity(self, since: float) -> dict[str, Any]:
        return self._call("GET", "/scheduler/fidelity", params={"since": since})

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except TransportError as error:
            raise ApiError(0, error.code, error.message) from None
        if response.status >= 400:
            raise _error(response)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as error:
            message = f"{self.url} answered {method} {path} with something other than JSON"
            raise ApiError(response.status, "bad_response", message) from error


def _node_path(name: str, action: str | None = None) -> str:
    return f"/nodes/{quote(name, safe='')}" + (f"/{action}" if action else "")


def _environment_path(ref: str) -> str:
    return f"/environments/{quote(ref, safe='@')}"


def _model_path(name: str, version: int | None = None) -> str:
    return f"/models/{quote(name, safe='')}" + (f"/versions/{version}" if version else "")


@dataclass(frozen=True)
class _GzipUpload(Upload):
    """A body that is gzip: the server inflates it (a dataset's manifest)."""

    def headers(self) -> dict[str, str]:
        return super().headers() | {"Content-Encoding": "gzip"}


def _dataset_path(name: str, version: int | None = None) -> str:
    return f"/datasets/{quote(name, safe='')}" + (f"/versions/{version}" if version else "")


def _experiment_path(ref: str) -> str:
    return f"/experiments/{quote(ref, safe='')}"


def _image_path(name: str) -> str:
    return f"/images/{quote(name, safe='/:@')}"


def _deployment_path(name: str, action: str | None = None) -> str:
    path = f"/deployments/{quote(name, safe='')}"
    return f"{path}/{action}" if action else path


def _member_path(team: str, user: str) -> str:
    return f"/teams/{quote(team, safe='')}/members/{quote(user, safe='')}"


def _error(response: Response) -> ApiError:
    try:
        error = response.json()["error"]
        return ApiError(response.status, error["code"], error["message"], error.get("details"))
    except (ValueError, KeyError, TypeError):
        return ApiError(response.status, "http_error", response.text[:200] or response.reason)
