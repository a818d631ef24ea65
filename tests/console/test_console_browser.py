"""The console in a real browser (headless Chromium driven by Selenium), over a log a runtime in
the same test feeds: the ledger moves while a stream arrives, an operator stops a tenant, a
viewer's control is refused, a hostile id stays text. Screenshots of the pages are kept in
build/test-artefacts/console.

Under ``CI=true`` a missing browser fails these tests instead of skipping them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from console_support import (
    HOSTILE_CALL,
    OPERATOR_TOKEN,
    SECRET,
    VIEWER_TOKEN,
    ConsoleLab,
    finished,
    key,
    opened,
    response_ended,
)
from locations import ROOT, TESTS
from postgres_support import fresh_schema, log_url

from inert import Phase
from inert.events._identity import key_part

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTEFACTS = ROOT / "build" / "test-artefacts" / "console"
WAIT = 10.0

if not (Path(CHROMIUM).is_file() and Path(CHROMEDRIVER).is_file()):
    message = (
        "headless Chromium and chromedriver are needed (apt-get install chromium chromium-driver)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)

# Selenium must use the system's browser and driver and fetch nothing.
os.environ.setdefault("SE_OFFLINE", "true")

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import (  # noqa: E402
    NoAlertPresentException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.slow(seconds=12)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleLab]:
    with ConsoleLab(tmp_path_factory.mktemp("console")) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def _sign_in(browser: WebDriver, lab: ConsoleLab, token: str, path: str = "/") -> None:
    browser.delete_all_cookies()
    browser.get(f"{lab.url}{path}?token={token}")
    assert "token=" not in browser.current_url


def _until(browser: WebDriver, condition: Callable[[], bool], what: str) -> None:
    # A page being replaced (a form posted, a row redrawn) makes the browser refuse to read an
    # element of the document it leaves, in more words than the stale-element error: looked at
    # again until the wait runs out, as a person would.
    ignored = (WebDriverException,)
    WebDriverWait(browser, WAIT, ignored_exceptions=ignored).until(lambda _: condition(), what)


def _text(browser: WebDriver) -> str:
    return browser.find_element(By.TAG_NAME, "body").text


def _shot(browser: WebDriver, name: str) -> None:
    browser.save_screenshot(str(ARTEFACTS / f"{name}.png"))


def test_the_ledger_moves_while_a_stream_arrives(lab: ConsoleLab, browser: WebDriver) -> None:
    """Rows appear and change on the open page, pushed by server-sent events, as the runtime
    takes a stream in; the page is never reloaded."""
    lab.feed(opened(key("call_a")) + opened(key("call_b")), start_turn=("acme", "t1"))
    _sign_in(browser, lab, OPERATOR_TOKEN)
    _until(browser, lambda: browser.find_element(By.ID, "live").text == "live", "live feed")
    browser.execute_script("window.drawnOnce = true")
    lab.feed(opened(key("call_c", turn="t2", response="resp_2")), start_turn=("acme", "t2"))
    row = 'tr[data-stage] td[data-col="call"]'
    _until(
        browser,
        lambda: "call_c" in [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, row)],
        "the new call's row",
    )
    done = key("call_c", turn="t2", response="resp_2")
    lab.feed(finished(done) + response_ended(done))
    _until(
        browser,
        lambda: (
            browser.find_element(By.CSS_SELECTOR, "tbody tr").get_attribute("data-stage")
            != "assembling"
        ),
        "the call's stage changing",
    )
    _until(browser, lambda: browser.find_element(By.ID, "total").text == "3", "the count")
    assert browser.find_element(By.ID, "range-last").text == "3"
    assert browser.execute_script("return window.drawnOnce") is True
    assert SECRET not in browser.page_source
    _shot(browser, "ledger")


def test_an_operator_stops_a_tenant_and_sees_what_it_ended(
    lab: ConsoleLab, browser: WebDriver
) -> None:
    """Stop the tenant with a reason, confirm, and the page shows the calls it cancelled and
    the audit row; the runtime's calls are cancelled."""
    lab.feed(opened(key("call_s", tenant="globex")), start_turn=("globex", "t1"))
    _sign_in(browser, lab, OPERATOR_TOKEN, "/controls")
    browser.find_element(By.CSS_SELECTOR, '#action option[value="stop-tenant"]').click()
    browser.find_element(By.ID, "target").send_keys("globex")
    browser.find_element(By.ID, "reason").send_keys("incident 42: runaway tool calls")
    browser.find_element(By.ID, "give").click()
    _until(browser, lambda: "Emergency stop of tenant" in _text(browser), "the confirmation")
    _shot(browser, "stop-confirmation")
    browser.find_element(By.ID, "confirm-stop").click()
    _until(browser, lambda: "Calls it ended (1)" in _text(browser), "the calls it ended")
    page = _text(browser)
    assert "incident 42: runaway tool calls" in page
    assert "cancelled" in page
    _shot(browser, "control")
    assert lab.phase(key("call_s", tenant="globex")) is Phase.CANCELLED
    browser.get(f"{lab.url}/audit")
    assert "incident 42: runaway tool calls" in _text(browser)
    _shot(browser, "audit")
    for name, path in [("waiting", "/waiting"), ("overview", "/overview")]:
        browser.get(f"{lab.url}{path}")
        _shot(browser, name)
    browser.get(f"{lab.url}/?tenant=globex")
    browser.find_element(By.CSS_SELECTOR, 'td[data-col="call"] a').click()
    assert "tenant_stopped" in _text(browser)
    _shot(browser, "call")


