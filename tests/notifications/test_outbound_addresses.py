"""URLs people choose (webhooks, agents' base URLs, http.fetch) are parsed by the code that sends
them, and in production connect only to the public address that was checked."""

from __future__ import annotations

import threading

import httpx
import pytest

from runs import outbound
from schedules import notices
from schedules.models import NotificationAttempt, NotificationSettings

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("8.8.8.8", ""),
        ("2001:4860:4860::8888", ""),
        ("64:ff9b::808:808", ""),  # NAT64 of a public address
        ("127.0.0.1", "private or reserved"),
        ("10.1.2.3", "private or reserved"),
        ("169.254.169.254", "private or reserved"),
        ("100.64.0.1", "private or reserved"),
        ("::1", "private or reserved"),
        ("fe80::1%eth0", "private or reserved"),
        ("fc00::1", "private or reserved"),
        ("::ffff:10.0.0.1", "private or reserved"),  # IPv4-mapped
        ("64:ff9b::a00:1", "private or reserved"),  # NAT64 of 10.0.0.1
        ("2002:a00:1::", "private or reserved"),  # 6to4 of 10.0.0.1
        ("::a00:1", "private or reserved"),  # IPv4-compatible 10.0.0.1
        ("::127.0.0.1", "private or reserved"),
        ("::ffff:0:7f00:1", "private or reserved"),  # IPv4-translated 127.0.0.1 (SIIT)
        ("::ffff:0:808:808", ""),  # IPv4-translated 8.8.8.8
        ("64:ff9b:1::a00:1", "private or reserved"),  # local-use NAT64: the operator's network
        ("224.0.0.1", "multicast"),
        ("ff0e::1", "multicast"),  # global-scope IPv6 multicast
    ],
)
def test_every_form_of_a_private_address_is_refused(address, problem):
    found = outbound.address_problem(address)
    assert (problem in found) if problem else found == ""


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://localhost:abc/", "Invalid port"),
        ("https://8.8.8.8:abc/", "Invalid port"),
        ("https://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54:8741/", "IDNA"),
        ("https://example.com\t/hook", "non-printable"),
        ("ftp://example.com/hook", "absolute https:// URL"),
        ("https://user:pw@example.com/hook", "user name or password"),
        ("https://example.com:99999/hook", "port outside 1-65535"),
        ("https://example.com:0/hook", "port outside 1-65535"),
    ],
)
def test_a_webhook_url_that_could_not_be_sent_is_refused_when_saved(owner, url, reason):
    with pytest.raises(notices.InvalidNotificationSettings) as refused:
        notices.update_notification_settings(
            owner, email_enabled=False, webhook_enabled=True, webhook_url=url
        )
    assert reason in refused.value.fields["webhook_url"]


def test_a_saved_webhook_url_is_stored_as_it_will_be_sent(owner):
    channels, _ = notices.update_notification_settings(
        owner, email_enabled=False, webhook_enabled=True, webhook_url="  https://Hooks.Example.COM:443/p a  "
    )
    assert channels.webhook_url == "https://hooks.example.com/p%20a"


@pytest.mark.parametrize(
    "stored", ["http://localhost:abc/", "https://8.8.8.8:abc/", "https://\uff4c\uff4f\uff43\uff41\uff4c/"]
)
def test_a_stored_url_that_cannot_be_sent_is_a_recorded_failed_attempt_not_a_crash(
    owner, owner_client, stored
):
    notices.update_notification_settings(
        owner, email_enabled=False, webhook_enabled=True, webhook_url="https://example.com/hook"
    )
    NotificationSettings.objects.filter(owner=owner).update(webhook_url=stored)  # saved by an older version

    response = owner_client.post("/settings/test/")

    assert response.status_code == 302
    (attempt,) = NotificationAttempt.objects.filter(channel="webhook")
    assert attempt.outcome == "failed" and "not a usable URL" in attempt.detail


class _Server:
    """A local HTTP server that records the Host header of each request."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.hosts: list[str] = []
        hosts = self.hosts

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hosts.append(self.headers.get("Host", ""))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    running = _Server()
    yield running
    running.close()


def test_the_connection_goes_to_the_checked_address_not_a_fresh_lookup(server):
    """A made-up name that only our resolver knows: if the socket connected anywhere but the
    address the check saw, there would be no answer at all."""
    resolver = lambda host, port: ["127.0.0.1"]  # noqa: E731
    transport = outbound.CheckedTransport(allowed_hosts={"models.internal.test"}, resolver=resolver)
    with httpx.Client(transport=transport) as client:
        response = client.get(f"http://models.internal.test:{server.port}/v1/models")
    assert response.status_code == 204
    assert server.hosts == [f"models.internal.test:{server.port}"]  # the name travels as the Host


def test_a_name_that_rebinds_to_a_private_address_after_the_check_gets_no_connection(server):
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])  # public when saved, loopback when sent
    resolver = lambda host, port: next(answers)  # noqa: E731

    assert outbound.host_problem("hooks.example.test", resolver=resolver) == ""  # the save-time check
    transport = outbound.CheckedTransport(resolver=resolver)
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(httpx.ConnectError, match="private or reserved"),
    ):
        client.get(f"http://hooks.example.test:{server.port}/hook")
    assert server.hosts == []


def test_in_production_a_webhook_that_rebinds_is_never_posted(owner, settings, server, monkeypatch):
    notices.update_notification_settings(
        owner,
        email_enabled=False,
        webhook_enabled=True,
        webhook_url=f"https://hooks.example.test:{server.port}/h",
    )
    settings.PRODUCTION, settings.ALLOW_PRIVATE_ADDRESSES = True, False
    answers = iter([["93.184.216.34"], ["127.0.0.1"], ["127.0.0.1"], ["127.0.0.1"], ["127.0.0.1"]])
    monkeypatch.setattr(outbound, "resolve", lambda host, port: next(answers))

    (attempt, *_) = [a for a in notices.send_test_notification(owner, attempts=1) if a.channel == "webhook"]

    assert attempt.outcome == "failed"
    assert server.hosts == []


def test_an_allowed_provider_host_may_be_private_but_another_may_not(settings, agent):
    from runs.models import base_url_problem

    settings.PRODUCTION, settings.ALLOW_PRIVATE_ADDRESSES = True, False
    settings.PROVIDER_ALLOWED_HOSTS = ["vllm.lan"]
    assert base_url_problem("http://vllm.lan:8000/v1") == ""
    assert "private or reserved" in base_url_problem("https://127.0.0.1:8000/v1")
    assert "https://" in base_url_problem("http://api.example.com/v1")


def test_a_burst_of_runs_starting_at_once_builds_one_tls_context_not_one_each():
    # Building one loads the CA bundle (about 20 ms of CPU): ten runs of a burst each building
    # their own held a worker's first runs back by a tenth of a second.
    outbound._tls_context.cache_clear()
    start = threading.Barrier(10)
    built: list[object] = []

    def first_call() -> None:
        start.wait()
        built.append(outbound.tls_context())

    threads = [threading.Thread(target=first_call) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 10 and all(context is built[0] for context in built)
    assert outbound._tls_context.cache_info().misses == 1


def test_a_worker_builds_its_tls_context_as_it_spawns():
    from django_q.signals import post_spawn

    # Connected (runs.apps); sending the signal here would also start a worker's waker.
    assert any(key[0] == "runs.warm_tls" for key, *_ in post_spawn.receivers)
    outbound._tls_context.cache_clear()
    outbound.warm_tls(sender="django_q", proc_name="Process-1")
    assert outbound._tls_context.cache_info().currsize == 1
