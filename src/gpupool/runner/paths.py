"""Path checks the runner and the executor share (stdlib only, nothing else of gpupool)."""

from __future__ import annotations


def conflict(path: str, protected: list[str], above_too: bool = True) -> str | None:
    """The protected path that ``path`` lies in (or above, with ``above_too``: a sandbox
    hides what a working directory holds of them, an unsandboxed job would see it)."""
    for secret in protected:
        if within(path, secret) or (above_too and within(secret, path)):
            return secret
    return None


def within(path: str, parent: str) -> bool:
    """Whether ``path`` is ``parent`` or lies below it (both absolute and normalised)."""
    return path == parent or path.startswith(parent.rstrip("/") + "/")
