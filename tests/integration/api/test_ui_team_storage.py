"""The teams page shows each team's storage: what its files take against its quota."""

from __future__ import annotations

import re

import httpx

from tests.support.server import ServerProcess
from tests.support.waiting import wait_for

MIB = 1024**2


def test_the_teams_page_shows_a_teams_storage_and_its_quota(
    ui_server: ServerProcess, admin: tuple[httpx.Client, str]
) -> None:
    client, csrf = admin
    made = client.post(
        "/api/v1/teams",
        json={"name": "storage", "storage": 5 * MIB},
        headers={"x-csrf-token": csrf},
    )
    assert made.status_code == 201, made.text

    def summed() -> str | None:
        page = client.get("/teams").text
        card = re.search(r'data-team="storage">(.*?)</section>', page, re.S).group(1)
        return card if "not summed yet" not in card else None

    card = wait_for(summed, 30, "the team's files to be summed", 0.2)
    assert re.search(r"<dt>Storage</dt><dd>0 B of 5 MiB</dd>", card), card
    assert "over its storage quota" not in card
    default = re.search(r'data-team="default">(.*?)</section>', client.get("/teams").text, re.S)
    assert re.search(r"<dt>Storage</dt><dd>[^<]* \(no quota\)</dd>", default.group(1))
