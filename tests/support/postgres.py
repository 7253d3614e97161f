"""A private PostgreSQL server from Debian's packages, on 127.0.0.1 and a free port."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from gpupool.store import db
from tests.support.server import free_port

BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


class PostgresServer:
    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.bin_dir, self.root = bin_dir, root
        self.data = root / "data"
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self._template: str | None = None  # the database at head that others copy

    @classmethod
    def find(cls) -> PostgresServer | None:
        """A server under a new folder of /tmp (the postgres user cannot enter pytest's)."""
        for bin_dir in BIN_DIRS:
            if (bin_dir / "initdb").exists() and (bin_dir / "pg_ctl").exists():
                if os.geteuid() == 0 and not _has_user("postgres"):
                    return None
                return cls(bin_dir, Path(tempfile.mkdtemp(prefix="gpupool-pg-")))
        return None

    @staticmethod
    def missing_reason() -> str:
        return (
            "PostgreSQL is not installed (Debian package postgresql): 'make test' installs it "
            "when run as root"
        )

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            self.root.chmod(0o700)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "-l",
            str(self.root / "log"),
            "start",
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def new_database(self, template: str | None = None) -> str:
        """A new, empty database (or a copy of ``template``); its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        copy = ["-T", template] if template else []
        where = ["-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"]
        self._run("createdb", *where, *copy, name)
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def migrated_database(self) -> str:
        """A new database at the schema's head: a copy of one migrated once per server
        (``tests.support.schema`` says why); its URL."""
        if self._template is None:
            url = self.new_database()
            db.upgrade(url)  # its engine is disposed: a template must have no connection
            self._template = url.rsplit("/", 1)[1]
        return self.new_database(self._template)

    def _run(self, tool: str, *args: str, check: bool = True) -> None:
        command = [str(self.bin_dir / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd="/")
        if check and done.returncode:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr or done.stdout}")


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False
