"""The connection every command but ``login`` uses: the saved URL and token, and a client.

Apart from the session's commands (gpupool.cli.session), so that it does not import Typer:
``gpupool ls`` runs without it (gpupool.cli.quick).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gpupool.cli.output import CliError
from gpupool.client import Client, ClientConfig, load_config

NOT_LOGGED_IN = "not logged in: run gpupool login URL --token T"


def read_config() -> ClientConfig:
    """The saved URL and token (or GPUPOOL_URL + GPUPOOL_TOKEN); CliError when absent."""
    try:
        config = load_config()
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CliError("bad_config", f"cannot read the gpupool config: {error}") from error
    if config is None:
        raise CliError("not_logged_in", NOT_LOGGED_IN)
    return config


@contextmanager
def connect() -> Iterator[Client]:
    """A client for the configured server, closed afterwards."""
    client = Client.from_config(read_config())
    try:
        yield client
    finally:
        client.close()