def test_a_viewers_control_is_refused(lab: ConsoleLab, browser: WebDriver) -> None:
    """A principal that is no operator is told so, nothing stops, and the audit shows the
    attempt refused."""
    lab.feed(opened(key("call_v", tenant="initech")), start_turn=("initech", "t1"))
    _sign_in(browser, lab, VIEWER_TOKEN, "/controls")
    assert "are no operator here" in _text(browser)
    browser.find_element(By.CSS_SELECTOR, '#action option[value="disable-tool"]').click()
    browser.find_element(By.ID, "target").send_keys("get_weather")
    browser.find_element(By.ID, "reason").send_keys("just looking")
    browser.find_element(By.ID, "give").click()
    _until(browser, lambda: "is not an operator" in _text(browser), "the refusal")
    assert lab.phase(key("call_v", tenant="initech")) is Phase.COLLECTING
    browser.get(f"{lab.url}/audit")
    _until(browser, lambda: "✗ refused" in _text(browser), "the refusal in the audit")
    assert "just looking" in _text(browser)


def test_a_hostile_provider_id_renders_as_text(lab: ConsoleLab, browser: WebDriver) -> None:
    """A call id that is markup arrives by the live feed and after a reload as the text
    ``inert ledger`` shows (percent-encoded), and runs nothing."""
    _sign_in(browser, lab, OPERATOR_TOKEN)
    _until(browser, lambda: browser.find_element(By.ID, "live").text == "live", "live feed")
    lab.feed(
        opened(key(HOSTILE_CALL, tenant="acme", turn="t3", response="resp_3")),
        start_turn=("acme", "t3"),
    )
    cells = 'td[data-col="call"]'
    shown = key_part(HOSTILE_CALL)
    _until(
        browser,
        lambda: shown in [c.text for c in browser.find_elements(By.CSS_SELECTOR, cells)],
        "the hostile id as text",
    )
    browser.refresh()
    assert shown in [c.text for c in browser.find_elements(By.CSS_SELECTOR, cells)]
    assert not browser.find_elements(By.CSS_SELECTOR, "tbody script, tbody img")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.dismiss()


def test_an_id_with_a_bidirectional_override_reads_as_its_bytes(
    lab: ConsoleLab, browser: WebDriver
) -> None:
    """Ids holding U+202E (which would draw ``call_exe.png`` for ``call_\\u202egnp.exe``) read
    escaped in the live feed's row, after a reload, on the call's page and in the emergency
    stop's question, where an operator decides."""
    tenant, call = "umbrella\u202e", "call_\u202egnp.exe"
    _sign_in(browser, lab, OPERATOR_TOKEN)
    _until(browser, lambda: browser.find_element(By.ID, "live").text == "live", "live feed")
    lab.feed(
        opened(key(call, tenant=tenant, turn="t9", response="resp_9")), start_turn=(tenant, "t9")
    )
    row = 'tr[data-stage] td[data-col="call"]'
    _until(
        browser,
        lambda: (
            "call_%E2%80%AEgnp.exe" in [c.text for c in browser.find_elements(By.CSS_SELECTOR, row)]
        ),
        "the live row, escaped",
    )
    assert "umbrella%E2%80%AE" in [
        c.text for c in browser.find_elements(By.CSS_SELECTOR, 'td[data-col="tenant"]')
    ]
    browser.refresh()
    link = next(
        a
        for a in browser.find_elements(By.CSS_SELECTOR, 'td[data-col="call"] a')
        if a.text == "call_%E2%80%AEgnp.exe"
    )
    link.click()
    _until(browser, lambda: "Call call_%E2%80%AEgnp.exe" in _text(browser), "the call's page")
    assert "\u202e" not in _text(browser)
    browser.find_element(By.LINK_TEXT, "Stop its tenant…").click()
    assert browser.find_element(By.ID, "target").get_attribute("value") == "umbrella%E2%80%AE"
    browser.find_element(By.ID, "reason").send_keys("checking what it reads")
    browser.find_element(By.ID, "give").click()
    _until(browser, lambda: "Emergency stop of tenant" in _text(browser), "the question")
    assert "Emergency stop of tenant umbrella%E2%80%AE?" in _text(browser)
    assert browser.find_element(By.ID, "confirm-stop").text == "Stop tenant umbrella%E2%80%AE"
    assert "1 call is live now" in _text(browser)
    _shot(browser, "escaped-ids")
    assert lab.phase(key(call, tenant=tenant, turn="t9", response="resp_9")) is Phase.COLLECTING


