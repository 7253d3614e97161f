"""Schema-driven fuzzing of the whole REST API: no input may produce a 500.

Jobs are accepted by an executor that never starts them, so no generated command runs. The
schema is loaded when the module is collected (schemathesis parametrizes from it then).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from gpupool.api.app import create_app
from gpupool.executors.fake import NeverStartsExecutor
from gpupool.services.platform import open_platform
from tests.support.platform import make_settings

DATA = Path(tempfile.mkdtemp(prefix="gpupool-fuzz-")) / "data"
PLATFORM = open_platform(make_settings(DATA), executor=NeverStartsExecutor())
TOKEN = PLATFORM.first_start.token
schema = schemathesis.openapi.from_asgi(
    "/api/v1/openapi.json", create_app(PLATFORM, start_loop=False)
)


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_makes_the_server_fail(case: schemathesis.Case) -> None:
    response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
    case.validate_response(response, checks=[not_a_server_error])
