"""A trace named on a command line: ``philly:PATH?...``, ``alibaba:PODS?...``, ``csv:PATH`` or
a bare path whose header chooses the format."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qs

from gpupool.sim.traces._common import Trace, as_utc
from gpupool.sim.traces.alibaba import load_alibaba
from gpupool.sim.traces.generic import GENERIC_REQUIRED, load_generic
from gpupool.sim.traces.philly import load_philly

FORMATS = ("philly", "alibaba", "csv")
_PHILLY_KEYS = {"teams", "start", "end", "limit"}
_ALIBABA_KEYS = {"nodes"}


def load_trace(spec: str) -> Trace:
    """Load a trace named on a command line.

    ``philly:PATH[?teams=a,b&start=2017-10-01&end=2017-11-01&limit=N]``,
    ``alibaba:PODS[?nodes=NODES]``, ``csv:PATH``, or a bare path whose header chooses the
    format. ValueError for an unknown format, a missing file, unknown options or bad rows.
    """
    prefix, colon, rest = spec.partition(":")
    if not colon or Path(spec).is_file():
        return _load_by_header(spec)
    if prefix not in FORMATS:
        raise ValueError(
            f"unknown trace format '{prefix}' in '{spec}': use philly:PATH, alibaba:PODS, "
            "csv:PATH or a bare path"
        )
    path, _, query = rest.partition("?")
    if not path:
        raise ValueError(f"'{spec}' names no file after '{prefix}:'")
    options = _options(query, spec)
    if prefix == "philly":
        _only(options, _PHILLY_KEYS, spec)
        return load_philly(
            path,
            teams=options["teams"].split(",") if "teams" in options else None,
            start=_date_option(options, "start", spec),
            end=_date_option(options, "end", spec),
            limit=_limit_option(options, spec),
        )
    if prefix == "alibaba":
        _only(options, _ALIBABA_KEYS, spec)
        return load_alibaba(path, options.get("nodes"))
    _only(options, set(), spec)
    return load_generic(path)


def _load_by_header(path: str) -> Trace:
    """Choose the loader from the header line of a bare path."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"trace file {path} does not exist")
    with file.open(newline="", encoding="utf-8") as handle:
        header = {name.strip() for name in next(csv.reader(handle), [])}
    if {"timestamp", "num_gpus", "cluster"} <= header:
        return load_philly(file)
    if {"cpu_milli", "num_gpu", "gpu_milli"} <= header:
        return load_alibaba(file)
    if {"sn", "gpu", "model"} <= header:
        raise ValueError(f"{path} is an Alibaba node list: use alibaba:PODS?nodes={path}")
    if set(GENERIC_REQUIRED) <= header:
        return load_generic(file)
    raise ValueError(
        f"cannot tell the trace format of {path} from its header ({','.join(sorted(header))}): "
        "prefix it with philly:, alibaba: or csv:"
    )


def _options(query: str, spec: str) -> dict[str, str]:
    try:
        parsed = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError(f"'{spec}': options must look like ?key=value&key=value") from None
    repeated = [key for key, values in parsed.items() if len(values) > 1]
    if repeated:
        raise ValueError(f"'{spec}': option(s) {', '.join(repeated)} given more than once")
    return {key: values[0] for key, values in parsed.items()}


def _only(options: Mapping[str, str], allowed: set[str], spec: str) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise ValueError(f"'{spec}': unknown option(s) {', '.join(unknown)} (known: {known})")


def _date_option(options: Mapping[str, str], key: str, spec: str) -> datetime | None:
    if key not in options:
        return None
    try:
        return as_utc(options[key])
    except ValueError:
        raise ValueError(
            f"'{spec}': {key}={options[key]} is not a date (2017-10-01 or 2017-10-01T12:00:00)"
        ) from None


def _limit_option(options: Mapping[str, str], spec: str) -> int | None:
    if "limit" not in options:
        return None
    text = options["limit"]
    if not text.isdigit():
        raise ValueError(f"'{spec}': limit={text} is not a whole number of jobs")
    return int(text)
