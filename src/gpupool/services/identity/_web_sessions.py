"""Ending web sessions when what they were opened with no longer holds.

Its own module, not auth's: users (a password change, a disabled user) and auth (a revoked
token) both end sessions, and auth already imports users.
"""

from __future__ import annotations

from sqlalchemy import delete
from sqlalchemy.orm import Session

from gpupool.store.models import WebSessionModel


def end_web_sessions(session: Session, user_id: int) -> None:
    """End every web session of a user: its password changed, or it was disabled."""
    session.execute(delete(WebSessionModel).where(WebSessionModel.user_id == user_id))


def end_token_sessions(session: Session, token_id: int) -> None:
    """End the web sessions opened with an API token given as the password."""
    session.execute(delete(WebSessionModel).where(WebSessionModel.token_id == token_id))
