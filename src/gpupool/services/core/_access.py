"""Who is asking, and what they may see and do."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.jobs import Role
from gpupool.errors import Forbidden


@dataclass(frozen=True)
class Principal:
    user_id: int
    name: str
    role: Role
    team_ids: frozenset[int]
    via_session: bool = False
    # the teams it is a team admin of: it adds and removes their members (a subset of team_ids)
    admin_team_ids: frozenset[int] = frozenset()

    @property
    def is_admin(self) -> bool:
        return self.role == Role.ADMIN

    def can_see_team(self, team_id: int) -> bool:
        return self.is_admin or team_id in self.team_ids

    def can_act_on_team(self, team_id: int) -> bool:
        return self.is_admin or (self.role == Role.MEMBER and team_id in self.team_ids)

    def can_admin_team(self, team_id: int) -> bool:
        """May change the team's members and its team admins: a pool admin, or the team's."""
        return self.is_admin or team_id in self.admin_team_ids

    def require_admin(self) -> None:
        if not self.is_admin:
            raise Forbidden("only an admin of the pool can do this; ask one")

    def require_member(self) -> None:
        if self.role == Role.VIEWER:
            raise Forbidden(
                "viewers cannot submit or change jobs; ask an admin for the member role"
            )
