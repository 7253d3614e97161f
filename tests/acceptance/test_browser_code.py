"""The submit form sends a code snapshot (a .tar.gz chosen in the page): in a real browser
(Debian's chromium, driven by Playwright) on a real server. The job runs in its files and
its page shows the snapshot; a hostile archive is refused at the form's code field."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW, launched
from tests.support.code import archive, packed, regular, special, tree
from tests.support.server import ServerProcess

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect


@pytest.fixture
def page(server: ServerProcess) -> Iterator[object]:
    with launched() as browser:
        context = browser.new_context(base_url=server.url)
        opened = context.new_page()
        errors: list[str] = []
        opened.on("pageerror", lambda error: errors.append(str(error)))
        opened.goto("/login?next=/jobs/new")
        opened.get_by_label("User name").fill("admin")
        opened.get_by_label("Password or API token").fill(server.token)
        opened.get_by_role("button", name="Sign in").click()
        expect(opened).to_have_url(re.compile(r"/jobs/new$"), timeout=SLOW)
        yield opened
        context.close()
        assert not errors, f"JavaScript errors: {errors}"


def test_a_job_submitted_with_a_code_archive_runs_in_it(page, tmp_path: Path) -> None:  # noqa: ANN001
    source = tree(tmp_path / "src", {"hello.txt": "hello from the archive\n", "sub/x": "x"})
    upload = tmp_path / "code.tar.gz"
    upload.write_bytes(packed(source))
    page.get_by_label("Command").fill("sh -c 'cat hello.txt; ls sub'")
    page.get_by_label("GPUs").fill("0")
    page.locator("#code_file").set_input_files(str(upload))
    page.get_by_label("Working directory").fill("/tmp")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#code-error")).to_contain_text("not both")

    page.get_by_label("Working directory").fill("")
    page.get_by_role("button", name="Submit job").click()

    expect(page).to_have_url(re.compile(r"/jobs/\d+$"), timeout=SLOW)
    expect(page.locator("#log")).to_contain_text("hello from the archive\nx", timeout=SLOW)
    expect(page.locator("#status-line")).to_contain_text("succeeded", timeout=SLOW)
    expect(page.locator("#code-snapshot")).to_contain_text("2 files, 24 B")
    expect(page.locator("#code-snapshot")).to_contain_text("sha256:")


def test_a_hostile_archive_is_refused_at_the_code_field(page, tmp_path: Path) -> None:  # noqa: ANN001
    upload = tmp_path / "evil.tar.gz"
    upload.write_bytes(archive(regular("a.py"), special("keys", tarfile.SYMTYPE, "/etc/shadow")))
    page.get_by_label("Command").fill("true")
    page.get_by_label("GPUs").fill("0")
    page.locator("#code_file").set_input_files(str(upload))
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#code-error")).to_contain_text("member 'keys'", timeout=SLOW)
    expect(page.locator("#code-error")).to_contain_text("symbolic link")
    assert page.url.endswith("/jobs/new")
