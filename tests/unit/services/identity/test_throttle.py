"""The sign-in throttle's rules, on the object itself: what refuses whom, and what nobody's
failures can take from anyone else."""

from __future__ import annotations

import pytest

from gpupool.errors import TooManyAttempts, Unauthenticated
from gpupool.services.identity import SignInThrottle

LOCAL = "127.0.0.1"


def throttle(per_user: int = 3, per_address: int = 5) -> SignInThrottle:
    return SignInThrottle(window_seconds=300, max_per_user=per_user, max_per_address=per_address)


def attempt(gate: SignInThrottle, address: str, user: str | None = None, ok: bool = False) -> str:
    """One attempt through ``guard``: "ok", "401" or "429"."""
    try:
        with gate.guard(address, user):
            if not ok:
                raise Unauthenticated()
    except TooManyAttempts:
        return "429"
    except Unauthenticated:
        return "401"
    return "ok"


def test_a_valid_token_is_let_in_from_an_address_that_sent_many_bad_ones() -> None:
    gate = throttle(per_address=5)
    answers = [attempt(gate, LOCAL) for _ in range(40)]
    assert answers == ["401"] * 5 + ["429"] * 35  # the bad client is throttled itself
    assert attempt(gate, LOCAL, ok=True) == "ok"
    assert attempt(gate, LOCAL) == "429"


def test_bad_tokens_hold_back_no_password() -> None:
    gate = throttle(per_address=5)
    for _ in range(40):
        attempt(gate, LOCAL)
    assert attempt(gate, LOCAL, "ann", ok=True) == "ok"
    gate.check(LOCAL, "bob")  # raises nothing


def test_a_password_is_refused_while_its_address_is_throttled_for_the_name() -> None:
    gate = throttle(per_user=3)
    assert [attempt(gate, "10.0.0.1", "ann") for _ in range(3)] == ["401"] * 3
    assert attempt(gate, "10.0.0.1", "ann", ok=True) == "429"  # no oracle
    assert attempt(gate, "10.0.0.2", "ann", ok=True) == "ok"  # its owner, elsewhere


def test_a_name_past_its_limit_refuses_only_the_addresses_that_failed_on_it() -> None:
    gate = throttle(per_user=3, per_address=100)
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        assert attempt(gate, address, "Ann") == "401"
    assert attempt(gate, "10.0.0.1", "ann", ok=True) == "429"  # failed on it: out, right or not
    assert attempt(gate, "10.0.0.4", "ann", ok=True) == "ok"  # did not fail: the owner gets in
    assert attempt(gate, "10.0.0.5", "ann") == "401"  # a fresh guesser: one guess...
    assert attempt(gate, "10.0.0.5", "ann", ok=True) == "429"  # ...and it is out


def test_an_address_spraying_names_is_refused_for_names_new_to_it() -> None:
    gate = throttle(per_user=100, per_address=3)
    assert attempt(gate, LOCAL, "ann", ok=True) == "ok"
    for name in ("root", "alice", "carol"):
        assert attempt(gate, LOCAL, name) == "401"
    assert attempt(gate, LOCAL, "bob", ok=True) == "429"  # no oracle for a sprayed name
    assert attempt(gate, LOCAL, "ANN", ok=True) == "ok"  # signed in from here before
    assert attempt(gate, "10.0.0.2", "bob", ok=True) == "ok"


def test_a_name_that_signed_in_from_an_address_is_still_held_to_its_own_limit() -> None:
    gate = throttle(per_user=3, per_address=3)
    assert attempt(gate, LOCAL, "ann", ok=True) == "ok"
    assert [attempt(gate, LOCAL, "ann") for _ in range(4)] == ["401"] * 3 + ["429"]
    assert attempt(gate, LOCAL, "ann", ok=True) == "429"


def test_a_refusal_says_how_long_to_wait() -> None:
    gate = throttle(per_user=1)
    attempt(gate, LOCAL, "ann")
    with pytest.raises(TooManyAttempts) as refused:
        gate.check(LOCAL, "ann")
    assert 1 <= refused.value.retry_after <= 300