def test_the_waiting_page_moves_and_times_switch_to_local(
    lab: ConsoleLab, browser: WebDriver
) -> None:
    """A call that starts waiting appears on the open waiting page with whose confirmation it
    awaits and until when; the header's switch shows every time in the browser's time zone,
    and the choice holds after a reload; without it they read in UTC."""
    _sign_in(browser, lab, OPERATOR_TOKEN, "/waiting")
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})
    _until(browser, lambda: browser.find_element(By.ID, "live-waiting").text == "live", "live")
    browser.execute_script("window.drawnOnce = true")
    mail = key("mail_w", tenant="hooli", turn="t1", response="resp_w")
    lab.feed(
        opened(mail, tool="send_email") + finished(mail) + response_ended(mail),
        start_turn=("hooli", "t1"),
    )
    _until(browser, lambda: "mail_w" in _text(browser), "the waiting call, drawn again")
    assert browser.execute_script("return window.drawnOnce") is True
    assert "user:alice" in _text(browser)
    expiry = browser.find_element(By.CSS_SELECTOR, "#sections time")
    utc = expiry.get_attribute("datetime")
    assert utc is not None
    assert expiry.text == utc
    assert utc.endswith("Z")
    switch = browser.find_element(By.ID, "time-zone")
    assert switch.text == "times in UTC"
    switch.click()
    assert switch.text == "times in local time, UTC+05:30"
    assert browser.find_element(By.CSS_SELECTOR, "#sections time").text.endswith("+05:30")
    _shot(browser, "waiting-local-times")
    browser.refresh()
    _until(browser, lambda: "+05:30" in _text(browser), "the choice kept")
    browser.find_element(By.ID, "time-zone").click()
    assert browser.find_element(By.CSS_SELECTOR, "#sections time").text == utc


def test_ids_are_never_broken(lab: ConsoleLab, browser: WebDriver) -> None:
    """Long ids, with separators and without, each read on one line in the ledger and on a
    call's page, however narrow the window: a wide table scrolls in its own box."""
    call = "call_" + "-".join(["segment"] * 12) + "_" + "x" * 80
    tenant = "tenant.with.a.rather.long.name-" + "y" * 40
    lab.feed(
        opened(key(call, tenant=tenant, turn="t1", response="resp_long")),
        start_turn=(tenant, "t1"),
    )
    browser.set_window_size(900, 900)
    try:
        _sign_in(browser, lab, OPERATOR_TOKEN, "/")
        row = 'td[data-col="call"] a'
        _until(
            browser,
            lambda: (
                key_part(call)
                in [
                    a.get_attribute("textContent")
                    for a in browser.find_elements(By.CSS_SELECTOR, row)
                ]
            ),
            "the call's row",
        )
        lines = "return arguments[0].getClientRects().length"
        for cell in ('td[data-col="call"] a', 'td[data-col="tenant"]'):
            shown = [
                element
                for element in browser.find_elements(By.CSS_SELECTOR, cell)
                # A cell scrolled out of its box has no visible text: its content is read.
                if element.get_attribute("textContent") in (key_part(call), key_part(tenant))
            ]
            assert shown, cell
            for element in shown:
                assert browser.execute_script(lines, element) == 1, cell
        _shot(browser, "ledger-long-ids")
        link = next(
            a
            for a in browser.find_elements(By.CSS_SELECTOR, 'td[data-col="call"] a')
            if a.get_attribute("textContent") == key_part(call)
        )
        browser.get(link.get_attribute("href") or "")
        _until(browser, lambda: "History" in _text(browser), "the call's page")
        heading = browser.find_element(By.CSS_SELECTOR, "h1 .id")
        assert browser.execute_script(lines, heading) == 1
        _shot(browser, "call-long-ids")
    finally:
        browser.set_window_size(1400, 900)


