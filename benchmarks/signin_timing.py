"""How long a refused sign-in takes, by what kind of name it was for, against a real server.

Timing must not tell which user names exist: an unknown name, a disabled user and a user with
no password (the first admin) are refused only after a password check as slow as a known
user's wrong password. Baseline in the same run: a known user with a wrong password. The
attempts are interleaved so that a change of load weighs on each kind alike; the throttle is
raised so that every attempt reaches the password check. (The tests check the mechanism, one
scrypt check per sign-in at the same cost, and never the times.)

    .venv/bin/python benchmarks/signin_timing.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import httpx
from harness import client, start_server

PASSWORD = "correct horse battery"
KINDS = {
    "known user, wrong password (baseline)": "ann",
    "unknown user": "nobody",
    "disabled user": "gone",
    "user with no password": "admin",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="attempts per kind (30)")
    runs = parser.parse_args().runs
    env = {"GPUPOOL_SIGNIN_MAX_PER_USER": "100000", "GPUPOOL_SIGNIN_MAX_PER_ADDRESS": "100000"}
    server = start_server(env)
    try:
        with client(server) as api, httpx.Client(base_url=f"{server.url}/api/v1") as anyone:
            prepare(api)
            took = measure(anyone, runs)
    finally:
        server.stop()
    report(took, runs)


def prepare(api: httpx.Client) -> None:
    for name in ("ann", "gone"):
        created = api.post("/users", json={"name": name, "password": PASSWORD})
        created.raise_for_status()
    api.patch("/users/gone", json={"disabled": True}).raise_for_status()


def measure(anyone: httpx.Client, runs: int) -> dict[str, list[float]]:
    took: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(runs):
        for kind, user in KINDS.items():
            start = time.perf_counter()
            answer = anyone.post("/session", json={"user": user, "password": "wrong password"})
            took[kind].append(time.perf_counter() - start)
            assert answer.status_code == 401, answer.text
    return took


def report(took: dict[str, list[float]], runs: int) -> None:
    baseline = statistics.median(next(iter(took.values())))
    print(f"refused sign-in, {runs} attempts per kind, interleaved; x: ratio to the baseline")
    for kind, values in took.items():
        median = statistics.median(values)
        print(f"  {kind:40} median {median * 1000:7.1f} ms  x {median / baseline:4.2f}")


if __name__ == "__main__":
    main()
