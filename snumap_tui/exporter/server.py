"""Serving the exposition: a bounded HTTP server, and node_exporter's textfile.

Why not prometheus-client's ``start_http_server``: it starts a thread per connection with no
socket timeout, so a scraper that connects and never sends its request (or never reads the
answer) holds a thread for ever, and a thousand of them hold a thousand threads
(tests/test_exporter_server.py measures it). Here each connection has ``timeout`` seconds to
be served, at most ``max_clients`` are served at once, and one that finds no free slot within
``queue_wait`` seconds is answered 503 and closed: memory is bounded whatever the scrapers do. The sampler runs in its own
thread and never waits for a scrape (a scrape reads the last snapshot).
"""

from __future__ import annotations

import errno
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from snumap_tui.errors import SnumapError

DEFAULT_LISTEN = "127.0.0.1:9464"
TEXTFILE_NAME = "snumap.prom"


def parse_listen(text: str) -> tuple[str, int]:
    """"127.0.0.1:9464", "[::1]:9464", ":9464" (every address), "localhost:0" -> (host,
    port); the host is resolved later, when binding."""
    host, sep, port_s = text.rpartition(":")
    if not sep or not port_s.isdigit():
        raise SnumapError(f"--listen {text}: expected HOST:PORT (e.g. {DEFAULT_LISTEN})")
    port = int(port_s)
    if port > 65535:
        raise SnumapError(f"--listen {text}: port {port} is out of range (0-65535)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def resolve(host: str, port: int) -> tuple[int, tuple[str, int]]:
    """The address family and socket address to bind; an address that does not resolve is
    one SnumapError line."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise SnumapError(f"--listen {host}:{port}: cannot resolve {host!r} "
                          f"({exc.strerror})") from None
    family, _, _, _, sockaddr = infos[0]
    return family, (str(sockaddr[0]), int(sockaddr[1]))


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            om = "application/openmetrics-text" in (self.headers.get("Accept") or "")
            body = self.server.render(om)
            ctype = OPENMETRICS if om else TEXT
            code = 200
        elif path == "/":
            body = b"<html><body><a href='/metrics'>/metrics</a></body></html>\n"
            ctype, code = "text/html; charset=utf-8", 200
        else:
            body, ctype, code = b"not found\n", "text/plain; charset=utf-8", 404
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Silent: a scrape every 15 s is not news."""


OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
TEXT = "text/plain; version=0.0.4; charset=utf-8"


class MetricsServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with a socket timeout per connection and a cap on the
    connections served at once."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], family: int, render: Callable[[bool], bytes],
                 *, timeout: float = 10.0, max_clients: int = 16, queue_wait: float = 2.0
                 ) -> None:
        self.address_family = family
        self.render = render
        self.client_timeout = timeout
        self.queue_wait = queue_wait
        self._slots = threading.BoundedSemaphore(max_clients)
        self.rejected = 0
        try:
            super().__init__(address, _Handler)
        except OSError as exc:
            host, port = address
            shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            why = {errno.EADDRINUSE: "the port is in use",
                   errno.EADDRNOTAVAIL: "no such address on this machine",
                   errno.EACCES: "permission denied (a port below 1024 needs root)"}.get(
                       exc.errno or 0, exc.strerror or str(exc))
            raise SnumapError(f"cannot listen on {shown}: {why}") from None

    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        # Wait a little for a slot (a burst of scrapes is served in turn), then turn away.
        if not self._slots.acquire(timeout=self.queue_wait):
            self.rejected += 1
            try:
                request.settimeout(0.5)
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                b"Connection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        request.settimeout(self.client_timeout)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: socket.socket,  # type: ignore[override]
                               client_address: object) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    @property
    def port(self) -> int:
        return int(self.server_address[1])


def serve(listen: str, render: Callable[[bool], bytes], **kw: float) -> MetricsServer:
    """Bind (bad input is one SnumapError line) and serve on a daemon thread."""
    host, port = parse_listen(listen)
    family, addr = resolve(host, port)
    srv = MetricsServer(addr, family, render, **kw)   # type: ignore[arg-type]
    threading.Thread(target=srv.serve_forever, name="snumap-exporter-http",
                     daemon=True).start()
    return srv


# ---- textfile --------------------------------------------------------------------------
def check_textfile_dir(directory: str) -> Path:
    """The directory, checked writable by writing (root ignores modes, a read-only mount
    does not): one SnumapError line when it is not."""
    d = Path(directory)
    if not d.is_dir():
        raise SnumapError(f"--textfile {directory}: not a directory")
    try:        # mkstemp: O_EXCL under an unpredictable name, never through a planted link
        fd, probe = tempfile.mkstemp(prefix=".snumap.prom.", suffix=".probe", dir=d)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise SnumapError(f"--textfile {directory}: cannot write there "
                          f"({exc.strerror or exc})") from None
    return d


TEXTFILE_MODE = 0o644      # node_exporter reads it as its own user; counters, no command lines


def write_textfile(directory: Path, body: bytes) -> None:
    """DIR/snumap.prom replaced atomically (write a temporary file, rename it over): the
    textfile collector never reads half a file. The temporary file is made by mkstemp in
    DIR (O_EXCL, a name no other user can guess and plant as a link) and its name does not
    end in .prom, so the collector ignores it; the rename replaces whatever entry is at
    snumap.prom (a link there is replaced, never followed)."""
    fd, name = tempfile.mkstemp(prefix=f".{TEXTFILE_NAME}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            os.fchmod(f.fileno(), TEXTFILE_MODE)
        os.replace(name, directory / TEXTFILE_NAME)
    except BaseException:
        try:
            os.unlink(name)
        except OSError:
            pass
        raise
