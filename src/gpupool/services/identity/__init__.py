"""Who may use the platform, and as whom: users, teams and their quotas, tokens, sessions.

Users and teams (``_users``, ``_teams``), team quotas and their history (``_quotas``,
``_history``), API tokens, the token cache and the first admin (``_auth``, ``_tokens``,
``_recovery``), sign-in and web sessions (``_identity``, ``_web_sessions``, ``_passwords``)
and the sign-in throttle (``_throttle``); what its calls need of the server beyond the core
ports (the token cache, the throttle) in ``_ports``. It imports ``services.core`` and, for
quotas checked against the pool's size, ``services.cluster``; jobs and scheduling build on it.
"""

from __future__ import annotations

from gpupool.services.identity._auth import Bootstrap, TokenCache, bootstrap, principal_of
from gpupool.services.identity._history import MAX_BUCKETS
from gpupool.services.identity._identity import (
    by_session,
    by_token,
    job_source,
    page_session,
    recent_token,
    sign_in,
    sign_out,
    whoami,
)
from gpupool.services.identity._passwords import new_secret, secret_hash
from gpupool.services.identity._quotas import (
    Quota,
    refuse_for_member,
    refuse_over_storage,
    team_quotas,
)
from gpupool.services.identity._recovery import RecoveredToken, issue_admin_token
from gpupool.services.identity._teams import (
    add_member,
    create_team,
    delete_team,
    list_teams,
    remove_member,
    set_quota,
    team_history,
)
from gpupool.services.identity._throttle import SignInThrottle
from gpupool.services.identity._tokens import create_token, list_tokens, revoke_token
from gpupool.services.identity._users import (
    UnknownTeam,
    acting_team,
    add_user,
    change_own_password,
    change_user,
    get_team,
    list_users,
    user_weights,
)
from gpupool.services.identity._users import list_teams as team_rows

__all__ = [
    "principal_of",
    "Bootstrap",
    "MAX_BUCKETS",
    "Quota",
    "RecoveredToken",
    "SignInThrottle",
    "TokenCache",
    "UnknownTeam",
    "acting_team",
    "add_member",
    "add_user",
    "bootstrap",
    "by_session",
    "by_token",
    "change_own_password",
    "change_user",
    "create_team",
    "create_token",
    "delete_team",
    "get_team",
    "issue_admin_token",
    "job_source",
    "list_teams",
    "list_tokens",
    "list_users",
    "new_secret",
    "page_session",
    "recent_token",
    "refuse_for_member",
    "refuse_over_storage",
    "remove_member",
    "revoke_token",
    "secret_hash",
    "set_quota",
    "sign_in",
    "sign_out",
    "team_history",
    "team_quotas",
    "team_rows",
    "user_weights",
    "whoami",
]
