"""The web UI in a real browser (Debian's chromium, driven by Playwright) on a real server."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW, sign_in
from tests.support.server import ServerProcess
from tests.support.workloads import ANNOUNCEMENT, FIRST, SECOND, TWO_ATTEMPTS

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
SHOTS = Path("/tmp")


def api_submit(server: ServerProcess, **spec: object) -> int:
    body = {"command": ["sleep", "300"]} | spec
    headers = {"Authorization": f"Bearer {server.token}"}
    answer = httpx.post(f"{server.url}/api/v1/jobs", json=body, headers=headers, timeout=10)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def test_sign_in_shows_the_servers_error_then_signs_in(page, server: ServerProcess) -> None:  # noqa: ANN001
    page.goto("/jobs")
    expect(page).to_have_url(re.compile(r"/login\?next=/jobs$"))
    page.screenshot(path=str(SHOTS / "ui-login.png"), full_page=True)
    page.get_by_label("User name").fill("admin")
    page.get_by_label("Password or API token").fill("wrong-password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#login-error")).to_contain_text("wrong user name or password")
    page.get_by_label("Password or API token").fill(server.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{server.url}/jobs", timeout=SLOW)
    expect(page.locator("#who")).to_contain_text("admin")
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/login"), timeout=SLOW)
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login\?next=/$"))


def test_a_job_submitted_in_the_form_streams_its_output_live(page, server: ServerProcess) -> None:  # noqa: ANN001
    program = (
        "import time; print('first line', flush=True); time.sleep(2); "
        "print('second line', flush=True)"
    )
    sign_in(page, server, "/jobs/new")
    page.get_by_label("Command").fill(f'{shlex.quote(sys.executable)} -c "{program}"')
    expect(page.locator("#command-preview")).to_contain_text(program)
    page.get_by_label("Name").fill("two-lines")
    page.get_by_label("GPUs").fill("0.5")
    page.get_by_label("GPU memory").fill("10GiB")
    page.get_by_label("Environment variables").fill("GREETING=hello\n# a comment\n")
    page.screenshot(path=str(SHOTS / "ui-new.png"), full_page=True)
    page.get_by_role("button", name="Submit job").click()

    expect(page).to_have_url(re.compile(r"/jobs/\d+$"), timeout=SLOW)
    expect(page.get_by_role("heading", level=1)).to_contain_text("two-lines")
    log = page.locator("#log")
    expect(log).to_contain_text("first line", timeout=SLOW)
    # the job sleeps between its lines: seeing the first without the second is seeing it live
    assert "second line" not in log.text_content()
    expect(page.locator("#status-line")).not_to_contain_text("succeeded")

    expect(log).to_contain_text("second line", timeout=SLOW)
    expect(page.locator("#status-line")).to_contain_text("succeeded", timeout=SLOW)
    expect(page.locator("#log-state")).to_contain_text("End of output", timeout=SLOW)
    expect(page.locator("#events")).to_contain_text("Exited", timeout=SLOW)
    expect(page.locator("#attempts")).to_contain_text("1")
    expect(page.locator("#cancel")).to_be_hidden()
    page.screenshot(path=str(SHOTS / "ui-job.png"), full_page=True)


def test_the_form_sends_a_gpu_type_and_a_max_runtime(page, server: ServerProcess) -> None:  # noqa: ANN001
    sign_in(page, server, "/jobs/new")
    page.get_by_label("Command").fill("true")
    page.get_by_label("GPUs").fill("1")  # a GPU type picks among the GPUs asked for
    page.get_by_label("GPU type").fill("A100-SXM4-80GB")
    page.get_by_label("Max runtime").fill("2x")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#max_runtime-error")).to_contain_text("not a duration")
    page.get_by_label("Max runtime").fill("2h")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"), timeout=SLOW)
    job_id = page.url.rsplit("/", 1)[1]
    headers = {"Authorization": f"Bearer {server.token}"}
    spec = httpx.get(f"{server.url}/api/v1/jobs/{job_id}", headers=headers).json()["spec"]
    assert (spec["gpu_types"], spec["max_runtime_seconds"], spec["preemptible"]) == (
        ["A100-SXM4-80GB"],
        7200,
        True,
    )


def test_the_form_shows_the_servers_errors_inline(page, server: ServerProcess) -> None:  # noqa: ANN001
    sign_in(page, server, "/jobs/new")
    page.get_by_label("Command").fill("echo hi | wc")
    expect(page.locator("#command-error")).to_contain_text("shell operator")
    page.get_by_label("Command").fill("true")
    page.get_by_label("GPUs").fill("1.5")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#gpus-error")).to_contain_text("fraction of a GPU")
    expect(page.locator("#form-error")).to_contain_text("resources.gpus")
    expect(page.get_by_label("GPUs")).to_have_attribute("aria-invalid", "true")
    page.get_by_label("GPUs").fill("64")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#form-error")).to_contain_text("no node can run this job")
    expect(page.locator("#gpus-error")).to_be_hidden()
    page.get_by_label("GPUs").fill("1")
    page.get_by_label("Environment variables").fill("not a pair")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#env-error")).to_contain_text("NAME=value")


def test_the_command_is_split_like_a_shell_would(page, server: ServerProcess) -> None:  # noqa: ANN001
    sign_in(page, server, "/jobs/new")
    cases = {
        "python train.py --lr 0.1": ["python", "train.py", "--lr", "0.1"],
        '  a   \'b c\'  "d \\"e\\" $ f"  ': ["a", "b c", 'd "e" $ f'],
        "echo 'it'\\''s' x\\ y \"\"": ["echo", "it's", "x y", ""],
        "find . -exec rm {} \\;": ["find", ".", "-exec", "rm", "{}", ";"],
        "sh -c 'echo $HOME | wc -c'": ["sh", "-c", "echo $HOME | wc -c"],
        "a#b 'x#'": ["a#b", "x#"],
        "": [],
    }
    page.wait_for_function("() => typeof splitCommand === 'function'")  # submit.js is deferred
    for line, argv in cases.items():
        assert page.evaluate("line => splitCommand(line)", line) == argv, line
    for line, message in {
        "echo 'open": "not closed",
        'echo "open': "not closed",
        "echo hi > out": "shell operator",
        "a && b": "shell operator",
        "echo $HOME": "not expanded",
        'echo "$HOME"': "expanded by a shell",
        "echo `date`": "command substitution",
        "run # note": "comment",
        "trailing \\": "backslash",
    }.items():
        thrown = page.evaluate(
            "line => { try { splitCommand(line); return null } catch (e) { return e.message } }",
            line,
        )
        assert thrown and message in thrown, (line, thrown)


def test_the_cluster_page_shows_four_gpus_and_refreshes(page, server: ServerProcess) -> None:  # noqa: ANN001
    sign_in(page, server, "/")
    expect(page.locator("li.gpu")).to_have_count(4)
    expect(page.locator("#summary")).to_contain_text("4 GPUs")
    expect(page.locator("li.gpu").first).to_contain_text("A100-SXM4-80GB")
    expect(page.locator("li.gpu").first).to_contain_text("80 GiB")
    expect(page.locator(".node .facts")).to_contain_text("64")
    job = api_submit(server, name="holder", resources={"gpus": 0.5, "gpu_memory_bytes": "20GiB"})
    holder = page.locator(".holders a", has_text=f"#{job}")
    expect(holder).to_be_visible(timeout=SLOW)  # the page polls /api/v1/nodes every 2 s
    expect(page.locator("#summary")).to_contain_text("0.5 in use")
    expect(page.locator(".bar[aria-valuenow='50']")).to_have_count(1)
    page.screenshot(path=str(SHOTS / "ui-cluster.png"), full_page=True)
    holder.click()
    expect(page).to_have_url(f"{server.url}/jobs/{job}")


def test_a_job_is_cancelled_through_the_ui(page, server: ServerProcess) -> None:  # noqa: ANN001
    sign_in(page, server, "/jobs")
    job = api_submit(server, name="to-cancel")
    row = page.locator(f"tr[data-id='{job}']")
    expect(row).to_contain_text("to-cancel", timeout=SLOW)  # the table polls every 2 s
    expect(row).to_contain_text("running", timeout=SLOW)
    page.get_by_label("Show").select_option("ended")
    expect(row).to_have_count(0, timeout=SLOW)
    page.get_by_label("Show").select_option("active")
    expect(row).to_contain_text("running", timeout=SLOW)
    page.screenshot(path=str(SHOTS / "ui-jobs.png"), full_page=True)

    row.get_by_role("link", name=f"#{job}").click()
    expect(page).to_have_url(f"{server.url}/jobs/{job}")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel job").click()
    expect(page.locator("#status-line")).to_contain_text("cancelled", timeout=SLOW)
    expect(page.locator("#events")).to_contain_text("CancelRequested", timeout=SLOW)
    expect(page.get_by_role("button", name="Cancel job")).to_be_hidden()

    page.goto("/jobs?show=ended")
    expect(page.locator(f"tr[data-id='{job}']")).to_contain_text("cancelled")
    page.goto("/jobs/999999")
    expect(page.get_by_role("heading", level=1)).to_contain_text("No job 999999")
    page.screenshot(path=str(SHOTS / "ui-404.png"), full_page=True)


def test_a_job_being_stopped_shows_stopping_as_the_pages_refresh(
    page,  # noqa: ANN001
    server: ServerProcess,
) -> None:
    """It ignores SIGTERM, so it runs on for its grace period after the cancel; the pages'
    own refresh (JavaScript) shows it stopping."""
    script = "trap '' TERM; while :; do sleep 0.1; done"
    job = api_submit(server, command=["sh", "-c", script], grace_period_seconds=30)
    sign_in(page, server, f"/jobs/{job}")
    expect(page.locator("#status-line")).to_contain_text("running", timeout=SLOW)
    headers = {"Authorization": f"Bearer {server.token}"}
    cancel = httpx.post(f"{server.url}/api/v1/jobs/{job}/cancel", headers=headers, timeout=10)
    assert cancel.status_code == 200, cancel.text
    expect(page.locator("#status-line .status-stopping")).to_have_text("stopping", timeout=SLOW)
    page.goto("/jobs")
    row = page.locator(f"tr[data-id='{job}']")
    expect(row.locator(".status-stopping")).to_have_text("stopping", timeout=SLOW)


# A tqdm-like bar redrawn with carriage returns, SGR colours, other escapes, and markup
TERMINAL_OUTPUT = r"""
import sys
sys.stdout.write("epoch 1\n")
for done in range(0, 11, 2):
    sys.stdout.write(f"\rprogress {done * 10:3d}%|" + "#" * done + " " * (10 - done) + "|")
    sys.stdout.flush()
