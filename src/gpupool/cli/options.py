"""Typer's declarations of the options many commands share.

They are apart from gpupool.cli.output, which does not import Typer (``gpupool ls`` runs
without it: gpupool.cli.quick).
"""

from __future__ import annotations

from typing import Annotated

import typer

from gpupool.cli.output import Output

OutputOption = Annotated[
    Output, typer.Option("--output", "-o", help="table (default) or json.", case_sensitive=False)
]
