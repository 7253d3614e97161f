"""Acceptance: an admin sets users' fair-share weights with the CLI; others cannot."""

from __future__ import annotations

from tests.support.cli import Cli, refused


def weights(admin: Cli) -> dict[str, float]:
    return {user["name"]: user["weight"] for user in admin.json("users")}


def test_weights_are_set_at_creation_and_changed(admin: Cli) -> None:
    admin.ok("users", "create", "wendy", "--team", "default", "--weight", "2")
    admin.ok("users", "create", "walt", "--team", "default")
    assert weights(admin).items() >= {"admin": 1, "wendy": 2, "walt": 1}.items()
    assert "weight of walt is now 0.5" in admin.ok("users", "set-weight", "walt", "0.5")
    assert weights(admin)["walt"] == 0.5
    table = admin.ok("users")
    assert "WEIGHT" in table and "0.5" in table


def test_bad_weights_and_non_admins_are_refused(admin: Cli) -> None:
    admin.ok("users", "create", "wes", "--team", "default")
    zero = admin("users", "set-weight", "wes", "0")
    assert refused(zero, "invalid_weight") and "above 0" in zero.stderr
    assert refused(admin("users", "create", "wil", "--weight", "0"), "invalid_weight")
    for word in ("much", "inf", "nan"):  # no number JSON can carry: a usage error
        assert admin("users", "set-weight", "wes", word).returncode == 2, word
    assert admin("users", "create", "wyn", "--weight", "inf").returncode == 2
    assert refused(admin("users", "set-weight", "nobody", "2"), "not_found")
    secret = admin.ok("tokens", "create", "--user", "wes").strip()
    assert refused(Cli(admin.url, secret)("users", "set-weight", "wes", "9"), "forbidden")
    assert weights(admin)["wes"] == 1
