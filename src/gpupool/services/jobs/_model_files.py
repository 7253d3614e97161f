"""Which model versions' files a job may be shown (``JobSpec.model``).

A job of a team may be given the files of a model version of that same team, read-only in
``GPUPOOL_MODEL_DIR`` (a deployment's replicas are such jobs). Knowing a version's archive
ref gives no access to another team's model: the ref must name a version the job's team owns.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.errors import ModelNotUsable
from gpupool.store.models import ModelVersionModel, RegisteredModelModel


def require_usable(session: Session, ref: str, team_id: int, team: str) -> None:
    """Refuse (ModelNotUsable, a 404) a model archive that no version of the team holds."""
    found = session.scalar(
        select(ModelVersionModel.id)
        .join(RegisteredModelModel, RegisteredModelModel.id == ModelVersionModel.model_id)
        .where(ModelVersionModel.archive == ref, RegisteredModelModel.team_id == team_id)
        .limit(1)
    )
    if found is None:
        raise ModelNotUsable(
            f"no model version of team {team} holds the files {ref}: register the model in "
            "that team ('gpupool model register'), or run the job in the team that owns it"
        )
