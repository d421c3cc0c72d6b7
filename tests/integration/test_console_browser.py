"""The web console in a real headless Chromium (Selenium, Debian's chromium and
chromium-driver), on a live deployment.

One deployment (Ray), some data (a traced producer, a consumer group that commits
and sends two messages to its DLQ), the console in a process of its own outside Ray
(``rayq.console.serve(url=..., key=...)``, through the deployment's bootstrap
endpoint), and one browser for the module. The tests log in, click through each page
and check what it shows, and submit bad forms. The browser, its driver and the
console are ended by the fixtures, by PID. Skipped only where no Chromium is found
(``make venv`` installs it).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

import rayq
from rayq.bootstrap import KEY_FILE

pytestmark = pytest.mark.integration

NAMESPACE = "rayq-test-console"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,800",
]
TRACED = rayq.ClientConfig(trace_enable=True)
if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
    pytest.skip(
        "no Chromium: the console's browser tests need Debian's chromium and chromium-driver "
        "(make venv installs them with apt-get)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def data(cluster: rayq.Cluster) -> dict[str, Any]:
    """orders (2 queues): 10 traced messages read and committed by cg, which sent 2 to
    its DLQ, then 3 more (cg's lag: 3)."""
    admin = rayq.Admin(namespace=NAMESPACE)
    admin.create_topic("orders", queues=2)
    with rayq.Producer("pg", namespace=NAMESPACE, config=TRACED) as producer:
        sent = [
            producer.send(rayq.Message("orders", f"order {i}".encode(), keys=[f"order-{i}"]))
            for i in range(10)
        ]
    consumer = rayq.PullConsumer(
        "cg",
        namespace=NAMESPACE,
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
        auto_commit=False,
        config=TRACED,
    )
    consumer.subscribe("orders")
    consumer.start()
    try:
        got: list[rayq.MessageExt] = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got += consumer.poll(timeout=1.0)
        assert len(got) == 10
        consumer.send_back(got[:2], delay_level=-1)
        consumer.commit()
    finally:
        consumer.shutdown()
    with rayq.Producer("pg", namespace=NAMESPACE) as producer:
        for i in range(10, 13):
            producer.send(rayq.Message("orders", f"order {i}".encode(), keys=[f"order-{i}"]))
    return {"sent": sent, "admin": admin}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def console(cluster: rayq.Cluster, data: dict[str, Any]) -> Iterator[str]:
    """The console's base URL: ``serve`` in a process of its own, ended by its PID."""
    port = free_port()
    key = (cluster.store_dir / KEY_FILE).read_text().strip()
    # the key from $RAYQ_KEY (not on a command line, which `ps` shows)
    code = "import rayq.console, sys; rayq.console.serve(port=int(sys.argv[1]), url=sys.argv[2])"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(port), cluster.url],
            env={**os.environ, "RAYQ_KEY": key},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            wait_listening(port, proc, log)
            yield f"http://127.0.0.1:{port}"
        finally:
            end(proc.pid, proc)


def wait_listening(port: int, proc: subprocess.Popen[bytes], log: Any) -> None:
    """Back once ``port`` takes connections; fails with the console's stderr if its
    process ended or 60 s passed."""
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            pytest.fail(f"the console did not start: {log.read().decode()[-2000:]}")
        time.sleep(0.1)