@pytest.fixture
def incident(tmp_path: Path) -> Iterator[str]:
    """An agent server process on a PostgreSQL log holding a call of every live stage for
    acme and globex, and ``inert console`` served over the same log from a process of its own;
    the console's address with its sign-in token."""
    with fresh_schema() as schema:
        url = log_url(schema)
        server = subprocess.Popen(
            [sys.executable, str(TESTS / "incident_server.py"), url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        environment = {**os.environ, "INERT_OPERATORS": "operator:olga"}
        command = [sys.executable, "-m", "inert", "console", "--log", url, "--port", "0"]
        console = None
        try:
            assert server.stdout is not None
            assert server.stdout.readline() == "ready\n"
            console = subprocess.Popen(
                [*command, "--principal", "operator:olga"],
                stdout=subprocess.PIPE,
                text=True,
                env=environment,
            )
            assert console.stdout is not None
            address = console.stdout.readline().split(" on ", 1)[1].strip()
            yield address
        finally:
            for process in (console, server):
                if process is None:
                    continue
                if process is console:
                    process.terminate()
                elif process.stdin is not None:
                    process.stdin.close()
                process.wait(timeout=30)
                if process.stdout is not None:
                    process.stdout.close()


def test_an_incident_in_the_console_beside_a_server_on_postgresql(
    incident: str, browser: WebDriver
) -> None:
    """The operator finds a call by its id, previews the tenant's stop (the running call
    listed), stops the tenant, sees every call of it end with its time, and reads the audit
    with the counts, while the server runs on."""
    base, token = incident.split("/?token=")
    browser.delete_all_cookies()
    browser.get(f"{base}/?token={token}")
    browser.find_element(By.ID, "search-id").send_keys("call_book_flight")
    browser.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
    _until(browser, lambda: "calls 1 to 2 of 2" in _text(browser), "the call found by its id")
    _shot(browser, "incident-search")

    browser.get(f"{base}/controls")
    browser.find_element(By.CSS_SELECTOR, '#action option[value="stop-tenant"]').click()
    browser.find_element(By.ID, "target").send_keys("acme")
    browser.find_element(By.ID, "reason").send_keys("incident 7: prompt injection")
    browser.find_element(By.ID, "give").click()
    _until(browser, lambda: "Emergency stop of tenant" in _text(browser), "the preview")
    question = _text(browser)
    assert "3 calls are live now. 1 running call is asked to stop." in question
    assert "A runtime is running on this log" in question
    assert (
        "book_flight"
        in browser.find_element(By.ID, "stopping-title")
        .find_element(By.XPATH, "following-sibling::*[1]")
        .text
    )
    _shot(browser, "incident-preview")

    browser.find_element(By.ID, "confirm-stop").click()
    _until(browser, lambda: "Calls it ended (3)" in _text(browser), "the calls it ended")

    def outcome_reported() -> bool:
        cell = "#asked-to-stop tbody td:nth-child(6)"
        if browser.find_element(By.CSS_SELECTOR, cell).text == "stopped":
            return True
        browser.refresh()
        return False

    _until(browser, outcome_reported, "the running call's outcome")
    ended_at = browser.find_elements(By.CSS_SELECTOR, "#ended tbody td:last-child")
    assert len(ended_at) == 3
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", cell.text) for cell in ended_at)
    _shot(browser, "incident-control")

    browser.get(f"{base}/?tenant=acme")
    rows = browser.find_elements(By.CSS_SELECTOR, "tr[data-stage]")
    assert sorted(str(row.get_attribute("data-stage")) for row in rows) == [
        "cancelled",
        "cancelled",
        "cancelled",
        "stopped",
    ]
    browser.find_element(By.LINK_TEXT, "call_search").click()
    history = _text(browser)
    assert "tenant_stopped" in history
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", history)
    _shot(browser, "incident-call")

    browser.get(f"{base}/audit")
    audit = _text(browser)
    assert "incident 7: prompt injection" in audit
    [given] = browser.find_elements(By.CSS_SELECTOR, "#audit tr.given")
    counts = [cell.text for cell in given.find_elements(By.CSS_SELECTOR, "td.num")][1:]
    assert counts == ["3", "1"]
    browser.get(f"{base}/?tenant=globex&stage=running")
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr[data-stage]")) == 1
    _shot(browser, "incident-audit")
