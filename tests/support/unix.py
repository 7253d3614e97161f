"""Throwaway Unix accounts for tests of the users' account mapping (root only)."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

SBIN = "/usr/sbin:/sbin:/usr/bin:/bin"


def own_account() -> str:
    """The account this test process (and the server it starts) runs as."""
    return pwd.getpwuid(os.getuid()).pw_name


@contextmanager
def system_account() -> Iterator[str]:
    """A new unprivileged system account ``gpt-<random>``, deleted afterwards; the test is
    skipped when it cannot be made (not root, or no useradd)."""
    if os.getuid() != 0:
        pytest.skip("creating a Unix account for the test needs root (useradd)")
    useradd, userdel = shutil.which("useradd", path=SBIN), shutil.which("userdel", path=SBIN)
    if useradd is None or userdel is None:
        pytest.skip("useradd/userdel are not installed")
    name = f"gpt-{secrets.token_hex(3)}"
    subprocess.run([useradd, "--system", "--no-create-home", name], check=True)
    try:
        yield name
    finally:
        subprocess.run([userdel, name], check=False, capture_output=True)
