"""Serving the exposition: a bounded HTTP server, and node_exporter's textfile.

Why not prometheus-client's ``start_http_server``: it starts a thread per connection with no
socket timeout, so a scraper that connects and never sends its request (or never reads the
answer) holds a thread for ever, and a thousand of them hold a thousand threads
(tests/test_exporter_server.py measures it). Here:

- a request has ``header_timeout`` seconds *in all* to arrive (request line and headers), and
  its answer ``timeout`` seconds in all to be sent: a timeout per read let a client that sent
  a header line every few seconds hold its slot for ever;
- at most ``max_clients`` connections are served at once, at most ``max_per_client`` of them
  from one address;
- a new connection that finds no slot takes the one of the connection that has waited longest
  for its headers (an idle keep-alive one, or a slow one), if that one has waited at least
  ``EVICT_AFTER`` seconds: a scraper sends its request in one packet and is past its headers
  at once, so slow or silent clients, however many, cannot keep it out. Only when every slot
  is busy answering does a new connection wait ``queue_wait`` seconds, then get 503.

Memory stays bounded whatever the scrapers do. The sampler runs in its own thread and never
waits for a scrape (a scrape reads the last snapshot).
"""

from __future__ import annotations

import errno
import io
import os
import socket
import sys
import tempfile
import threading
import time
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


class _Conn:
    """One admitted connection: its address, and since when it waits for a request's headers
    (None while a request is being answered)."""

    __slots__ = ("evicted", "ip", "sock", "waiting_since")

    def __init__(self, sock: socket.socket, ip: str) -> None:
        self.sock = sock
        self.ip = ip
        self.waiting_since: float | None = time.monotonic()
        self.evicted = False


class _Deadline(io.RawIOBase):
    """The connection's socket as a raw stream whose reads all end by one deadline (each recv
    gets the time left, not a fresh timeout)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.deadline = time.monotonic()

    def readable(self) -> bool:
        return True

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request deadline passed")
        self.sock.settimeout(left)
        return self.sock.recv_into(buf)


class _DeadlineWriter(io.RawIOBase):
    """Writes that all end by one deadline (``sendall`` with the time left: since Python 3.5
    its timeout bounds the whole call)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.deadline = time.monotonic()

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("answer deadline passed")
        self.sock.settimeout(left)
        self.sock.sendall(b)
        return len(b)


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer
    protocol_version = "HTTP/1.1"
    _reader: _Deadline
    _writer: _DeadlineWriter

    def setup(self) -> None:
        self.connection = self.request
        self._reader = _Deadline(self.connection)
        self._writer = _DeadlineWriter(self.connection)
        self.rfile = io.BufferedReader(self._reader)
        self.wfile = self._writer   # type: ignore[assignment]

    def handle_one_request(self) -> None:
        conn = self.server.conn_of(self.connection)
        now = time.monotonic()
        self._reader.deadline = now + self.server.header_timeout
        self._writer.deadline = now + self.server.header_timeout + self.server.client_timeout
        if conn is not None:
            self.server.mark_waiting(conn, now)
        try:
            super().handle_one_request()
        except (TimeoutError, OSError):
            self.close_connection = True

    def parse_request(self) -> bool:
        ok = super().parse_request()
        # The headers are in: from here the connection is answered, never evicted.
        conn = self.server.conn_of(self.connection)
        if conn is not None:
            self.server.mark_waiting(conn, None)
        self._writer.deadline = time.monotonic() + self.server.client_timeout
        return ok

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
# A connection still waiting for its headers after this long may be closed for a new one.
EVICT_AFTER = 0.5


class MetricsServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with deadlines per request, caps on the connections served at once
    (in all and per client address), and slow clients making way for new ones."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], family: int, render: Callable[[bool], bytes],
                 *, timeout: float = 10.0, max_clients: int = 16, queue_wait: float = 2.0,
                 header_timeout: float = 5.0, max_per_client: int | None = None) -> None:
        self.address_family = family
        self.render = render
        self.client_timeout = timeout
        self.header_timeout = header_timeout
        self.queue_wait = queue_wait
        self.max_clients = max(1, int(max_clients))
        self.max_per_client = max(1, int(max_per_client if max_per_client is not None
                                         else (self.max_clients + 1) // 2))
        self._cond = threading.Condition()
        self._conns: dict[socket.socket, _Conn] = {}
        self._per_ip: dict[str, int] = {}
        self.rejected = 0
        self.evicted = 0
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

    # ---- admission ---------------------------------------------------------------------
    def conn_of(self, sock: socket.socket) -> _Conn | None:
        with self._cond:
            return self._conns.get(sock)

    def mark_waiting(self, conn: _Conn, since: float | None) -> None:
        with self._cond:
            conn.waiting_since = since

    def _victim(self, ip: str | None) -> _Conn | None:
        """The connection that has waited longest for its headers (from ``ip`` only, when
        given), if it has waited at least EVICT_AFTER."""
        limit = time.monotonic() - EVICT_AFTER
        best: _Conn | None = None
        for c in self._conns.values():
            if c.evicted or c.waiting_since is None or c.waiting_since > limit:
                continue
            if ip is not None and c.ip != ip:
                continue
            if best is None or c.waiting_since < (best.waiting_since or 0.0):
                best = c
        return best

    def _admit(self, sock: socket.socket, ip: str) -> bool:
        """Take a slot for ``sock``, closing a slow connection's if none is free; wait at most
        ``queue_wait`` seconds for one when every slot is answering."""
        end = time.monotonic() + self.queue_wait
        with self._cond:
            while True:
                ip_full = self._per_ip.get(ip, 0) >= self.max_per_client
                if len(self._conns) < self.max_clients and not ip_full:
                    self._conns[sock] = _Conn(sock, ip)
                    self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
                    return True
                victim = self._victim(ip if ip_full else None)
                if victim is not None:
                    victim.evicted = True
                    self.evicted += 1
                    try:       # its thread's recv returns at once, and the thread lets go
                        victim.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1 if victim is None else left))

    def _release(self, sock: socket.socket) -> None:
        with self._cond:
            conn = self._conns.pop(sock, None)
            if conn is not None:
                n = self._per_ip.get(conn.ip, 1) - 1
                if n > 0:
                    self._per_ip[conn.ip] = n
                else:
                    self._per_ip.pop(conn.ip, None)
            self._cond.notify_all()

    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        ip = str(client_address[0]) if isinstance(client_address, tuple) else ""
        if not self._admit(request, ip):
            self.rejected += 1
            try:
                request.settimeout(0.5)
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                b"Connection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def process_request_thread(self, request: socket.socket,  # type: ignore[override]
                               client_address: object) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away (or was closed for a new one) is no error to print."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)   # type: ignore[arg-type]

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
