"""Screenshots of the web console for docs/guide/console.md: ``make screenshots``.

Starts a deployment of its own (a local Ray, a temporary store), puts some data in it
(two topics, a traced producer, a consumer group with lag and dead letters, a live
push consumer), serves the console in a process of its own over the deployment's
``rayq://`` endpoint, and saves one PNG per page into docs/images/console-*.png
from a headless Chromium (Debian's chromium and chromium-driver) at 1280x800. Every
process it starts is ended when it is done.

    .venv/bin/python docs/screenshots.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

import rayq
from rayq.bootstrap import KEY_FILE

NAMESPACE = "rayq-screenshots"
TRACED = rayq.ClientConfig(trace_enable=True)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,800",
]


def fill_deployment() -> rayq.PushConsumer:
    """Topics orders (4 queues) and payments (2), traced sends, group billing behind
    by a few messages with two dead letters, and a live push consumer of group audit."""
    admin = rayq.Admin(namespace=NAMESPACE)
    admin.create_topic("orders", queues=4)
    admin.create_topic("payments", queues=2)
    with rayq.Producer("shop", namespace=NAMESPACE, config=TRACED) as producer:
        for i in range(40):
            body = f'{{"order": {i}, "total": {10 + i}.50}}'.encode()
            producer.send(rayq.Message("orders", body, tags="paid", keys=[f"order-{i}"]))
        for i in range(12):
            producer.send(rayq.Message("payments", f"payment {i}".encode(), keys=[f"pay-{i}"]))
    billing = rayq.PullConsumer(
        "billing",
        namespace=NAMESPACE,
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
        auto_commit=False,
        config=TRACED,
    )
    billing.subscribe("orders")
    billing.start()
    got: list[rayq.MessageExt] = []
    deadline = time.monotonic() + 60
    while len(got) < 40 and time.monotonic() < deadline:
        got += billing.poll(timeout=1.0)
    billing.send_back(got[:3], delay_level=-1)  # three dead letters
    billing.commit()
    billing.shutdown()
    with rayq.Producer("shop", namespace=NAMESPACE, config=TRACED) as producer:
        for i in range(40, 47):
            producer.send(rayq.Message("orders", b'{"order": %d}' % i, keys=[f"order-{i}"]))
    audit = rayq.PushConsumer(
        "audit", namespace=NAMESPACE, consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET
    )
    audit.subscribe("payments")
    audit.register_listener(lambda msgs: rayq.ConsumeStatus.CONSUME_SUCCESS)
    audit.start()
    return audit


@contextlib.contextmanager
def console(url: str, key: str) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    code = "import rayq.console, sys; rayq.console.serve(port=int(sys.argv[1]), url=sys.argv[2])"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(port), url], env={**os.environ, "RAYQ_KEY": key}
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the console did not start")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(15)


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    profile = tempfile.mkdtemp(prefix="rayq-screenshots-")
    options = Options()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(service=service, options=options)
    driver_proc = psutil.Process(service.process.pid)
    started = [driver_proc, *driver_proc.children(recursive=True)]
    try:
        # the viewport itself 1280x800 (a window's size includes the browser's frame)
        metrics = {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False}
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        yield driver
    finally:
        with contextlib.suppress(Exception):
            driver.quit()
        for proc in started:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(started, timeout=10)
        shutil.rmtree(profile, ignore_errors=True)


def click(browser: Any, element: Any) -> None:
    browser.execute_script("window.rayqOldPage = true")
    element.click()
    WebDriverWait(browser, 30).until(
        lambda b: b.execute_script(
            "return window.rayqOldPage === undefined && document.readyState === 'complete'"
        )
    )


def fill(browser: Any, form: str, **fields: str) -> None:
    root = browser.find_element(By.CSS_SELECTOR, form)
    for name, value in fields.items():
        box = root.find_element(By.NAME, name)
        if box.tag_name == "select":
            box.find_element(By.CSS_SELECTOR, f"option[value='{value}']").click()
        else:
            box.clear()
            box.send_keys(value)
    click(browser, root.find_element(By.CSS_SELECTOR, "button[type=submit]"))


def shoot(browser: Any, base: str, out: Path, key: str) -> None:
    def save(name: str) -> None:
        path = out / f"console-{name}.png"
        browser.save_screenshot(str(path))
        print(f"{path} ({path.stat().st_size // 1024} KiB)")

    browser.get(base + "/login")
    save("login")
    fill(browser, "#login-form", key=key)
    save("cluster")
    browser.get(base + "/topics")
    time.sleep(1.2)  # a second reading of the max offsets: a rate
    browser.refresh()
    save("topics")
    browser.get(base + "/topics/orders")
    save("topic")
    browser.get(base + "/groups")
    save("groups")
    browser.get(base + "/groups/billing")
    save("group")
    browser.get(base + "/messages")
    fill(browser, "#by-key", topic="orders", key="order-7")
    save("messages")
    click(browser, browser.find_element(By.CSS_SELECTOR, "#found tbody a"))
    save("message")
    browser.get(base + "/groups/billing/dlq")
    save("dead-letters")
    browser.get(base + "/groups/billing/reset")
    fill(browser, "#reset-form", topic="orders", to="shift", value="-2")
    save("reset")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "images")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as store:
        cluster = rayq.start(store, namespace=NAMESPACE)
        try:
            audit = fill_deployment()
            key = (cluster.store_dir / KEY_FILE).read_text().strip()
            with console(cluster.url, key) as base, chromium() as browser:
                shoot(browser, base, args.out, key)
            audit.shutdown()
        finally:
            cluster.shutdown()


if __name__ == "__main__":
    main()
