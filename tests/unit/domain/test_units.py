"""Byte quantities and durations as people write them (``domain.units``): parsed the same
whatever the case and spacing, decimal and binary units kept apart, anything else refused with
a message that says how to write it, and formatted back in the shortest exact form."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.units import (
    GiB,
    MiB,
    format_bytes,
    format_duration,
    parse_bytes,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("20GiB", 20 * GiB),
        ("20gib", 20 * GiB),
        (" 20 Gi ", 20 * GiB),
        ("512MiB", 512 * MiB),
        ("512M", 512 * 1000**2),  # decimal, as SI writes it
        ("1.5GB", 1_500_000_000),
        ("1.5GiB", 3 * GiB // 2),
        ("2T", 2 * 1000**4),
        ("1TiB", 1024**4),
        ("4096", 4096),
        ("7b", 7),
        (4096, 4096),
        (1.9, 1),  # a number: whole bytes, rounded down
    ],
)
def test_a_byte_quantity_is_read_in_its_own_unit(text: object, count: int) -> None:
    assert parse_bytes(text) == count


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("20 GiBs", "write it like 20GiB"),
        ("-1GiB", "write it like 20GiB"),
        ("GiB", "write it like 20GiB"),
        ("1e9", "write it like 20GiB"),
        ("", "write it like 20GiB"),
        (-1, "non-negative"),
        (math.nan, "non-negative"),
        (True, "a number or a string"),  # a bool is an int to Python, never a size here
        (None, "a number or a string"),
        ([1], "a number or a string"),
    ],
)
def test_anything_else_is_refused_saying_how_to_write_it(text: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (None, "-"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (80 * GiB, "80 GiB"),
        (5 * 1024**5, "5120 TiB"),  # no unit above TiB
    ],
)
def test_byte_counts_are_shown_in_binary_units(count: int | None, shown: str) -> None:
    assert format_bytes(count) == shown


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("30m", 1800), ("2H", 7200), (" 1d ", 86400), ("1.5h", 5400)],
)
def test_a_duration_is_read_in_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "2w", "-5s", "1h30m", "5 min"])
def test_a_duration_that_is_none_of_these_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="write it like 90, 90s, 30m, 2h or 1d"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(90, "90s"), (7200, "2h"), (5400, "90m"), (86400, "1d"), (0, "0s"), (1.5, "1.5s")],
)
def test_a_duration_is_shown_in_its_largest_exact_unit(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown


@given(st.integers(min_value=0, max_value=10**6 - 1))
def test_a_shown_duration_reads_back_the_same(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.integers(min_value=10**6, max_value=10**9))
def test_a_duration_of_a_million_seconds_and_more_reads_back_the_same(seconds: int) -> None:
    """The web form's duration fields show it and read it back ('g' wrote '1e+06s')."""
    assert parse_duration(format_duration(seconds)) == seconds
