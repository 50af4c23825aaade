"""Scrapers that hang, a hundred at once: sampling goes on, threads and memory stay bounded.

All in this process, on this machine's sources, on loopback ports the kernel picks. Bounds,
not timings: waits are bounded loops, the checks are counts (threads, sweeps, renders) and
a generous RSS bound.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from snumap_tui.exporter.runtime import Exporter
from snumap_tui.topology.build import load_topology


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def until(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def hang(port: int, n: int) -> list[socket.socket]:
    """Clients that connect and send half a request line, then nothing."""
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metr")
        out.append(s)
    return out


def scrape(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            body = r.read()
            assert b"snumap_exporter_sweeps_total" in body
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.fixture()
def exporter() -> Iterator[Exporter]:
    exp = Exporter(load_topology(), Path("/"), 0.1, jobs=False)
    exp.serve("127.0.0.1:0", timeout=1.0, max_clients=8)
    exp.start()
    assert until(lambda: exp.state.sweeps >= 3)
    try:
        yield exp
    finally:
        exp.close()


def test_stock_prometheus_client_server_keeps_a_thread_per_hanging_client() -> None:
    """Why server.py has its own server: prometheus-client's holds every hanging scraper's
    thread (no socket timeout), so their number is the scrapers' to choose."""
    from prometheus_client import CollectorRegistry, start_http_server

    base = threading.active_count()
    srv, _thread = start_http_server(0, addr="127.0.0.1", registry=CollectorRegistry())
    port = srv.server_address[1]
    socks = hang(port, 30)
    try:
        assert until(lambda: threading.active_count() >= base + 30, timeout=10)
        time.sleep(1.5)                       # longer than our server's timeout: still held
        assert threading.active_count() >= base + 30
    finally:
        for s in socks:
            s.close()
        srv.shutdown()
        srv.server_close()


def test_hanging_scrapers_neither_stall_sampling_nor_pile_up_threads(exporter: Exporter
                                                                      ) -> None:
    assert exporter.server is not None
    port = exporter.server.port
    base_threads = threading.active_count()
    rss0 = rss_bytes()
    socks = hang(port, 50)
    try:
        sweeps = exporter.state.sweeps
        # The sampler goes on while 50 clients hang ...
        assert until(lambda: exporter.state.sweeps >= sweeps + 10)
        # ... the connections served at once never exceed the cap (+1 accept thread) ...
        peak = 0
        for _ in range(40):
            peak = max(peak, threading.active_count() - base_threads)
            time.sleep(0.05)
        assert peak <= 8
        # ... and a real scrape is answered once the hanging ones time out (1 s each).
        assert until(lambda: scrape(port) == 200, timeout=30)
    finally:
        for s in socks:
            s.close()
    assert until(lambda: threading.active_count() <= base_threads)
    assert rss_bytes() - rss0 < 40 << 20


def test_a_hundred_concurrent_scrapes(exporter: Exporter) -> None:
    assert exporter.server is not None
    port = exporter.server.port
    base_threads = threading.active_count()

    def storm() -> list[int]:
        codes: list[int] = []
        ts = [threading.Thread(target=lambda: codes.append(scrape(port))) for _ in range(100)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        return codes

    storm()                                   # warm-up: arenas, caches, first renders
    rss1 = rss_bytes()
    renders0, sweeps0 = exporter.exposition.renders, exporter.state.sweeps
    codes: list[int] = []
    for _ in range(4):
        codes += storm()
    assert codes.count(200) == len(codes) == 400
    # The sampler kept sweeping, and scrapes of one sweep shared one rendering.
    sweeps = exporter.state.sweeps - sweeps0
    assert sweeps >= 3
    assert exporter.exposition.renders - renders0 <= sweeps + 1
    assert until(lambda: threading.active_count() <= base_threads)
    # 400 scrapes later the process has not grown (bounded: no per-scrape state is kept).
    assert rss_bytes() - rss1 < 16 << 20
