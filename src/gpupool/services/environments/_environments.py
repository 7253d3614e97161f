"""Environments of teams: made from packages (resolved once here), registered prefixes,
listed, shown, removed, and resolved for a job when it is submitted.

Making a version takes two steps, so that no transaction is held while uv resolves:

1. check who asks and what they give, and resolve it into a lock (``_resolve``), with no
   transaction open;
2. record the environment (made when it has none) and the version, in one short
   transaction. The same lock for the same Python and platform is the same version: asking
   again gives it back.

Visibility follows the team: a team's environments are seen by its members (viewers too)
and by admins; making or removing one needs a member (not a viewer) of its team. A prefix
an admin registered for every team is seen by everyone. Anything else is answered as if the
environment did not exist. A job names ``NAME`` or ``NAME@ID``; what it gets is recorded on
it as ``NAME@sha256:<hex>`` when it is submitted, so its next attempt, on any node, runs the
very same packages.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpupool.domain.environments import (
    NAME_RULE,
    EnvironmentCreate,
    EnvironmentDetailView,
    EnvironmentRegister,
    EnvironmentVersionView,
    EnvironmentView,
    SourceKind,
    env_id,
    hex_of,
    is_name,
    packages_of,
    parse_ref,
    prefix_id,
    short,
)
from gpupool.domain.jobs import JobStatus
from gpupool.errors import (
    AmbiguousEnvironment,
    EnvironmentInUse,
    EnvironmentNotFound,
    InvalidEnvironment,
    PythonUnavailable,
)
from gpupool.executors.environments import find_python, server_python
from gpupool.services import identity
from gpupool.services.core import Principal, Reads, Writes
from gpupool.services.environments._ports import Resolves
from gpupool.services.environments._resolve import requirements_of, resolve
from gpupool.store.db import Database
from gpupool.store.models import (
    EnvironmentModel,
    EnvironmentVersionModel,
    JobModel,
)

UNFINISHED = (JobStatus.PENDING.value, JobStatus.STARTING.value, JobStatus.RUNNING.value)


# -- what the API calls ------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """A version made from what a user asked, resolved and not yet recorded (``prepare``)."""

    asked: EnvironmentCreate
    team_id: int
    python: str
    platform: str
    lock: str
    id: str


def create(ctx: Resolves, who: Principal, asked: EnvironmentCreate) -> EnvironmentVersionView:
    """A version of the environment ``asked.name`` from the packages asked for (the
    environment is made when it has none). Slow (uv resolves against the index): call it
    from a worker thread."""
    resolved = prepare(ctx, who, asked)
    with ctx.db.session() as session:
        return version_view(record(session, who, resolved, ctx.clock.now()), with_lock=True)


def prepare(ctx: Resolves, who: Principal, asked: EnvironmentCreate) -> Resolved:
    """Step 1, with no transaction open: check who asks and what, and resolve it."""
    who.require_member()
    _check_name(asked.name)
    python = asked.python or server_python()
    requirements = requirements_of(asked.kind, asked.source)
    with ctx.db.reader() as session:
        team = identity.acting_team(session, who, asked.team, "make it in")
    if find_python(python) is None:
        raise PythonUnavailable(
            f"no Python {python} is installed on the server (none is downloaded): ask for "
            f"another version with --python (this server runs {server_python()})"
        )
    lock, platform = resolve(ctx.settings, requirements, python)
    return Resolved(asked, team.id, python, platform, lock, env_id(lock, python, platform))


def record(
    session: Session, who: Principal, resolved: Resolved, now: float
) -> EnvironmentVersionModel:
    """Step 2, in the caller's transaction: the environment (made when it has none) and the
    version (the one there already when it is the same)."""
    asked = resolved.asked
    environment = _environment_for(session, resolved.team_id, asked.name, asked.description, now)
    version = _version(session, environment.id, resolved.id)
    if version is None:
        version = EnvironmentVersionModel(
            environment_id=environment.id,
            env=resolved.id,
            python=resolved.python,
            platform=resolved.platform,
            kind=asked.kind.value,
            source=asked.source,
            lock=resolved.lock,
            packages=packages_of(resolved.lock),
            created_at=now,
            created_by=who.user_id,
        )
        session.add(version)
        session.flush()
    return version


def register(ctx: Writes, who: Principal, asked: EnvironmentRegister) -> EnvironmentVersionView:
    """An existing prefix (the same path on every node) as an environment of ``asked.team``,
    or of every team; admins only."""
    who.require_admin()
    _check_name(asked.name)
    path = os.path.normpath(asked.path)
    if not asked.path.startswith("/") or ".." in asked.path.split("/"):
        raise InvalidEnvironment(
            f"'{asked.path}' is not an absolute path: give the prefix's path, the same on "
            "every node (its bin/ holds python)",
            fields=[{"field": "path", "message": "an absolute path"}],
        )
    with ctx.db.session() as session:
        team_id = identity.get_team(session, asked.team).id if asked.team else None
        now = ctx.clock.now()
        environment = _environment_for(session, team_id, asked.name, asked.description, now)
        found = prefix_id(path)
        version = _version(session, environment.id, found)
        if version is None:
            version = EnvironmentVersionModel(
                environment_id=environment.id,
                env=found,
                python="",
                platform="",
                kind=SourceKind.PREFIX.value,
                source=path,
                lock=None,
                prefix=path,
                packages=[],
                created_at=now,
                created_by=who.user_id,
            )
            session.add(version)
            session.flush()
        return version_view(version)


def list_environments(ctx: Reads, who: Principal, team: str | None = None) -> list[EnvironmentView]:
    """The environments ``who`` can see (of ``team`` only, when given), by name."""
    with ctx.db.reader() as session:
        rows = _visible(session, who, team)
        using = _jobs_using(session)
        views = []
        for environment in rows:
            versions = _versions(session, environment.id)
            if versions:
                views.append(_view(environment, versions, using))
        return views


def show(
    ctx: Reads, who: Principal, ref: str, team: str | None = None
) -> EnvironmentDetailView | EnvironmentVersionView:
    """``NAME``: the environment with its versions, newest first; ``NAME@ID``: that version,
    its lock included."""
    name, given = _parse(ref)
    with ctx.db.reader() as session:
        environment = _find(session, who, name, team)
        using = _jobs_using(session)
        if given is not None:
            version = _pick(session, environment, given)
            return version_view(version, with_lock=True, jobs=using[version.env])
        versions = _versions(session, environment.id)
        detail = _view(environment, versions, using)
        return EnvironmentDetailView(
            **detail.model_dump(),
            versions=[version_view(v, jobs=using[v.env]) for v in versions],
        )


def remove(ctx: Writes, who: Principal, ref: str, team: str | None = None) -> list[str]:
    """Remove the version ``NAME@ID``, or the environment ``NAME`` with all its versions;
    refused (EnvironmentInUse) while a pending or running job uses one. The ids removed."""
    name, given = _parse(ref)
    with ctx.db.session() as session:
        environment = _find(session, who, name, team)
        if environment.team_id is None:
            who.require_admin()
        who.require_member()  # a viewer sees it, and may not change it
        versions = (
            [_pick(session, environment, given)]
            if given is not None
            else _versions(session, environment.id)
        )
        ids = {v.env for v in versions}
        users = _jobs_of(session, environment.name, ids)
        if users:
            listed = ", ".join(str(i) for i in users[:20])
            raise EnvironmentInUse(
                f"jobs {listed} use {ref}: cancel them (gpupool cancel) or let them end, then "
                "remove it",
                jobs=users,
            )
        for version in versions:
            session.delete(version)
        session.flush()
        if not _versions(session, environment.id):
            session.delete(environment)
        return sorted(ids)


# -- what a job's submit and launch use ------------------------------------------------------


def recorded_ref(session: Session, who: Principal, ref: str, team_id: int, team: str) -> str:
    """What a job of team ``team`` asking for ``ref`` (NAME or NAME@ID) runs with:
    ``NAME@sha256:<hex>``; EnvironmentNotFound when the team has no such environment."""
    name, given = _parse(ref)
    query = select(EnvironmentModel).where(
        EnvironmentModel.name == name,
        or_(EnvironmentModel.team_id == team_id, EnvironmentModel.team_id.is_(None)),
    )
    rows = sorted(session.scalars(query), key=lambda e: e.team_id is None)
    if not rows:
        raise EnvironmentNotFound(
            f"team {team} has no environment {name}: list them with 'gpupool env ls', or "
            f"make it with 'gpupool env create {name} -r requirements.txt'"
        )
    environment = rows[0]  # the team's own before one registered for every team
    if given is None:
        versions = _versions(session, environment.id)
        if not versions:
            raise _not_found(name, team)
        return f"{name}@{versions[0].env}"
    return f"{name}@{_pick(session, environment, given).env}"


def launch_lookup(db: Database) -> Callable[[str], dict[str, Any]]:
    """For the launch pipeline: a job's recorded ``NAME@sha256:<hex>`` -> what its task
    carries to the node (``TaskSpec.environment``). A version never changes, so each is read
    from the database once."""

    @functools.lru_cache(maxsize=512)
    def lookup(ref: str) -> dict[str, Any]:
        name, _, found = ref.partition("@")
        with db.reader() as session:
            query = select(EnvironmentVersionModel).where(EnvironmentVersionModel.env == found)
            version = session.scalars(query.limit(1)).first()
            if version is None:
                raise LookupError(
                    f"environment {ref} was removed after the job was submitted: submit it "
                    "again with an environment that exists"
                )
            if version.prefix is not None:
                return {"id": found, "name": name, "prefix": version.prefix}
            return {"id": found, "name": name, "python": version.python, "lock": version.lock}

    return lookup


# -- views ---------------------------------------------------------------------------------------


def version_view(
    version: EnvironmentVersionModel, with_lock: bool = False, jobs: int = 0
) -> EnvironmentVersionView:
    environment = version.environment
    return EnvironmentVersionView(
        id=version.env,
        short_id=short(version.env),
        name=environment.name,
        team=environment.team.name if environment.team is not None else None,
        python=version.python,
        platform=version.platform,
        kind=SourceKind(version.kind),
        packages=list(version.packages or []),
        prefix=version.prefix,
        lock=version.lock if with_lock else None,
        created_by=version.creator.name,
        created_at=version.created_at,
        jobs=jobs,
    )


def _view(
    environment: EnvironmentModel, versions: list[EnvironmentVersionModel], using: Counter
) -> EnvironmentView:
    latest = versions[0]
    return EnvironmentView(
        name=environment.name,
        team=environment.team.name if environment.team is not None else None,
        latest=version_view(latest, jobs=using[latest.env]),
        version_count=len(versions),
        description=environment.description,
    )


# -- the steps -----------------------------------------------------------------------------------


def _check_name(name: str) -> None:
    if not is_name(name):
        raise InvalidEnvironment(
            f"'{name}' is not an environment's name: {NAME_RULE}",
            fields=[{"field": "name", "message": NAME_RULE}],
        )


def _parse(ref: str) -> tuple[str, str | None]:
    try:
        return parse_ref(ref)
    except ValueError as e:
        message = str(e)
        raise InvalidEnvironment(
            message, fields=[{"field": "environment", "message": message}]
        ) from None


def _environment_for(
    session: Session, team_id: int | None, name: str, description: str | None, now: float
) -> EnvironmentModel:
    query = select(EnvironmentModel).where(EnvironmentModel.name == name)
    query = query.where(
        EnvironmentModel.team_id == team_id
        if team_id is not None
        else EnvironmentModel.team_id.is_(None)
    )
    environment = session.scalars(query).first()
    if environment is None:
        environment = EnvironmentModel(
            team_id=team_id, name=name, description=description, created_at=now
        )
        session.add(environment)
        session.flush()
    elif description is not None:
        environment.description = description
    return environment


def _version(session: Session, environment_id: int, found: str) -> EnvironmentVersionModel | None:
    query = select(EnvironmentVersionModel).where(
        EnvironmentVersionModel.environment_id == environment_id,
        EnvironmentVersionModel.env == found,
    )
    return session.scalars(query).first()


def _versions(session: Session, environment_id: int) -> list[EnvironmentVersionModel]:
    """Its versions, newest first."""
    query = (
        select(EnvironmentVersionModel)
        .where(EnvironmentVersionModel.environment_id == environment_id)
        .order_by(EnvironmentVersionModel.id.desc())
    )
    return list(session.scalars(query))


def _visible(session: Session, who: Principal, team: str | None) -> list[EnvironmentModel]:
    query = select(EnvironmentModel).order_by(EnvironmentModel.name, EnvironmentModel.id)
    if not who.is_admin:
        query = query.where(
            or_(
                EnvironmentModel.team_id.in_(who.team_ids or {-1}),
                EnvironmentModel.team_id.is_(None),
            )
        )
    if team:
        found = identity.get_team(session, team)
        query = query.where(
            or_(EnvironmentModel.team_id == found.id, EnvironmentModel.team_id.is_(None))
        )
    return list(session.scalars(query))


def _find(session: Session, who: Principal, name: str, team: str | None) -> EnvironmentModel:
    found = [e for e in _visible(session, who, team) if e.name == name]
    own = [e for e in found if e.team_id is not None]
    if len(own) > 1:
        teams = ", ".join(sorted(e.team.name for e in own if e.team is not None))
        raise AmbiguousEnvironment(
            f"teams {teams} each have an environment {name}: say which with --team", teams=teams
        )
    if not found:
        raise _not_found(name, team)
    return (own or found)[0]


def _pick(session: Session, environment: EnvironmentModel, given: str) -> EnvironmentVersionModel:
    matches = [v for v in _versions(session, environment.id) if hex_of(v.env).startswith(given)]
    if not matches:
        raise EnvironmentNotFound(
            f"environment {environment.name} has no version {given}: see its versions with "
            f"'gpupool env show {environment.name}'"
        )
    if len(matches) > 1:
        raise AmbiguousEnvironment(
            f"several versions of {environment.name} start with {given}: give more of its id"
        )
    return matches[0]


def _jobs_using(session: Session) -> Counter:
    """Pending and running jobs by the environment id they use."""
    ref = JobModel.spec["environment"].as_string()
    query = select(ref).where(JobModel.status.in_(UNFINISHED), ref.is_not(None))
    return Counter(value.partition("@")[2] for value in session.scalars(query) if value)


def _jobs_of(session: Session, name: str, ids: set[str]) -> list[int]:
    ref = JobModel.spec["environment"].as_string()
    refs = [f"{name}@{found}" for found in ids]
    query = select(JobModel.id).where(JobModel.status.in_(UNFINISHED), ref.in_(refs))
    return sorted(session.scalars(query.order_by(JobModel.id).limit(100)))


def _not_found(name: str, team: str | None) -> EnvironmentNotFound:
    where = f" of team {team}" if team else ""
    return EnvironmentNotFound(
        f"no environment {name}{where} that you can see: list them with 'gpupool env ls'"
    )
