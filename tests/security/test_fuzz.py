"""Schema-driven fuzzing of the whole REST API: no input may produce a 500.

Schemathesis draws requests from the OpenAPI schema (valid ones and invalid ones); on top of
that, any string of a drawn body (a value or a key) may be given a NUL or a lone surrogate,
which its own generator never sends, so every text field meets both. Bounded: a fixed number
of examples per operation, no deadline, so that it runs in well under a minute.

Jobs are accepted by an executor that never starts them, so no generated command runs. The
schema is loaded when the module is collected: one test per operation, named by it (pytest's
own parametrize, not schemathesis', whose cases share one test id: under pytest-xdist only
one of them would run).
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from gpupool.api.app import create_app
from gpupool.executors.fake import NeverStartsExecutor
from gpupool.platform import open_platform
from tests.support.platform import make_settings

EXAMPLES = 25  # per operation
UNSTORABLE = ("\x00", "\ud800", "\udfff", "\udc80")

DATA = Path(tempfile.mkdtemp(prefix="gpupool-fuzz-")) / "data"
# Generated sign-ins fail by the thousand: with the product's throttle the test address would
# soon get only 429s, and the fuzz would reach nothing behind authentication.
UNTHROTTLED = {"signin_max_per_user": 1_000_000, "signin_max_per_address": 1_000_000}
PLATFORM = open_platform(make_settings(DATA, **UNTHROTTLED), executor=NeverStartsExecutor())
TOKEN = PLATFORM.first_start.token
schema = schemathesis.openapi.from_asgi(
    "/api/v1/openapi.json", create_app(PLATFORM, start_loop=False)
)


@schema.hook("flatmap_body")
def poison_a_string(_context: object, body: Any) -> st.SearchStrategy[Any]:
    """The body as drawn, or with one of its strings (a value or a key) holding a NUL or a
    lone surrogate at a drawn place."""
    places = list(_string_places(body, ()))
    if not places:
        return st.just(body)
    poisoned = st.builds(
        _poison, st.just(body), st.sampled_from(places), st.sampled_from(UNSTORABLE), st.data()
    )
    return st.one_of(st.just(body), poisoned)


OPERATIONS = {result.ok().label: result.ok() for result in schema.get_all_operations()}


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_no_input_makes_the_server_fail(label: str) -> None:
    """Valid and invalid requests drawn for one operation: none answered with a 500."""
    operation = OPERATIONS[label]
    drawn = st.one_of(
        operation.as_strategy(mode, hooks=schema.hooks)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    )

    @given(case=drawn)
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    def check(case: schemathesis.Case) -> None:
        response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
        case.validate_response(response, checks=[not_a_server_error])

    check()


def _string_places(value: Any, path: tuple) -> Any:
    """Where strings are: (path, "value") for a string, (path, "key") for a dict's key."""
    if isinstance(value, str):
        yield path, "value"
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _string_places(item, (*path, index))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key), "key"
            yield from _string_places(item, (*path, key))


def _poison(body: Any, place: tuple[tuple, str], char: str, data: st.DataObject) -> Any:
    """A copy of ``body`` with ``char`` put into the string at ``place``."""
    path, kind = place
    if not path:
        return _insert(body, char, data)
    body = copy.deepcopy(body)
    parent = body
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if kind == "key":
        parent[_insert(last, char, data)] = parent.pop(last)
    else:
        parent[last] = _insert(parent[last], char, data)
    return body


def _insert(text: str, char: str, data: st.DataObject) -> str:
    at = data.draw(st.integers(0, len(text)))
    return text[:at] + char + text[at:]
