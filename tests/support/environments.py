"""An environment's version recorded straight in the database, for tests of what reads it
(the scheduler's snapshot, the control loop): its lock is never built."""

from __future__ import annotations

from sqlalchemy.orm import Session

from gpupool.store.models import EnvironmentModel, EnvironmentVersionModel


def add_environment(
    session: Session, team_id: int, name: str, env: str, user_id: int, prefix: str | None = None
) -> None:
    """A team's environment ``name`` with one version of id ``env``: a locked one (numpy), or
    a registered ``prefix``."""
    environment = EnvironmentModel(team_id=team_id, name=name, created_at=0.0)
    session.add(environment)
    session.flush()
    session.add(
        EnvironmentVersionModel(
            environment_id=environment.id,
            env=env,
            python="3.11",
            platform="linux",
            kind="prefix" if prefix else "requirements",
            source=prefix or "numpy",
            lock=None if prefix else "numpy==2.0",
            prefix=prefix,
            packages=[] if prefix else ["numpy==2.0"],
            created_at=0.0,
            created_by=user_id,
        )
    )
