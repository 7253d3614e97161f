"""Helpers for tests that drive the web UI's JSON API like a signed-in browser."""

from __future__ import annotations

import httpx


def submit(client: httpx.Client, csrf: str, **spec: object) -> dict:
    """Submit a job (``sleep 300`` unless ``command`` is given) with the session's CSRF token."""
    body = {"command": ["sleep", "300"]} | spec
    answer = client.post("/api/v1/jobs", json=body, headers={"x-csrf-token": csrf})
    assert answer.status_code == 201, answer.text
    return answer.json()
