"""Which container image a job runs in (``JobSpec.image``), resolved at submit.

A job of a team may run in an image of that team or in a site image (an admin's, for every
team), named as ``gpupool image ls`` lists it or by its digest. The digest is recorded
(``JobSpec.image_digest``): a tag pulled again later does not change what the job runs in,
and ``image rm`` knows the image is in use. Knowing another team's image's name or digest
gives no access to it: the answer is the same as for an image nobody holds.
"""

from __future__ import annotations

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpupool.domain.images import NAME_RULE, lookup
from gpupool.errors import ImageNotFound, InvalidImageName
from gpupool.store.models import ImageModel


def resolve(session: Session, text: str, team_id: int, team: str) -> str:
    """The digest of the image ``text`` that a job of ``team_id`` may run in: the team's
    own, else the site's; ImageNotFound (a 404) for any other."""
    if len(text) > 255:
        raise InvalidImageName(f"{text[:80]}... is not an image's name: {NAME_RULE}")
    names, digest = lookup(text)
    query = select(ImageModel).where(
        or_(ImageModel.team_id == team_id, ImageModel.team_id.is_(None)),
        ImageModel.digest == digest if digest else ImageModel.name.in_(names),
    )
    rows = sorted(session.scalars(query), key=lambda row: row.team_id is None)
    if not rows:
        raise ImageNotFound(
            f"team {team} has no image {text}: pull it ('gpupool image pull {text} --team "
            f"{team}'), or list the images the team may use with 'gpupool image ls'"
        )
    return rows[0].digest
