"""The names the platform's own web sign-in uses: its session cookie and the CSRF header a
page sends with it. The API reads them; the proxy never passes them on to a workload."""

from __future__ import annotations

SESSION_COOKIE = "gpupool_session"
CSRF_HEADER = "x-csrf-token"
