"""Container images of teams: pull, import, list, show, remove, and resolve for a job.

Pulling or importing takes three steps, so that no transaction is held across the copy:

1. check the request and who asks, and choose the image's team, in a read-only transaction;
2. fetch the image into the store and unpack it for this node (``_fetch``), with no
   transaction open;
3. record the team's name for it (a new row, or the same name now at another digest) in one
   short transaction.

Ownership: an image belongs to a team; its members (viewers too) see it, members use it in
their jobs, pull it again and remove it. An admin pulling or importing without ``--team``
makes a site image, which every team sees and uses and only an admin removes. An image of
another team is answered as if it did not exist, whatever name or digest is asked for.

``image rm`` removes the team's name for the image (refused while a job of the team that has
not ended runs in it); its files stay in the store, where another team's name, or a later
pull, finds them again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpupool.domain.images import (
    NAME_RULE,
    ImageView,
    Reference,
    import_name,
    lookup,
    parse_reference,
    parse_registries,
)
from gpupool.domain.jobs import FINAL_STATUSES
from gpupool.errors import (
    BadImageArchive,
    Forbidden,
    ImageInUse,
    ImagePullFailed,
    ImageTooLarge,
    InvalidImageName,
    InvalidRequest,
    NotFound,
    RegistryNotAllowed,
)
from gpupool.executors.images import ImageConfig
from gpupool.services import identity
from gpupool.services.core import Principal, Reads
from gpupool.services.images._fetch import (
    INCOMING,
    ROOTS,
    Fetched,
    archive_kind,
    fetch,
    layout_path,
)
from gpupool.services.images._ports import Stores
from gpupool.services.jobs import Incoming
from gpupool.settings import Settings
from gpupool.store.models import ImageModel, JobModel, TeamModel

SITE = None  # the team_id of a site image


@dataclass(frozen=True)
class Owner:
    """Whose the image will be: a team (id, name), or the site (None, None)."""

    team_id: int | None
    team: str | None


# -- what the API calls ------------------------------------------------------------------------


def pull(ctx: Stores, who: Principal, text: str, team: str | None = None) -> ImageView:
    """Pull ``text`` from a registry the site allows, for ``team`` (see the module's
    docstring). Slow (it downloads): call it from a worker thread."""
    reference = _reference(text)
    allowed = parse_registries(ctx.settings.image_registries).get(reference.host.lower())
    if allowed is None:
        registries = ", ".join(parse_registries(ctx.settings.image_registries)) or "none"
        raise RegistryNotAllowed(
            f"images are not pulled from {reference.host} here (allowed: {registries}): "
            + (RegistryNotAllowed.__doc__ or "").split(": ", 1)[-1].strip(),
            registry=reference.host,
        )
    owner = _owner(ctx, who, team)
    fetched = fetch(
        ctx.settings.images_dir,
        reference.source,
        allowed.tls_verify,
        ctx.settings.image_pull_timeout_seconds,
        ImagePullFailed,
    )
    return _record(ctx, who, owner, reference.name, "pull", fetched)


async def receive_archive(
    ctx: Stores,
    who: Principal,
    chunks: AsyncIterator[bytes],
    name: str | None = None,
    team: str | None = None,
    declared_bytes: int | None = None,
) -> ImageView:
    """Import the image archive read from ``chunks`` (an OCI archive, or what ``docker save``
    writes) as ``name`` (default: the name the archive carries) for ``team``."""
    if name is not None:
        name = _import_name(name)
    owner = await asyncio.to_thread(_owner, ctx, who, team)
    limit = ctx.settings.max_image_bytes
    if declared_bytes is not None and declared_bytes > limit:
        raise _too_large(declared_bytes, limit)
    with Incoming.open(
        ctx.settings.images_dir / INCOMING,
        prefix="import",
        max_bytes=limit,
        too_large=lambda size: _too_large(size, limit),
        what="image storage",
    ) as incoming:
        async for chunk in chunks:
            incoming.write(chunk)
        incoming.finish()
        return await asyncio.to_thread(_import, ctx, who, owner, incoming.path, name)


def list_images(ctx: Reads, who: Principal, team: str | None = None) -> list[ImageView]:
    """The images ``who`` can see (the site's and its teams'; every one for an admin), or
    those of ``team``, by name."""
    with ctx.db.reader() as session:
        query = _visible(select(ImageModel), who)
        if team:
            query = query.join(TeamModel).where(TeamModel.name == team)
        rows = session.scalars(query.order_by(ImageModel.name, ImageModel.team_id))
        return [_view(row) for row in rows]


def show_image(ctx: Reads, who: Principal, text: str, team: str | None = None) -> ImageView:
    """One image by name or digest."""
    with ctx.db.reader() as session:
        return _view(_find(session, who, text, team))


def remove(ctx: Stores, who: Principal, text: str, team: str | None = None) -> ImageView:
    """Remove the team's (or the site's) name for an image; ImageInUse while a job that may
    use it has not ended."""
    with ctx.db.session() as session:
        row = _find(session, who, text, team)
        who.require_member()
        if row.team_id is SITE and not who.is_admin:
            raise Forbidden(f"{row.name} is the site's image: only an admin removes it")
        if row.team_id is not SITE and not who.can_act_on_team(row.team_id):
            raise Forbidden(f"only a member of team {row.team.name if row.team else ''} removes it")
        users = _active_users(session, row)
        if users:
            shown = ", ".join(str(job_id) for job_id in users[:10])
            raise ImageInUse(
                f"jobs {shown} have not ended and run in {row.name}: wait for them or cancel "
                "them ('gpupool cancel ID'), then remove it",
                jobs=users[:10],
            )
        view = _view(row)
        session.delete(row)
        return view


def usable_image(session: Session, text: str, team_id: int) -> ImageView | None:
    """The image ``text`` (a name or a digest) that a job of ``team_id`` may run in: the
    team's own, else the site's; None when there is none (as ``jobs`` resolves one at
    submit: a Kubeflow manifest's image is looked up before)."""
    if len(text) > 255:
        return None
    names, digest = lookup(text)
    query = select(ImageModel).where(
        or_(ImageModel.team_id == team_id, ImageModel.team_id.is_(None)),
        ImageModel.digest == digest if digest else ImageModel.name.in_(names),
    )
    rows = sorted(session.scalars(query), key=lambda row: row.team_id is None)
    return _view(rows[0]) if rows else None


def image_layout(settings: Settings, digest: str) -> Path:
    """Where the server keeps the image ``digest`` (an OCI layout)."""
    return layout_path(settings.images_dir, digest)


def image_roots(settings: Settings) -> Path:
    """Where this machine keeps unpacked images' trees."""
    return settings.images_dir / ROOTS


# -- the steps ---------------------------------------------------------------------------------


def _import(
    ctx: Stores, who: Principal, owner: Owner, archive: Path, name: str | None
) -> ImageView:
    kind, carried = archive_kind(archive)
    if name is None:
        if carried is None:
            raise BadImageArchive(
                "the archive names no image: give the name to import it as (--name NAME:TAG)"
            )
        name = _carried_name(carried)
    fetched = fetch(
        ctx.settings.images_dir,
        f"{kind}:{archive}",
        True,
        ctx.settings.image_pull_timeout_seconds,
        BadImageArchive,
    )
    return _record(ctx, who, owner, name, "import", fetched)


def _record(
    ctx: Stores, who: Principal, owner: Owner, name: str, source: str, fetched: Fetched
) -> ImageView:
    now = ctx.clock.now()
    with ctx.db.session() as session:
        query = select(ImageModel).where(ImageModel.name == name)
        query = query.where(
            ImageModel.team_id.is_(None)
            if owner.team_id is SITE
            else ImageModel.team_id == owner.team_id
        )
        row = session.scalars(query).first()
        if row is None:
            row = ImageModel(team_id=owner.team_id, name=name)
            session.add(row)
        row.digest, row.source, row.size_bytes = fetched.digest, source, fetched.size_bytes
        row.config = asdict(fetched.config)
        row.created_at, row.created_by = now, who.user_id
        session.flush()
        session.refresh(row)
        return _view(row)


def _owner(ctx: Stores, who: Principal, team: str | None) -> Owner:
    """The image's owner: ``team`` (one ``who`` is a member of), else the site for an admin,
    else ``who``'s only team."""
    who.require_member()
    with ctx.db.reader() as session:
        if team:
            row = identity.get_team(session, team)
            if not who.can_act_on_team(row.id):
                raise identity.UnknownTeam(
                    f"you are not a member of team '{team}': pull into one of your teams"
                )
            return Owner(row.id, row.name)
        if who.is_admin:
            return Owner(SITE, None)
        mine = [t for t in identity.team_rows(session) if t.id in who.team_ids]
        if len(mine) == 1:
            return Owner(mine[0].id, mine[0].name)
        if not mine:
            raise InvalidRequest("you belong to no team: ask an admin to add you to one")
        names = ", ".join(t.name for t in mine)
        raise InvalidRequest(f"you belong to several teams ({names}): choose one with --team")


def _find(session: Session, who: Principal, text: str, team: str | None) -> ImageModel:
    names, digest = _names(text)
    query = _visible(select(ImageModel), who).where(
        ImageModel.digest == digest if digest else ImageModel.name.in_(names)
    )
    if team:
        query = query.join(TeamModel).where(TeamModel.name == team)
    rows = list(session.scalars(query))
    if not rows:
        where = f" of team {team}" if team else ""
        raise NotFound(
            f"no image {text}{where} that you can see: list them with 'gpupool image ls'"
        )
    teams = {row.team_id for row in rows}
    if len(teams) > 1 and not (len(teams) == 2 and SITE in teams):
        names_ = ", ".join(sorted(row.team.name for row in rows if row.team is not None))
        raise InvalidRequest(f"teams {names_} each hold {text}: say which with --team")
    rows.sort(key=lambda row: row.team_id is SITE)  # the team's before the site's
    return rows[0]


def _visible(query, who: Principal):  # noqa: ANN001, ANN202 - a Select of ImageModel
    if who.is_admin:
        return query
    return query.where(
        or_(ImageModel.team_id.is_(None), ImageModel.team_id.in_(who.team_ids or {-1}))
    )


def _names(text: str) -> tuple[list[str], str | None]:
    if len(text) > 255:
        raise InvalidImageName(f"{text[:80]}... is not an image's name: {NAME_RULE}")
    return lookup(text)


def _active_users(session: Session, row: ImageModel) -> list[int]:
    """Jobs that have not ended and may run in ``row``'s image: of its team (of any team for
    a site image)."""
    query = select(JobModel.id, JobModel.spec).where(
        JobModel.status.not_in([s.value for s in FINAL_STATUSES])
    )
    if row.team_id is not SITE:
        query = query.where(JobModel.team_id == row.team_id)
    return [
        job_id
        for job_id, spec in session.execute(query)
        if (spec or {}).get("image_digest") == row.digest
    ]


def _reference(text: str) -> Reference:
    try:
        reference = parse_reference(text)
    except ValueError as problem:
        raise InvalidImageName(
            f"{text!r} is not an image's name: {problem}",
            fields=[{"field": "ref", "message": str(problem)}],
        ) from None
    return reference


def _import_name(text: str) -> str:
    try:
        return import_name(text)
    except ValueError as problem:
        raise InvalidImageName(
            f"{text!r} is not an image's name: {problem}",
            fields=[{"field": "name", "message": str(problem)}],
        ) from None


def _carried_name(carried: str) -> str:
    """The name an archive carries, as an imported image's (a registry's host dropped)."""
    try:
        return import_name(carried)
    except ValueError:
        pass
    try:
        reference = parse_reference(carried)
        return import_name(f"{reference.path}:{reference.tag}")
    except ValueError:
        raise BadImageArchive(
            f"the archive's name {carried!r} is not one gpupool takes: give one with "
            "--name NAME:TAG"
        ) from None


def _too_large(size: int, limit: int) -> ImageTooLarge:
    return ImageTooLarge(
        f"the archive is {size} bytes, over this server's {limit} (GPUPOOL_MAX_IMAGE_BYTES): "
        "pull the image from a registry the site allows, or ask an admin to raise the limit",
        limit=limit,
    )


def _view(row: ImageModel) -> ImageView:
    config = ImageConfig.from_json(dict(row.config or {}))
    return ImageView(
        name=row.name,
        digest=row.digest,
        team=row.team.name if row.team is not None else None,
        source=row.source,
        size_bytes=row.size_bytes,
        env=config.env,
        entrypoint=config.entrypoint,
        cmd=config.cmd,
        workdir=config.workdir,
        created_at=row.created_at,
        created_by=row.creator.name,
    )
