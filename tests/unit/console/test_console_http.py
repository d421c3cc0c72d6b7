"""The console app over HTTP (Starlette's TestClient), against the in-process fake
deployment with ACL on: access checks (login, sessions, CSRF, the broker's ACL) and
the error paths of every form, each of which must change nothing. No Ray, no browser
(tests/integration/test_console_browser.py clicks through a real deployment)."""

from __future__ import annotations

import html
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import rayq
from rayq.actors.protocol.auth import Credentials
from rayq.actors.protocol.config import BrokerConfig, ClientConfig
from rayq.console import create_app
from rayq.console.sessions import SessionTable
from rayq.store import StoreConfig
from rayq.testing import FakeCluster, FakeTransport, poll_until

KEY = secrets.token_hex(32)
ADMIN = Credentials(access_key="ops", secret_key="ops-secret-0000")
READER = Credentials(access_key="reader", secret_key="reader-secret-1111")
RULES = """
[[accounts]]
access_key = "ops"
secret_key = "ops-secret-0000"
admin = true

[[accounts]]
access_key = "reader"
secret_key = "reader-secret-1111"
default_topic_perm = "DENY"
default_group_perm = "DENY"
topic_perms = ["orders=SUB"]
group_perms = ["cg=SUB"]
"""


@pytest.fixture
def cluster_options(tmp_path: Path) -> dict[str, Any]:
    acl = tmp_path / "plain_acl.toml"
    acl.write_text(RULES)
    cfg = BrokerConfig(store=StoreConfig.for_tests(), acl_enable=True, acl_file=str(acl))
    return {"under": "stores", "config": cfg, "topics": {"orders": 2}, "admin_config": ops()}


def ops() -> ClientConfig:
    return ClientConfig(credentials=ADMIN)


@pytest.fixture
def deployment(cluster: FakeCluster) -> FakeCluster:
    """6 messages on orders (keys k0..k5), all read and committed by group cg, which
    sent 2 of them to its DLQ."""
    transport = FakeTransport(cluster)
    with rayq.Producer("pg", transport=transport, config=ops()) as producer:
        for i in range(6):
            producer.send(rayq.Message("orders", f"order {i}".encode(), keys=[f"k{i}"]))
    consumer = rayq.PullConsumer(
        "cg",
        consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET,
        auto_commit=False,
        transport=transport,
        config=ops(),
    )
    consumer.subscribe("orders")
    consumer.start()
    try:
        got = poll_until(consumer, 6)
        consumer.send_back(got[:2], delay_level=-1)  # two dead letters
        consumer.commit()
    finally:
        consumer.shutdown()
    return cluster


@pytest.fixture
def client(deployment: FakeCluster) -> Iterator[TestClient]:
    app = create_app(key=KEY, transport=FakeTransport(deployment))
    with TestClient(app, follow_redirects=False) as c:
        yield c


def creds(account: Credentials) -> dict[str, str]:
    return {"access_key": account.access_key, "secret_key": account.secret_key}


def login(client: TestClient, creds: Credentials | None = ADMIN, key: str = KEY) -> Any:
    fields = {"key": key}
    if creds is not None:
        fields |= {"access_key": creds.access_key, "secret_key": creds.secret_key}
    return client.post("/login", data=fields)


def error(page: Any) -> str:
    found = re.search(r'id="error"[^>]*>(.*?)</div>', page.text, re.S)
    return html.unescape(found.group(1).strip()) if found else ""


def csrf(client: TestClient, path: str = "/groups") -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get(path).text)
    assert found, "no csrf token on the page: not logged in?"
    return found.group(1)


def committed(cluster: FakeCluster) -> dict[int, int]:
    admin = rayq.Admin(transport=FakeTransport(cluster), config=ops())
    return {p.queue.queue_id: p.committed_offset for p in admin.consumer_progress("cg")}


def resent(cluster: FakeCluster, msg_id: str) -> bool:
    """Whether ``msg_id`` went to cg's retry topic."""
    admin = rayq.Admin(transport=FakeTransport(cluster), config=ops())
    try:
        return bool(admin.query_message("%RETRY%cg", msg_id))
    except rayq.TopicNotFoundError:
        return False


def letters(cluster: FakeCluster) -> list[rayq.MessageExt]:
    return rayq.Admin(transport=FakeTransport(cluster), config=ops()).dead_letters("cg")


PAGES = [
    "/",
    "/topics",
    "/topics/orders",
    "/groups",
    "/groups/cg",
    "/groups/cg/dlq",
    "/groups/cg/reset",
    "/messages",
    "/messages?by=key&topic=orders&key=k1",
]
ACTIONS = ["/groups/cg/dlq/resend", "/groups/cg/reset", "/groups/cg/reset/confirm", "/logout"]