sys.stdout.write("\n\x1b[31mred\x1b[0m and \x1b[1mbold\x1b[0m\r\n")
sys.stdout.write("<script>window.pwned = 1</script><img src=x onerror='window.pwned = 2'>\n")
sys.stdout.write("\x1b[2K\x1b]0;a title\x07\x1b[?25ldone\n")
"""


def test_the_log_shows_progress_bars_and_colours_as_a_terminal_would(
    page,  # noqa: ANN001
    server: ServerProcess,
) -> None:
    job = api_submit(server, command=[sys.executable, "-c", TERMINAL_OUTPUT])
    sign_in(page, server, f"/jobs/{job}")
    log = page.locator("#log")
    expect(page.locator("#log-state")).to_contain_text("End of output", timeout=SLOW)
    assert log.text_content() == (
        "epoch 1\n"
        "progress 100%|##########|\n"
        "red and bold\n"
        "<script>window.pwned = 1</script><img src=x onerror='window.pwned = 2'>\n"
        "done\n"
    )
    red = log.locator("span.ansi-red")
    expect(red).to_have_text("red")
    plain = log.evaluate("pre => getComputedStyle(pre).color")
    assert red.evaluate("span => getComputedStyle(span).color") != plain
    expect(log.locator("span.ansi-bold")).to_have_text("bold")
    assert log.locator("span.ansi-bold").evaluate("s => getComputedStyle(s).fontWeight") == "700"
    expect(log.locator("script, img")).to_have_count(0)  # job output stays text
    assert page.evaluate("() => window.pwned") is None
    page.screenshot(path=str(SHOTS / "ui-log-terminal.png"), full_page=True)


def test_the_job_page_follows_a_new_attempt_and_can_show_an_earlier_one(
    page,  # noqa: ANN001
    server: ServerProcess,
) -> None:
    headers = {"Authorization": f"Bearer {server.token}"}
    owners = {"name": "owners", "guarantee": {"*": 4}}
    made = httpx.post(f"{server.url}/api/v1/teams", json=owners, headers=headers, timeout=10)
    assert made.status_code == 201, made.text
    command = [sys.executable, "-c", TWO_ATTEMPTS]
    victim = api_submit(server, command=command, resources={"gpus": 4}, grace_period_seconds=30)
    sign_in(page, server, f"/jobs/{victim}")
    log, state = page.locator("#log"), page.locator("#log-state")
    expect(log).to_contain_text("attempt 1 says line 5", timeout=SLOW)
    choice = page.locator("#log-attempt")
    expect(choice).to_be_hidden()  # one attempt: nothing to choose

    # the owners take their GPUs back: the job is preempted and runs again; the page follows
    api_submit(server, command=["true"], team="owners", resources={"gpus": 1})
    expect(log).to_contain_text(ANNOUNCEMENT, timeout=SLOW)
    expect(log).to_contain_text("attempt 2 says line 12", timeout=SLOW)
    expect(state).to_contain_text("End of output", timeout=SLOW)
    shown = log.text_content()
    assert shown.index("attempt 1 got SIGTERM") < shown.index(ANNOUNCEMENT), shown
    assert shown.endswith(ANNOUNCEMENT + "\n" + SECOND), shown
    page.screenshot(path=str(SHOTS / "ui-job-attempts.png"), full_page=True)

    expect(choice).to_be_visible(timeout=SLOW)
    page.get_by_label("Attempt", exact=True).select_option("1")
    expect(state).to_contain_text("End of attempt 1's output", timeout=SLOW)
    expect(log).to_contain_text("attempt 1 got SIGTERM")
    assert log.text_content().startswith(FIRST)
    expect(log).not_to_contain_text("attempt 2")

    page.reload()  # a new visit shows the newest attempt, announced
    expect(state).to_contain_text("End of output", timeout=SLOW)
    assert log.text_content() == ANNOUNCEMENT + "\n" + SECOND
    assert page.get_by_label("Attempt", exact=True).input_value() == "latest"


def test_the_queue_explains_waiting_jobs_and_the_teams_page_draws_charts(
    page,  # noqa: ANN001
    server: ServerProcess,
) -> None:
    sign_in(page, server, "/queue")
    expect(page.get_by_role("heading", name="No job is waiting")).to_be_visible()

    holder = api_submit(server, name="holder", resources={"gpus": 4}, max_runtime_seconds=3600)
    waiting = api_submit(server, name="waiter", resources={"gpus": 2}, max_runtime_seconds=600)
    row = page.locator(f"tr[data-id='{waiting}']")
    expect(row).to_contain_text("InsufficientGpus", timeout=SLOW)  # the page polls every 5 s
    expect(row.locator("td.position")).to_have_text("#1", timeout=SLOW)
    expect(row).to_contain_text("about", timeout=SLOW)
    expect(page.locator(f"tr[data-id='{holder}']")).to_have_count(0)
    expect(page.locator("#queue-summary")).to_contain_text("1 job waiting in 1 team")
    page.get_by_text("How start times are estimated").click()
    expect(page.locator("#assumptions")).to_contain_text("no new job is submitted")
    page.screenshot(path=str(SHOTS / "ui-queue.png"), full_page=True)

    row.get_by_role("link", name=f"#{waiting}").click()
    expect(page).to_have_url(f"{server.url}/jobs/{waiting}")
    why = page.locator("#why")
    expect(why).to_be_visible()
    expect(why).to_contain_text("Why is it waiting?")
    expect(page.locator("#why-eta")).to_contain_text("about", timeout=SLOW)
    expect(page.locator("#why-position")).to_contain_text("#1 in team default's queue")
    page.screenshot(path=str(SHOTS / "ui-why.png"), full_page=True)

    headers = {"Authorization": f"Bearer {server.token}"}
    quota = {"guarantee": {"*": 2}}
    answer = httpx.put(
        f"{server.url}/api/v1/teams/default/quota", json=quota, headers=headers, timeout=10
    )
    assert answer.status_code == 200, answer.text
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Teams").click()
    expect(page).to_have_url(f"{server.url}/teams")
    team = page.locator("section.team[data-team='default']")
    expect(team).to_contain_text("In use now")
    chart = team.locator("svg.team-chart")
    expect(chart).to_be_visible()
    box = chart.bounding_box()
    assert box["width"] > 300 and box["height"] > 100, box
    held = chart.locator("polyline.series-held")
    assert len(held.get_attribute("points").split()) == 49, "48 periods and now"
    assert held.evaluate("line => line.getTotalLength()") > 100, "the line is drawn"
    stroke = held.evaluate("line => getComputedStyle(line).stroke")
    assert stroke not in ("none", ""), "the stylesheet colours the line"
    guarantee = chart.locator("polyline.series-guarantee")
    assert len(guarantee.get_attribute("points").split()) == 2 * 48 + 1, "a step per period"
    assert guarantee.evaluate("line => getComputedStyle(line).fill") == "none"
    expect(page.locator(".legend")).to_contain_text("Fair share")
    page.get_by_label("Period").select_option("6")
    page.get_by_role("button", name="Show").click()
    expect(page).to_have_url(f"{server.url}/teams?hours=6")
    expect(page.get_by_label("Period")).to_have_value("6")
    page.screenshot(path=str(SHOTS / "ui-teams.png"), full_page=True)


def test_the_cluster_page_shows_another_teams_job_without_its_name(
    page,  # noqa: ANN001
    server: ServerProcess,
) -> None:
    admin = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=f"{server.url}/api/v1", headers=admin, timeout=10) as api:
        for team in ("team-a", "team-b"):
            assert api.post("/teams", json={"name": team}).status_code == 201
        made = api.post("/users", json={"name": "bob", "teams": ["team-b"]})
        assert made.status_code == 201, made.text
        token = api.post("/tokens", json={"user": "bob", "name": "ui"}).json()["token"]
    page.goto("/login?next=/")
    page.get_by_label("User name").fill("bob")
    page.get_by_label("Password or API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{server.url}/", timeout=SLOW)

    job = api_submit(server, name="secret-run", team="team-a", resources={"gpus": 0.5})
    other = page.locator(".holders li.other-team")
    expect(other).to_have_text("another team's job · 0.5 GPU, 40 GiB", timeout=SLOW)  # polled
    expect(page.locator("#summary")).to_contain_text("0.5 in use")
    for drawn_by in ("the script", "the server"):
        if drawn_by == "the server":
            page.reload()
        shown = page.locator("#nodes")
        expect(shown.locator(".holders li.other-team")).to_have_count(1)
        expect(shown.locator(".holders a")).to_have_count(0)
        expect(shown).not_to_contain_text("secret-run")
        expect(shown).not_to_contain_text(f"#{job}")
        expect(shown).not_to_contain_text("admin")
    page.screenshot(path=str(SHOTS / "ui-cluster-other-team.png"), full_page=True)