def end(pid: int, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Terminate ``pid`` and wait for it (kill it if it lingers)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 15)
    if proc is not None:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium through chromedriver, with a fresh profile; the driver and
    every browser process under it are ended by PID."""
    import psutil
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="rayq-console-chromium-")
    options = Options()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    service = Service(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(service=service, options=options)
    driver_proc = psutil.Process(service.process.pid)
    started = [driver_proc, *driver_proc.children(recursive=True)]  # chromium's too
    try:
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        with contextlib.suppress(Exception):
            driver.quit()
        for proc in started:  # whatever quit left behind, by PID
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(started, timeout=10)
        shutil.rmtree(profile, ignore_errors=True)


def text(browser: Any, css: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, css).text)


def error(browser: Any) -> str:
    found = browser.find_elements(By.ID, "error")
    return str(found[0].text) if found else ""


def click(browser: Any, element: Any) -> None:
    """Click ``element`` and wait until the page it leads to has loaded (the old page's
    mark is gone, the new one is complete)."""
    browser.execute_script("window.rayqOldPage = true")
    element.click()
    WebDriverWait(browser, 30).until(
        lambda b: b.execute_script(
            "return window.rayqOldPage === undefined && document.readyState === 'complete'"
        )
    )


def fill(browser: Any, form: str, **fields: str) -> None:
    """Type ``fields`` into the form ``form`` (a CSS selector) and submit it."""
    root = browser.find_element(By.CSS_SELECTOR, form)
    for name, value in fields.items():
        box = root.find_element(By.NAME, name)
        if box.tag_name == "select":
            box.find_element(By.CSS_SELECTOR, f"option[value='{value}']").click()
        else:
            box.clear()
            box.send_keys(value)
    click(browser, root.find_element(By.CSS_SELECTOR, "button[type=submit]"))


@pytest.fixture(scope="module")
def logged_in(browser: Any, console: str, cluster: rayq.Cluster) -> Any:
    """Not logged in, every page goes to the login form; a wrong key is refused there;
    the deployment's key logs in."""
    browser.get(console + "/topics")
    assert browser.current_url.startswith(console + "/login")
    fill(browser, "#login-form", key="ab" * 32)
    assert "wrong deployment key" in error(browser)
    browser.get(console + "/groups/cg/dlq")
    fill(browser, "#login-form", key=(cluster.store_dir / KEY_FILE).read_text().strip())
    assert browser.current_url == console + "/groups/cg/dlq"  # back where it was going
    return browser


def test_the_cluster_page_shows_each_actors_health(logged_in: Any, console: str) -> None:
    logged_in.get(console + "/")
    assert text(logged_in, "#cluster-level") == "OK"
    rows = text(logged_in, "#health")
    assert "coordinator" in rows and "broker broker-a" in rows and "flusher broker-a" in rows
    assert "broker-a" in text(logged_in, "#brokers")


def test_topics_show_their_queues_bounds_and_rates(logged_in: Any, console: str) -> None:
    logged_in.get(console + "/topics")
    row = logged_in.find_element(By.XPATH, "//table[@id='topics']//tr[td/a='orders']")
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:3] == ["orders", "2", "13"]
    link = row.find_element(By.LINK_TEXT, "orders")
    click(logged_in, link)
    queues = logged_in.find_elements(By.CSS_SELECTOR, "#queues tbody tr")
    maxima = [int(r.find_elements(By.TAG_NAME, "td")[3].text) for r in queues]
    assert len(queues) == 2 and sum(maxima) == 13
    deadline = time.monotonic() + 30
    while text(logged_in, "#topic-rate") == "-":  # a rate needs a second reading
        assert time.monotonic() < deadline, "no rate shown"
        time.sleep(0.3)
        logged_in.refresh()
    assert float(text(logged_in, "#topic-rate")) >= 0


def test_a_group_shows_its_lag_per_queue(logged_in: Any, console: str) -> None:
    logged_in.get(console + "/groups")
    link = logged_in.find_element(By.LINK_TEXT, "cg")
    click(logged_in, link)
    assert text(logged_in, "#total-lag") == "3"
    lags = [int(c.text) for c in logged_in.find_elements(By.CSS_SELECTOR, "#progress td.lag")]
    assert len(lags) == 2 and sum(lags) == 3


def test_a_message_looked_up_by_key_and_its_trace(
    logged_in: Any, console: str, data: dict[str, Any]
) -> None:
    logged_in.get(console + "/messages")
    fill(logged_in, "#by-key", topic="orders", key="order-4")
    found = logged_in.find_elements(By.CSS_SELECTOR, "#found tbody tr")
    assert len(found) == 1 and "order 4" in found[0].text
    link = found[0].find_element(By.TAG_NAME, "a")
    click(logged_in, link)
    assert text(logged_in, "#msg-id") == data["sent"][4].msg_id
    assert text(logged_in, "#body") == "order 4"
    kinds = [c.text for c in logged_in.find_elements(By.CSS_SELECTOR, "#trace td.kind")]
    assert kinds[:2] == ["send", "store"] and "consume" in kinds

    logged_in.get(console + "/messages")
    fill(logged_in, "#by-time", topic="orders", time="0")
    assert len(logged_in.find_elements(By.CSS_SELECTOR, "#found tbody tr a")) == 10  # 5 a queue