# ---------------------------------------------------------------------- access
def test_without_a_session_nothing_is_shown_and_no_form_works(
    client: TestClient, deployment: FakeCluster
) -> None:
    before = committed(deployment)
    for path in PAGES:
        page = client.get(path)
        assert page.status_code == 303, path
        assert page.headers["location"].startswith("/login?next=")
    dead = letters(deployment)[0].msg_id
    for path in ACTIONS:
        fields = {"msg_id": dead, "topic": "orders", "to": "earliest", "plan_id": "x"}
        page = client.post(path, data=fields)
        assert page.status_code == 401, path
        assert "Log in first" in page.text
    assert committed(deployment) == before
    assert len(letters(deployment)) == 2
    assert client.get("/login").status_code == 200
    assert client.get("/static/console.css").status_code == 200


def test_login_needs_the_deployment_key_and_with_acl_a_valid_account(client: TestClient) -> None:
    for key, why in [
        ("", "enter the deployment key"),
        ("12ab", "not a deployment key"),
        (secrets.token_hex(32), "wrong deployment key"),
    ]:
        page = login(client, key=key)
        assert page.status_code == 403 and why in error(page)
    page = login(client, creds=None)  # the key alone: the coordinator's ACL refuses
    assert page.status_code == 403 and error(page)
    page = login(client, creds=Credentials(access_key="ops", secret_key="wrong"))
    assert page.status_code == 403 and error(page)
    page = client.post("/login", data={"key": KEY, "access_key": "ops"})
    assert page.status_code == 403 and "both the access key and the secret key" in error(page)
    assert client.get("/topics").status_code == 303  # none of these opened a session

    for elsewhere in ("//evil.example", "/\\evil.example", "https://evil.example"):
        page = client.post("/login", data={"key": KEY, **creds(ADMIN), "next": elsewhere})
        assert page.status_code == 303 and page.headers["location"] == "/"  # only paths here
    page = client.get("/topics")
    assert page.status_code == 200
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


def test_logout_and_expiry_end_the_session_and_a_copied_cookie_opens_nothing(
    client: TestClient,
) -> None:
    login(client)
    cookies = dict(client.cookies)
    assert client.post("/logout", data={"csrf": csrf(client)}).status_code == 303
    assert client.get("/topics").status_code == 303
    client.cookies.update(cookies)  # the old cookie, replayed
    assert client.get("/topics").status_code == 303

    now = [0.0]
    client.app.state.console.sessions = SessionTable(idle_s=60, clock=lambda: now[0])  # type: ignore[attr-defined]
    login(client)
    assert client.get("/topics").status_code == 200
    now[0] += 61
    page = client.get("/topics")
    assert page.status_code == 303 and page.headers["location"] == "/login?next=/topics"


def test_a_form_without_the_sessions_csrf_token_changes_nothing(
    client: TestClient, deployment: FakeCluster
) -> None:
    login(client)
    dead = letters(deployment)[0].msg_id
    page = client.post("/groups/cg/dlq/resend", data={"msg_id": dead, "csrf": "forged"})
    assert page.status_code == 403 and "stale" in error(page)
    page = client.post("/groups/cg/reset", data={"topic": "orders", "to": "earliest"})
    assert page.status_code == 403
    assert not resent(deployment, dead)


def test_the_brokers_acl_decides_what_a_login_may_read_and_change(
    client: TestClient, deployment: FakeCluster
) -> None:
    before = committed(deployment)
    assert login(client, READER).status_code == 303
    assert client.get("/topics/orders").status_code == 200  # SUB on orders
    page = client.get("/groups")
    assert page.status_code == 403 and "groups by 'reader'" in error(page)  # admin only
    page = client.get("/groups?open=cg")  # so the page opens a group by name
    assert page.status_code == 303 and page.headers["location"] == "/groups/cg"
    page = client.get("/groups/cg")  # its lag reads every topic's route: DENY on %DLQ%cg
    assert page.status_code == 403 and "'reader'" in error(page)
    page = client.get("/messages?by=key&topic=orders&key=k1")
    assert page.status_code == 200 and "order 1" in page.text
    token = csrf(client)
    page = client.post(
        "/groups/billing/reset", data={"csrf": token, "topic": "orders", "to": "earliest"}
    )
    assert page.status_code == 403 and "group 'billing'" in error(page)  # no SUB on it
    page = client.get("/messages?by=id&msg_id=" + letters(deployment)[0].msg_id)
    assert page.status_code == 403 and "reader" in error(page)  # lookups by id need admin
    dead = letters(deployment)[0].msg_id
    page = client.post("/groups/cg/dlq/resend", data={"csrf": token, "msg_id": dead})
    assert page.status_code == 403 and "reader" in error(page)  # a resend needs admin
    assert not resent(deployment, dead)
    assert committed(deployment) == before and len(letters(deployment)) == 2


