"""The metrics listener over a real loopback socket: the exposition at /metrics for GET
and HEAD, 404 for any other path, 405 for other methods."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from backend.metrics_http import serve
from backend.testing import free_port


@pytest.fixture()
def port() -> Iterator[int]:
    registry = CollectorRegistry(auto_describe=False)
    Counter("probe_hits", "a family to see in the answer", registry=registry).inc(3)
    port = free_port()
    httpd, thread = serve("127.0.0.1", port, registry)
    try:
        yield port
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _ask(port: int, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_get_metrics_is_the_exposition(port: int) -> None:
    status, headers, body = _ask(port, "GET", "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    assert b"probe_hits_total 3.0" in body


def test_head_metrics_has_the_headers_and_no_body(port: int) -> None:
    _, _, get_body = _ask(port, "GET", "/metrics")
    status, headers, body = _ask(port, "HEAD", "/metrics")
    assert (status, body) == (200, b"")
    assert headers["content-type"].startswith("text/plain")
    assert int(headers["content-length"]) == len(get_body)


@pytest.mark.parametrize("path", ["/", "/metric", "/metrics/", "/favicon.ico", "/x?y=1"])
def test_other_paths_are_not_found(port: int, path: str) -> None:
    status, _, body = _ask(port, "GET", path)
    assert status == 404
    assert body == b"tenure serves its metrics at /metrics\n"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
def test_any_other_method_is_refused(port: int, method: str) -> None:
    """OPTIONS was 200 with `Allow: OPTIONS,GET` (HEAD, which works, left out)."""
    status, headers, body = _ask(port, method, "/metrics")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    assert body == b"/metrics answers GET and HEAD\n"


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6(), reason="no IPv6 on this host")
def test_the_ipv6_wildcard_leaves_ipv4_to_an_app() -> None:
    """``[::]:P`` was dual-stack and took 127.0.0.1:P too, which the config check (the
    families apart, as the owner binds app sockets) let an app's socket claim."""
    registry = CollectorRegistry(auto_describe=False)
    port = free_port()
    httpd, thread = serve("::", port, registry)
    try:
        assert httpd.socket.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1
        with socket.socket() as app:
            app.bind(("127.0.0.1", port))
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
