"""Which network interfaces a process's TCP/UDP sockets use, from /proc files alone.

A socket names no adapter, but its local address does: ``/proc/PID/fd/N -> socket:[INODE]``,
the same inode in ``/proc/PID/net/{tcp,udp}{,6}`` (the process's network namespace) gives the
local address (proc(5), "/proc/net/tcp": hexadecimal, the IPv4 address and each 32-bit word of
an IPv6 one in host byte order), and the address belongs to an interface:

- IPv6: ``/proc/net/if_inet6`` lists every address with its interface name;
- IPv4: the longest-prefix match in ``/proc/net/route`` (Iface, Destination, Mask; host byte
  order too), the route the kernel's source address belongs to.

Sockets bound to any address (0.0.0.0, ::) are skipped (no interface yet), so are those on lo.
"""

from __future__ import annotations

import ipaddress
import re
import sys
from pathlib import Path

from snumap_tui.sources._io import Reader, read_optional, read_text
from snumap_tui.sources.iodev import fd_links

_SOCKET = re.compile(r"^socket:\[(\d+)\]$")
_TABLES = ("tcp", "tcp6", "udp", "udp6")


def _le_word(hexword: str) -> bytes:
    """A 32-bit word as /proc/net prints it (host order, little-endian here) -> its bytes in
    memory order."""
    return int(hexword, 16).to_bytes(4, sys.byteorder)


def parse_address(hexaddr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """'0100007F' -> 127.0.0.1; 32 hex digits -> the IPv6 address (IPv4-mapped ones as IPv4)."""
    if len(hexaddr) == 8:
        return ipaddress.IPv4Address(_le_word(hexaddr))
    raw = b"".join(_le_word(hexaddr[i:i + 8]) for i in range(0, 32, 8))
    addr = ipaddress.IPv6Address(raw)
    return addr.ipv4_mapped or addr


def parse_socket_table(text: str) -> dict[int, ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """inode -> local address of every socket of a /proc/net/{tcp,udp}{,6} table."""
    out: dict[int, ipaddress.IPv4Address | ipaddress.IPv6Address] = {}
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10:
            continue
        try:
            local = f[1].split(":")[0]
            out[int(f[9])] = parse_address(local)
        except ValueError:
            continue
    return out


def parse_routes(text: str) -> list[tuple[str, ipaddress.IPv4Network]]:
    """(interface, network) of every /proc/net/route line, longest prefix first."""
    out = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 8:
            continue
        try:
            dest = ipaddress.IPv4Address(_le_word(f[1]))
            mask = ipaddress.IPv4Address(_le_word(f[7]))
            net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
        except ValueError:
            continue
        out.append((f[0], net))
    return sorted(out, key=lambda r: -r[1].prefixlen)


def parse_if_inet6(text: str) -> dict[ipaddress.IPv6Address, str]:
    """address -> interface of /proc/net/if_inet6 ("fe80...01 02 40 20 80 eth0")."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 6 and len(f[0]) == 32:
            try:
                out[ipaddress.IPv6Address(bytes.fromhex(f[0]))] = f[5]
            except ValueError:
                continue
    return out


def socket_interfaces(root: Path, pid: int, reader: Reader = read_text,
                      limit: int = 65536, links: list[tuple[int, str]] | None = None
                      ) -> list[str]:
    """The interfaces (other than lo) the sockets of process ``pid`` are bound to, in first
    use order (``links``: its fds if already read, ``fd_links``)."""
    if links is None:
        links = fd_links(root, pid, limit)
    inodes = [int(m.group(1)) for _, t in links if (m := _SOCKET.match(t))]
    if not inodes:
        return []
    local: dict[int, ipaddress.IPv4Address | ipaddress.IPv6Address] = {}
    for table in _TABLES:
        text = read_optional(reader, root / "proc" / str(pid) / "net" / table)
        if text:
            local.update(parse_socket_table(text))
    routes = parse_routes(read_optional(reader, root / "proc/net/route") or "")
    v6 = parse_if_inet6(read_optional(reader, root / "proc/net/if_inet6") or "")
    out: list[str] = []
    for ino in inodes:
        addr = local.get(ino)
        if addr is None or addr.is_unspecified or addr.is_loopback:
            continue
        if isinstance(addr, ipaddress.IPv6Address):
            iface = v6.get(addr)
        else:
            iface = next((i for i, net in routes if addr in net), None)
        if iface and iface != "lo" and iface not in out:
            out.append(iface)
    return out