# ---------------------------------------------------------------- bad forms
def test_bad_lookups_are_400_with_what_to_enter(client: TestClient) -> None:
    login(client)
    for query, why in [
        ("by=key&topic=orders&key=", "the key is empty"),
        ("by=key&topic=nosuch&key=k1", "nosuch"),
        ("by=time&topic=orders&time=yesterday", "date and time like"),
        ("by=id&msg_id=", "the message id is empty"),
        ("by=id&msg_id=00FF", "no message with id"),
        ("by=key&topic=orders&key=k1&max_num=lots", "whole number"),
        ("by=colour", "one of id, key, time"),
    ]:
        page = client.get(f"/messages?{query}")
        assert page.status_code == 400, query
        assert why in error(page), (query, error(page))


def test_bad_resets_and_resends_are_400_and_change_nothing(
    client: TestClient, deployment: FakeCluster
) -> None:
    login(client)
    before, token = committed(deployment), csrf(client)
    cases = [
        ({"topic": "orders", "to": "offset", "value": "ten"}, "whole number, got 'ten'"),
        ({"topic": "nosuch", "to": "earliest"}, "nosuch"),
        ({"topic": "orders", "to": "shift", "value": "-100"}, "before its first offset"),
        ({"topic": "orders", "to": "earliest", "queue_id": "9"}, "no queue 9"),
        ({"topic": "", "to": "earliest"}, "the topic is empty"),
        ({"topic": "orders", "to": "time", "value": "noon"}, "date and time like"),
    ]
    for fields, why in cases:
        page = client.post("/groups/cg/reset", data={"csrf": token, **fields})
        assert page.status_code == 400, fields
        assert why in error(page), (fields, error(page))
    page = client.post(
        "/groups/nosuch/reset", data={"csrf": token, "topic": "orders", "to": "earliest"}
    )
    assert page.status_code == 400 and "nosuch" in error(page)
    page = client.post("/groups/cg/dlq/resend", data={"csrf": token, "msg_id": "00FF"})
    assert page.status_code == 400 and "not a dead letter of group 'cg'" in error(page)
    page = client.post("/groups/cg/reset/confirm", data={"csrf": token, "plan_id": "made-up"})
    assert page.status_code == 400 and "no plan" in error(page)
    assert client.get("/groups/nosuch").status_code == 400
    assert committed(deployment) == before
    assert len(letters(deployment)) == 2


# ---------------------------------------------------------------- what works
def test_a_reset_changes_offsets_only_once_confirmed_and_not_if_they_moved(
    client: TestClient, deployment: FakeCluster
) -> None:
    login(client)
    before, token = committed(deployment), csrf(client)
    plan = client.post(
        "/groups/cg/reset", data={"csrf": token, "topic": "orders", "to": "earliest"}
    )
    assert plan.status_code == 200 and "A dry run" in plan.text
    assert committed(deployment) == before
    plan_id = re.search(r'name="plan_id" value="([^"]+)"', plan.text).group(1)  # type: ignore[union-attr]
    done = client.post("/groups/cg/reset/confirm", data={"csrf": token, "plan_id": plan_id})
    assert done.status_code == 200 and 'id="done"' in done.text
    assert committed(deployment) == dict.fromkeys(before, 0)
    again = client.post("/groups/cg/reset/confirm", data={"csrf": token, "plan_id": plan_id})
    assert again.status_code == 400  # a plan is confirmed once

    plan = client.post("/groups/cg/reset", data={"csrf": token, "topic": "orders", "to": "latest"})
    plan_id = re.search(r'name="plan_id" value="([^"]+)"', plan.text).group(1)  # type: ignore[union-attr]
    rayq.Admin(transport=FakeTransport(deployment), config=ops()).reset_offsets(
        "cg", "orders", "offset", 1, execute=True
    )  # someone else moves them in between
    stale = client.post("/groups/cg/reset/confirm", data={"csrf": token, "plan_id": plan_id})
    assert stale.status_code == 409 and "changed since the plan" in error(stale)
    assert committed(deployment) == dict.fromkeys(before, 1)


def test_pages_show_topics_lag_messages_and_dead_letters_and_resend_one(
    client: TestClient, deployment: FakeCluster
) -> None:
    login(client)
    page = client.get("/")
    assert page.status_code == 200 and "broker broker-a" in page.text
    page = client.get("/topics")
    assert re.search(
        r'href="/topics/orders">orders</a></td><td class="num">2</td>\s*<td class="num">6<',
        page.text,
    )
    assert "%DLQ%cg" not in page.text and "%DLQ%cg" in client.get("/topics?system=1").text
    page = client.get("/groups/cg")
    assert 'id="total-lag">0<' in page.text and page.text.count('class="num lag"') == 2
    page = client.get("/messages?by=time&topic=orders&time=0")
    assert page.status_code == 200 and page.text.count("/messages/") >= 6
    dead = letters(deployment)
    page = client.get("/groups/cg/dlq")
    assert all(m.msg_id in page.text for m in dead)
    page = client.post(
        "/groups/cg/dlq/resend", data={"csrf": csrf(client), "msg_id": dead[0].msg_id}
    )
    assert page.status_code == 200 and "Resent" in page.text and "%RETRY%cg" in page.text
    assert resent(deployment, dead[0].msg_id)
