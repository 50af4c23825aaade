"""Slow clients cannot starve the exporter's scrapes (issue 23, class 5).

A timeout per read let a client that sends one header line every few seconds hold a
connection slot for ever; sixteen of them kept every scrape at 503. Real sockets on a loopback
port the kernel picks, a real MetricsServer with its default limits.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from snumap_tui.exporter.server import MetricsServer

BODY = b"snumap_up 1\n"


@pytest.fixture()
def server() -> Iterator[MetricsServer]:
    srv = MetricsServer(("127.0.0.1", 0), socket.AF_INET, lambda om: BODY)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def scrape(port: int, timeout: float = 10.0) -> tuple[int, float]:
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
            assert r.read() == BODY
            code = int(r.status)
    except urllib.error.HTTPError as exc:
        code = int(exc.code)
    return code, time.monotonic() - t0


class Slowloris:
    """``n`` connections that each send one more header byte every ``every`` seconds and
    reconnect at once when the server closes them."""

    def __init__(self, port: int, n: int, every: float = 0.3) -> None:
        self.port, self.every = port, every
        self.stop = threading.Event()
        self.connects = 0
        self.threads = [threading.Thread(target=self._one, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _one(self) -> None:
        while not self.stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            except OSError:
                time.sleep(0.05)
                continue
            self.connects += 1
            try:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                while not self.stop.wait(self.every):
                    s.sendall(b"X")
            except OSError:
                pass
            finally:
                s.close()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)


def test_slow_header_senders_do_not_starve_scrapes(server: MetricsServer) -> None:
    """40 slowloris connections (more than the 16 slots), each trickling its headers and
    reconnecting when closed: every scrape is still answered 200, within a few seconds."""
    lor = Slowloris(server.port, 40)
    try:
        deadline = time.monotonic() + 10
        while lor.connects < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)                       # every slot is held by a slow one by now
        results = [scrape(server.port) for _ in range(5)]
    finally:
        lor.close()
    assert [c for c, _ in results] == [200] * 5, results
    assert max(s for _, s in results) < 3.0, results
    assert server.evicted > 0


def test_headers_have_one_deadline_in_all() -> None:
    """A client that sends a byte every 0.2 s (never idle as long as a read's timeout) is
    closed once the request's headers have taken header_timeout in all."""
    srv = MetricsServer(("127.0.0.1", 0), socket.AF_INET, lambda om: BODY,
                        header_timeout=1.0, timeout=5.0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        t0 = time.monotonic()
        s.sendall(b"GET /metrics HTTP/1.1\r\n")
        closed_after = None
        while time.monotonic() - t0 < 8:
            time.sleep(0.2)
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                closed_after = time.monotonic() - t0
                break
        s.close()
        assert closed_after is not None and closed_after < 3.0, closed_after
    finally:
        srv.shutdown()
        srv.server_close()


def test_one_address_holds_at_most_its_share(server: MetricsServer) -> None:
    """Connections from one address beyond max_per_client do not take more slots: the
    server's table never holds more than that many from 127.0.0.1 that wait for headers."""
    socks = []
    try:
        for _ in range(server.max_clients):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            s.sendall(b"GET /me")
            socks.append(s)
        time.sleep(1.0)
        assert len(server._conns) <= server.max_per_client
        assert scrape(server.port)[0] == 200
    finally:
        for s in socks:
            s.close()