def test_a_dead_letter_is_resent(logged_in: Any, console: str, data: dict[str, Any]) -> None:
    logged_in.get(console + "/groups/cg/dlq")
    rows = logged_in.find_elements(By.CSS_SELECTOR, "#letters tbody tr")
    assert len(rows) == 2
    msg_id = rows[0].find_element(By.TAG_NAME, "a").text
    button = rows[0].find_element(By.CSS_SELECTOR, "button.resend")
    click(logged_in, button)
    assert msg_id in text(logged_in, "#resent") and "%RETRY%cg" in text(logged_in, "#resent")
    assert [m.msg_id for m in data["admin"].query_message("%RETRY%cg", msg_id)] == [msg_id]


def test_an_offset_reset_shows_its_plan_and_changes_only_once_confirmed(
    logged_in: Any, console: str, data: dict[str, Any]
) -> None:
    admin = data["admin"]
    before = {p.queue: p.committed_offset for p in admin.consumer_progress("cg")}
    logged_in.get(console + "/groups/cg/reset")
    fill(logged_in, "#reset-form", topic="orders", to="shift", value="-2")
    targets = [int(c.text) for c in logged_in.find_elements(By.CSS_SELECTOR, "#plan td.target")]
    assert sorted(targets) == sorted(o - 2 for o in before.values())
    assert {p.queue: p.committed_offset for p in admin.consumer_progress("cg")} == before
    button = logged_in.find_element(By.ID, "confirm")
    click(logged_in, button)
    assert "Done" in text(logged_in, "#done")
    after = {p.queue: p.committed_offset for p in admin.consumer_progress("cg")}
    assert after == {q: o - 2 for q, o in before.items()}
    logged_in.get(console + "/groups/cg")
    assert text(logged_in, "#total-lag") == "7"


def test_bad_forms_show_why_and_change_nothing(
    logged_in: Any, console: str, data: dict[str, Any]
) -> None:
    admin = data["admin"]
    before = {p.queue: p.committed_offset for p in admin.consumer_progress("cg")}
    for fields, why in [
        ({"topic": "orders", "to": "offset", "value": "ten"}, "whole number, got 'ten'"),
        ({"topic": "orders", "to": "shift", "value": "-1000"}, "before its first offset"),
        ({"topic": "nosuch", "to": "earliest"}, "'nosuch' does not exist"),
    ]:
        logged_in.get(console + "/groups/cg/reset")
        fill(logged_in, "#reset-form", **fields)
        assert why in error(logged_in)
    logged_in.get(console + "/messages")
    fill(logged_in, "#by-key", topic="orders", key="")
    assert "the key is empty" in error(logged_in)
    logged_in.get(console + "/groups/cg/dlq")
    logged_in.execute_script(
        "document.querySelector(\"#letters input[name='msg_id']\").value = '00FF'"
    )
    button = logged_in.find_element(By.CSS_SELECTOR, "button.resend")
    click(logged_in, button)
    assert "not a dead letter of group 'cg'" in error(logged_in)
    assert {p.queue: p.committed_offset for p in admin.consumer_progress("cg")} == before


def test_over_http_the_live_console_answers_with_the_right_status(
    console: str, cluster: rayq.Cluster, data: dict[str, Any]
) -> None:
    """The statuses a browser does not show: 303 to the login page and 401 without a
    session, 403 for a forged form, 400 for a bad value; nothing changes."""
    admin = data["admin"]
    before = {p.queue: p.committed_offset for p in admin.consumer_progress("cg")}
    with httpx2.Client(base_url=console, follow_redirects=False, timeout=30) as http:
        assert http.get("/groups/cg").status_code == 303
        page = http.post("/groups/cg/reset", data={"topic": "orders", "to": "earliest"})
        assert page.status_code == 401
        key = (cluster.store_dir / KEY_FILE).read_text().strip()
        assert http.post("/login", data={"key": key}).status_code == 303
        page = http.post("/groups/cg/reset", data={"topic": "orders", "to": "earliest"})
        assert page.status_code == 403  # no CSRF token
        token = re.search(r'name="csrf" value="([^"]+)"', http.get("/groups/cg/reset").text)
        assert token is not None
        fields = {"csrf": token.group(1), "topic": "orders", "to": "offset", "value": "ten"}
        assert http.post("/groups/cg/reset", data=fields).status_code == 400
        assert http.get("/messages?by=key&topic=orders&key=").status_code == 400
    assert {p.queue: p.committed_offset for p in admin.consumer_progress("cg")} == before


def test_logging_out_ends_the_session(logged_in: Any, console: str) -> None:
    logged_in.get(console + "/")
    button = logged_in.find_element(By.ID, "logout")
    click(logged_in, button)
    logged_in.get(console + "/groups")
    assert logged_in.current_url.startswith(console + "/login")
