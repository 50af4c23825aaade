"""A ctypes binding to the system's libbpf (libbpf.so.1): open, configure, load and attach a
compiled eBPF object (CO-RE, built ahead of time by scripts/build_bpf.py), read and write its
maps, consume its ring buffers.

Why ctypes and the distribution's library: nothing is compiled at run time (no LLVM, no kernel
headers, unlike bcc), and the wheel stays pure Python. libbpf 1.x reports errors the "1.0 way"
(a NULL pointer with errno set, or a negative errno returned), which this module turns into
``BpfError`` -- an OSError with one line saying what failed and why, so callers can fall back.

The library is loaded lazily (never at import time) and its version is checked: 1.0 or newer
(libbpf_major_version() exists from 0.6 on; 0.x returned errors differently). libbpf's own log
(verifier output, CO-RE relocation failures) goes to a print callback that keeps the recent
lines instead of writing on stderr; an error message quotes the telling one.

Layouts transcribed from libbpf 1.x's ``libbpf.h`` (struct bpf_uprobe_opts, the sample callback
of ring_buffer__new, the print callback) and the kernel's ``include/uapi/linux/btf.h``
(struct btf_type, struct btf_var_secinfo). Nothing here imports the rest of snumap except the
error type.
"""

from __future__ import annotations

import collections
import ctypes
import errno as errno_mod
import os
import re
import struct
import threading
from collections.abc import Callable, Iterator
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_int,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Any

LIBRARY = "libbpf.so.1"
# Users with a private build (or a test) point this at another file.
LIBRARY_ENV = "SNUMAP_LIBBPF_LIB"
DEBIAN_PACKAGE = "libbpf1"
MIN_VERSION = (1, 0)

# enum bpf_map_type (include/uapi/linux/bpf.h), the ones we name.
MAP_HASH, MAP_ARRAY, MAP_PERCPU_HASH, MAP_PERCPU_ARRAY = 1, 2, 5, 6
MAP_LRU_PERCPU_HASH, MAP_RINGBUF = 10, 27
PERCPU_MAP_TYPES = (MAP_PERCPU_HASH, MAP_PERCPU_ARRAY, MAP_LRU_PERCPU_HASH)
# map update flags
BPF_ANY, BPF_NOEXIST, BPF_EXIST = 0, 1, 2
# enum libbpf_print_level
PRINT_WARN, PRINT_INFO, PRINT_DEBUG = 0, 1, 2
# BTF kinds (include/uapi/linux/btf.h)
BTF_KIND_VAR, BTF_KIND_DATASEC = 14, 15

KERNEL_BTF = Path("/sys/kernel/btf/vmlinux")


class BpfError(OSError):
    """A libbpf call failed: ``errno`` is set, ``str()`` is one line."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__(err, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


# ---- C layouts ---------------------------------------------------------------------------------
class UprobeOpts(Structure):
    """struct bpf_uprobe_opts (libbpf 1.0-1.1 fields; ``sz`` tells newer libbpfs which)."""

    _fields_ = [("sz", c_size_t), ("ref_ctr_offset", c_size_t), ("bpf_cookie", c_uint64),
                ("retprobe", c_bool), ("func_name", c_char_p)]


class BtfType(Structure):
    """struct btf_type: name_off, info (kind in bits 24-28, vlen in bits 0-15), size/type."""

    _fields_ = [("name_off", c_uint32), ("info", c_uint32), ("size_or_type", c_uint32)]


class BtfVarSecinfo(Structure):
    """struct btf_var_secinfo: one variable of a DATASEC (follows the btf_type)."""

    _fields_ = [("type", c_uint32), ("offset", c_uint32), ("size", c_uint32)]


# int (*)(enum libbpf_print_level, const char *fmt, va_list) -- va_list is passed as a pointer
# on x86_64 and aarch64 (an array type, resp. a >16-byte aggregate passed by reference).
PRINT_FN = CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)
# int (*)(void *ctx, void *data, size_t size)
SAMPLE_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t)

_SIGNATURES: list[tuple[str, object, list[object]]] = [
    ("libbpf_major_version", c_uint32, []),
    ("libbpf_minor_version", c_uint32, []),
    ("libbpf_version_string", c_char_p, []),
    ("libbpf_strerror", c_int, [c_int, c_char_p, c_size_t]),
    ("libbpf_set_print", c_void_p, [PRINT_FN]),
    ("libbpf_num_possible_cpus", c_int, []),
    ("libbpf_probe_bpf_map_type", c_int, [c_int, c_void_p]),
    ("bpf_object__open_file", c_void_p, [c_char_p, c_void_p]),
    ("bpf_object__load", c_int, [c_void_p]),
    ("bpf_object__close", None, [c_void_p]),
    ("bpf_object__name", c_char_p, [c_void_p]),
    ("bpf_object__btf", c_void_p, [c_void_p]),
    ("bpf_object__find_map_by_name", c_void_p, [c_void_p, c_char_p]),
    ("bpf_object__find_program_by_name", c_void_p, [c_void_p, c_char_p]),
    ("bpf_object__next_map", c_void_p, [c_void_p, c_void_p]),
    ("bpf_object__next_program", c_void_p, [c_void_p, c_void_p]),
    ("bpf_map__name", c_char_p, [c_void_p]),
    ("bpf_map__fd", c_int, [c_void_p]),
    ("bpf_map__type", c_int, [c_void_p]),
    ("bpf_map__key_size", c_uint32, [c_void_p]),
    ("bpf_map__value_size", c_uint32, [c_void_p]),
    ("bpf_map__max_entries", c_uint32, [c_void_p]),
    ("bpf_map__set_max_entries", c_int, [c_void_p, c_uint32]),
    ("bpf_map__initial_value", c_void_p, [c_void_p, POINTER(c_size_t)]),
    ("bpf_map__lookup_elem", c_int, [c_void_p, c_void_p, c_size_t, c_void_p, c_size_t,
                                     c_uint64]),
    ("bpf_map__update_elem", c_int, [c_void_p, c_void_p, c_size_t, c_void_p, c_size_t,
                                     c_uint64]),
    ("bpf_map__delete_elem", c_int, [c_void_p, c_void_p, c_size_t, c_uint64]),
    ("bpf_map__get_next_key", c_int, [c_void_p, c_void_p, c_void_p, c_size_t]),
    ("bpf_program__name", c_char_p, [c_void_p]),
    ("bpf_program__section_name", c_char_p, [c_void_p]),
    ("bpf_program__set_autoload", c_int, [c_void_p, c_bool]),
    ("bpf_program__fd", c_int, [c_void_p]),
    ("bpf_program__attach", c_void_p, [c_void_p]),
    ("bpf_program__attach_raw_tracepoint", c_void_p, [c_void_p, c_char_p]),
    ("bpf_program__attach_uprobe_opts", c_void_p, [c_void_p, c_int, c_char_p, c_size_t,
                                                   POINTER(UprobeOpts)]),
    ("bpf_link__destroy", c_int, [c_void_p]),
    ("btf__find_by_name_kind", c_int, [c_void_p, c_char_p, c_uint32]),
    ("btf__type_by_id", POINTER(BtfType), [c_void_p, c_uint32]),
    ("btf__name_by_offset", c_char_p, [c_void_p, c_uint32]),
    ("ring_buffer__new", c_void_p, [c_int, SAMPLE_FN, c_void_p, c_void_p]),
    ("ring_buffer__poll", c_int, [c_void_p, c_int]),
    ("ring_buffer__consume", c_int, [c_void_p]),
    ("ring_buffer__epoll_fd", c_int, [c_void_p]),
    ("ring_buffer__free", None, [c_void_p]),
]


# ---- loading the library -----------------------------------------------------------------------
_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()
_log: collections.deque[str] = collections.deque(maxlen=400)
_log_lock = threading.Lock()
_libc = ctypes.CDLL(None, use_errno=True)
_vsnprintf = _libc.vsnprintf
_vsnprintf.restype = c_int
_vsnprintf.argtypes = [c_char_p, c_size_t, c_char_p, c_void_p]


def _print(level: int, fmt: bytes | None, args: int | None) -> int:
    """libbpf's print callback: format the message (vsnprintf on the va_list) and keep it."""
    if level > PRINT_INFO or fmt is None:
        return 0
    buf = ctypes.create_string_buffer(2048)
    _vsnprintf(buf, len(buf), fmt, args)
    text = buf.value.decode("utf-8", "replace")
    with _log_lock:
        _log.extend(ln.rstrip() for ln in text.splitlines() if ln.strip())
    return 0


_print_cb = PRINT_FN(_print)   # kept alive for as long as libbpf may call it


def library_name() -> str:
    return os.environ.get(LIBRARY_ENV) or LIBRARY


def check_version(version: tuple[int, int], name: str) -> None:
    """Refuse a libbpf older than 1.0 (error returns and struct options differ)."""
    if version < MIN_VERSION:
        raise BpfError(errno_mod.ENOTSUP,
                       f"{name} is libbpf {version[0]}.{version[1]}, snumap needs 1.0 or newer "
                       f"(Debian/Ubuntu: {DEBIAN_PACKAGE}; RHEL 9: libbpf)")


def lib() -> ctypes.CDLL:
    """The loaded, version-checked library (loaded on first use); BpfError if unusable."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        name = library_name()
        try:
            handle = ctypes.CDLL(name, use_errno=True)
        except OSError as exc:
            raise BpfError(errno_mod.ENOENT,
                           f"cannot load libbpf ({name}): {exc}; install {DEBIAN_PACKAGE} "
                           f"(apt-get install {DEBIAN_PACKAGE}; RHEL: dnf install libbpf)"
                           ) from None
        try:
            major, minor = handle.libbpf_major_version, handle.libbpf_minor_version
        except AttributeError:
            raise BpfError(errno_mod.ENOTSUP, f"{name} is not libbpf 1.x "
                           "(no libbpf_major_version)") from None
        major.restype = minor.restype = c_uint32
        check_version((int(major()), int(minor())), name)
        for fname, restype, argtypes in _SIGNATURES:
            try:
                f = getattr(handle, fname)
            except AttributeError:
                raise BpfError(errno_mod.ENOTSUP, f"{name} lacks {fname}") from None
            f.restype = restype
            f.argtypes = argtypes
        handle.libbpf_set_print(_print_cb)
        _lib = handle
        return handle


def version() -> str:
    """libbpf's version string, e.g. "v1.1"."""
    return (lib().libbpf_version_string() or b"?").decode()


def library_path() -> str | None:
    """The file the loaded libbpf came from (/proc/self/maps), or None."""
    lib()
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and "/libbpf.so" in parts[5]:
                return parts[5].strip()
    except OSError:
        return None
    return None


def log_lines(since: int = 0) -> list[str]:
    """libbpf's messages kept so far (warnings and info), from index SINCE of the kept ones."""
    with _log_lock:
        return list(_log)[since:]


def _log_mark() -> int:
    with _log_lock:
        return len(_log)


def strerror(err: int) -> str:
    buf = ctypes.create_string_buffer(256)
    lib().libbpf_strerror(err, buf, len(buf))
    return buf.value.decode("utf-8", "replace") or os.strerror(err)


# What an errno means for a BPF operation, in the user's terms.
_HINTS = {
    errno_mod.EPERM: "not permitted: needs root, or CAP_BPF + CAP_PERFMON",
    errno_mod.EACCES: "refused by the kernel's verifier",
    errno_mod.ENOENT: "not found",
    errno_mod.ESRCH: "a type or field the program uses is not in this kernel's BTF",
    errno_mod.EINVAL: "invalid argument (kernel too old for this program type?)",
    errno_mod.E2BIG: "too big for this kernel",
    errno_mod.ENOTSUP: "not supported by this kernel",
    errno_mod.EOPNOTSUPP: "not supported by this kernel",
    errno_mod.ENOMEM: "out of memory (or RLIMIT_MEMLOCK too low on kernels before 5.11)",
    errno_mod.EBADF: "bad file descriptor",
}
_PROG = re.compile(r"libbpf: prog '([^']+)'")
_LOG_TAIL = ("processed ", "verification time", "stack depth", "-- END", "mark_read")


def telling_line(lines: list[str]) -> str | None:
    """The line of libbpf's log that explains a failure best: the verifier's last complaint
    (the last line of a program's load log before its statistics), else the last line saying
    what failed (a CO-RE relocation, a missing attach target), never the generic "failed to
    load object"."""
    prog: str | None = None
    block: list[str] | None = None
    last: str | None = None
    for ln in lines:
        m = _PROG.search(ln)
        if "-- BEGIN PROG LOAD LOG --" in ln:
            prog, block = (m.group(1) if m else None), []
            continue
        if block is not None:
            if "-- END PROG LOAD LOG --" in ln:
                said = [x for x in block if x.strip() and not x.startswith(_LOG_TAIL)]
                if said:
                    last = (f"prog {prog}: " if prog else "") + said[-1].strip()
                block = None
            else:
                block.append(ln)
            continue
        if ("fail" in ln or "error" in ln or "not found" in ln) and \
                "failed to load object" not in ln and "failed to load: " not in ln and \
                "BPF program load failed" not in ln:
            last = ln.removeprefix("libbpf: ").strip()
    return last[:200] if last else None


def _reason(what: str, err: int, mark: int) -> BpfError:
    """One line: WHAT failed, errno's meaning, and the most telling libbpf log line since
    MARK (the verifier's last complaint, a CO-RE relocation that found no field)."""
    err = abs(err)
    hint = _HINTS.get(err) or strerror(err)
    told = telling_line(log_lines(mark))
    detail = f" [{told}]" if told else ""
    return BpfError(err, f"{what}: {hint} (errno {err}: {os.strerror(err)}){detail}")


def _check(ret: int, what: str, mark: int) -> int:
    if ret < 0:
        raise _reason(what, ret, mark)
    return ret


def _ptr(p: int | None, what: str, mark: int) -> int:
    if not p:
        raise _reason(what, ctypes.get_errno() or errno_mod.EINVAL, mark)
    return p


def num_possible_cpus() -> int:
    return _check(lib().libbpf_num_possible_cpus(), "libbpf_num_possible_cpus", _log_mark())


def probe_map_type(map_type: int) -> bool:
    """Whether this kernel supports MAP_TYPE (e.g. MAP_RINGBUF: Linux >= 5.8)."""
    return lib().libbpf_probe_bpf_map_type(map_type, None) == 1


def kernel_btf_missing() -> str | None:
    """Why CO-RE programs cannot run here (no kernel BTF), or None."""
    if not KERNEL_BTF.exists():
        return (f"no kernel BTF ({KERNEL_BTF}): the kernel was built without "
                "CONFIG_DEBUG_INFO_BTF")
    return None


def _as_buffer(value: Any, size: int, what: str) -> Any:
    """VALUE (bytes, bytearray, a ctypes object, a numpy array) as a C buffer of SIZE bytes."""
    raw = bytes(memoryview(value).cast("B"))
    if len(raw) != size:
        raise ValueError(f"{what} is {len(raw)} bytes, the map wants {size}")
    return ctypes.create_string_buffer(raw, size)


# ---- objects -----------------------------------------------------------------------------------
class Link:
    """An attachment (struct bpf_link); ``destroy()`` detaches it (safe to call twice)."""

    def __init__(self, ptr: int, what: str) -> None:
        self._ptr: int | None = ptr
        self.what = what

    @property
    def attached(self) -> bool:
        return self._ptr is not None

    def destroy(self) -> None:
        ptr, self._ptr = self._ptr, None
        if ptr:
            lib().bpf_link__destroy(ptr)


class BpfMap:
    """One map of an object. Keys and values are bytes (or anything with the buffer
    protocol) of the map's sizes; per-CPU maps take and return ``value_size`` x possible CPUs
    (each slot rounded up to 8 bytes), as the kernel does."""

    def __init__(self, obj: BpfObject, ptr: int) -> None:
        self._obj = obj
        self._ptr = ptr
        L = lib()
        self.name = (L.bpf_map__name(ptr) or b"").decode()
        self.type = int(L.bpf_map__type(ptr))

    @property
    def fd(self) -> int:
        return int(lib().bpf_map__fd(self._ptr))

    @property
    def key_size(self) -> int:
        return int(lib().bpf_map__key_size(self._ptr))

    @property
    def value_size(self) -> int:
        return int(lib().bpf_map__value_size(self._ptr))

    @property
    def max_entries(self) -> int:
        return int(lib().bpf_map__max_entries(self._ptr))

    def set_max_entries(self, n: int) -> None:
        """Before load: the map's capacity (a ring buffer's size in bytes, a power of two
        number of pages)."""
        _check(lib().bpf_map__set_max_entries(self._ptr, n),
               f"map {self.name}: set_max_entries({n})", _log_mark())

    def _value_bytes(self) -> int:
        if self.type in PERCPU_MAP_TYPES:
            return ((self.value_size + 7) & ~7) * num_possible_cpus()
        return self.value_size

    def lookup(self, key: Any) -> bytes | None:
        """The value for KEY, or None if there is none."""
        k = _as_buffer(key, self.key_size, "key")
        n = self._value_bytes()
        v = ctypes.create_string_buffer(n)
        mark = _log_mark()
        ret = lib().bpf_map__lookup_elem(self._ptr, k, len(k), v, n, 0)
        if ret == -errno_mod.ENOENT:
            return None
        _check(ret, f"map {self.name}: lookup", mark)
        return v.raw

    def update(self, key: Any, value: Any, flags: int = BPF_ANY) -> None:
        k = _as_buffer(key, self.key_size, "key")
        v = _as_buffer(value, self._value_bytes(), "value")
        mark = _log_mark()
        _check(lib().bpf_map__update_elem(self._ptr, k, len(k), v, len(v), flags),
               f"map {self.name}: update", mark)

    def delete(self, key: Any) -> bool:
        """Remove KEY; False if it was not there."""
        k = _as_buffer(key, self.key_size, "key")
        mark = _log_mark()
        ret = lib().bpf_map__delete_elem(self._ptr, k, len(k), 0)
        if ret == -errno_mod.ENOENT:
            return False
        _check(ret, f"map {self.name}: delete", mark)
        return True

    def all_keys(self) -> Iterator[bytes]:
        """Every key (a snapshot walk: entries added or removed meanwhile may be missed)."""
        ks = self.key_size
        cur: Any = None
        nxt = ctypes.create_string_buffer(ks)
        while True:
            ret = lib().bpf_map__get_next_key(self._ptr, cur, nxt, ks)
            if ret == -errno_mod.ENOENT:
                return
            _check(ret, f"map {self.name}: get_next_key", _log_mark())
            key = nxt.raw
            yield key
            cur = ctypes.create_string_buffer(key, ks)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        for k in list(self.all_keys()):
            v = self.lookup(k)
            if v is not None:
                yield k, v

    def update_u32(self, key: int, value: int) -> None:
        """The common case of a u32 -> u32 map."""
        self.update(struct.pack("<I", key), struct.pack("<I", value))


class BpfProgram:
    """One program of an object."""

    def __init__(self, obj: BpfObject, ptr: int) -> None:
        self._obj = obj
        self._ptr = ptr
        L = lib()
        self.name = (L.bpf_program__name(ptr) or b"").decode()
        self.section = (L.bpf_program__section_name(ptr) or b"").decode()

    def set_autoload(self, on: bool) -> None:
        """Before load: whether this program is loaded at all (alternatives for other
        kernels)."""
        _check(lib().bpf_program__set_autoload(self._ptr, on),
               f"program {self.name}: set_autoload", _log_mark())

    @property
    def fd(self) -> int:
        return int(lib().bpf_program__fd(self._ptr))

    def attach(self) -> Link:
        """Attach where the section name says (tp_btf/NAME, raw_tp/NAME, tracepoint/..,
        uprobe/PATH:FUNC ...)."""
        mark = _log_mark()
        p = _ptr(lib().bpf_program__attach(self._ptr),
                 f"attaching {self.name} ({self.section})", mark)
        return self._obj._keep(Link(p, self.section))

    def attach_raw_tracepoint(self, name: str) -> Link:
        mark = _log_mark()
        p = _ptr(lib().bpf_program__attach_raw_tracepoint(self._ptr, name.encode()),
                 f"attaching {self.name} to raw tracepoint {name}", mark)
        return self._obj._keep(Link(p, f"raw_tp/{name}"))

    def attach_uprobe(self, binary: str | os.PathLike[str], func: str | None = None, *,
                      offset: int = 0, pid: int = -1, retprobe: bool = False,
                      cookie: int = 0) -> Link:
        """A uprobe (or uretprobe) on FUNC (a symbol name, resolved by libbpf in BINARY's ELF
        symbol tables) plus OFFSET, or on the file OFFSET alone. PID -1: every process that
        maps BINARY; a pid: that process only (the kernel filters)."""
        opts = UprobeOpts(sz=ctypes.sizeof(UprobeOpts), ref_ctr_offset=0, bpf_cookie=cookie,
                          retprobe=retprobe, func_name=func.encode() if func else None)
        mark = _log_mark()
        kind = "uretprobe" if retprobe else "uprobe"
        where = f"{binary}:{func or ''}{'+' if func and offset else ''}" \
                f"{hex(offset) if offset or not func else ''}"
        p = _ptr(lib().bpf_program__attach_uprobe_opts(self._ptr, pid, os.fsencode(binary),
                                                       offset, ctypes.byref(opts)),
                 f"attaching {self.name} as {kind} {where} (pid {pid})", mark)
        return self._obj._keep(Link(p, f"{kind}/{where}"))


class BpfObject:
    """An opened (then loaded) ELF object; a context manager that detaches every link and
    closes the object (its programs and maps) on exit, also after an error."""

    def __init__(self, ptr: int, path: str) -> None:
        self._ptr: int | None = ptr
        self.path = path
        self.links: list[Link] = []
        self.loaded = False

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> BpfObject:
        L = lib()
        mark = _log_mark()
        p = _ptr(L.bpf_object__open_file(os.fsencode(path), None),
                 f"opening BPF object {path}", mark)
        return cls(p, os.fspath(path))

    def __enter__(self) -> BpfObject:  # noqa: PYI034 - py3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def ptr(self) -> int:
        if self._ptr is None:
            raise ValueError("the BPF object is closed")
        return self._ptr

    @property
    def name(self) -> str:
        return (lib().bpf_object__name(self.ptr) or b"").decode()

    def _keep(self, link: Link) -> Link:
        self.links.append(link)
        return link

    def map(self, name: str) -> BpfMap:
        p = lib().bpf_object__find_map_by_name(self.ptr, name.encode())
        if not p:
            raise KeyError(f"no map {name!r} in {self.path}")
        return BpfMap(self, p)

    def program(self, name: str) -> BpfProgram:
        p = lib().bpf_object__find_program_by_name(self.ptr, name.encode())
        if not p:
            raise KeyError(f"no program {name!r} in {self.path}")
        return BpfProgram(self, p)

    def maps(self) -> list[BpfMap]:
        out, p = [], lib().bpf_object__next_map(self.ptr, None)
        while p:
            out.append(BpfMap(self, p))
            p = lib().bpf_object__next_map(self.ptr, p)
        return out

    def programs(self) -> list[BpfProgram]:
        out, p = [], lib().bpf_object__next_program(self.ptr, None)
        while p:
            out.append(BpfProgram(self, p))
            p = lib().bpf_object__next_program(self.ptr, p)
        return out

    def global_offsets(self, section: str = ".rodata") -> dict[str, tuple[int, int]]:
        """{variable: (offset, size)} of the global variables in SECTION, from the object's
        BTF (its DATASEC lists each variable with offset and size)."""
        L = lib()
        btf = L.bpf_object__btf(self.ptr)
        if not btf:
            raise BpfError(errno_mod.ENOENT, f"{self.path} has no BTF")
        sec_id = L.btf__find_by_name_kind(btf, section.encode(), BTF_KIND_DATASEC)
        if sec_id < 0:
            return {}
        t = L.btf__type_by_id(btf, sec_id)
        vlen = t.contents.info & 0xFFFF
        infos = ctypes.cast(ctypes.addressof(t.contents) + ctypes.sizeof(BtfType),
                            POINTER(BtfVarSecinfo))
        out = {}
        for i in range(vlen):
            vi = infos[i]
            var = L.btf__type_by_id(btf, vi.type)
            if (var.contents.info >> 24) & 0x1F != BTF_KIND_VAR:
                continue
            name = (L.btf__name_by_offset(btf, var.contents.name_off) or b"").decode()
            out[name] = (int(vi.offset), int(vi.size))
        return out

    def set_global(self, name: str, value: bytes, section: str = ".rodata") -> None:
        """Before load: the initial value of global variable NAME (``const volatile`` in
        .rodata for settings the verifier then sees as constants, so dead branches are
        pruned)."""
        if self.loaded:
            raise ValueError("globals in .rodata are fixed once the object is loaded")
        offs = self.global_offsets(section)
        if name not in offs:
            raise KeyError(f"no global {name!r} in {section} of {self.path}")
        off, size = offs[name]
        if len(value) != size:
            raise ValueError(f"{name} is {size} bytes, got {len(value)}")
        m = next((m for m in self.maps() if m.name.endswith(section)), None)
        if m is None:
            raise KeyError(f"no {section} map in {self.path}")
        sz = c_size_t(0)
        p = lib().bpf_map__initial_value(m._ptr, ctypes.byref(sz))
        if not p or off + size > sz.value:
            raise BpfError(errno_mod.EINVAL, f"cannot set {name}: {section} not mapped")
        ctypes.memmove(p + off, value, size)

    def load(self) -> None:
        """CO-RE relocation against the kernel's BTF, verification, maps created."""
        mark = _log_mark()
        _check(lib().bpf_object__load(self.ptr), f"loading {Path(self.path).name}", mark)
        self.loaded = True

    def attach_all(self) -> list[Link]:
        """Attach every loaded program where its section says; on failure, detach those
        already attached before raising."""
        done = []
        try:
            for prog in self.programs():
                if prog.fd < 0:       # not loaded (autoload off)
                    continue
                done.append(prog.attach())
        except BaseException:
            for link in done:
                link.destroy()
            raise
        return done

    def detach(self) -> None:
        """Destroy every link (programs stop running; maps stay readable)."""
        links, self.links = self.links, []
        for link in links:
            link.destroy()

    def close(self) -> None:
        """Detach, then free the object, its programs and maps. Safe to call twice."""
        self.detach()
        ptr, self._ptr = self._ptr, None
        if ptr:
            lib().bpf_object__close(ptr)


class RingBuffer:
    """libbpf's consumer of BPF_MAP_TYPE_RINGBUF maps: CALLBACK(bytes) per record.

    One Python call per record: fine for rare events (regions, exits); for scheduling events
    snumap maps the ring itself and decodes batches with numpy
    (snumap_tui/trace/bpf_ring.py; bench/ringbuf_read.py compares the two)."""

    def __init__(self, bpf_map: BpfMap, callback: Callable[[bytes], object]) -> None:
        def sample(_ctx: int | None, data: int | None, size: int) -> int:
            try:
                callback(ctypes.string_at(data, size) if data else b"")
            except Exception:   # noqa: BLE001 - an exception cannot cross the C frame
                self.errors += 1
                return -errno_mod.ECANCELED
            return 0

        self.errors = 0
        self._cb = SAMPLE_FN(sample)      # kept alive with the ring
        mark = _log_mark()
        self._ptr: int | None = _ptr(lib().ring_buffer__new(bpf_map.fd, self._cb, None, None),
                                     f"ring buffer on map {bpf_map.name}", mark)

    def poll(self, timeout_ms: int = 0) -> int:
        """Wait up to TIMEOUT_MS for records, hand them over; how many were consumed."""
        if self._ptr is None:
            return 0
        ret = lib().ring_buffer__poll(self._ptr, timeout_ms)
        if ret == -errno_mod.EINTR:
            return 0
        if ret == -errno_mod.ECANCELED:
            return 0
        return _check(ret, "ring_buffer__poll", _log_mark())

    def consume(self) -> int:
        """Hand over whatever is there now, without waiting."""
        if self._ptr is None:
            return 0
        ret = lib().ring_buffer__consume(self._ptr)
        if ret == -errno_mod.ECANCELED:
            return 0
        return _check(ret, "ring_buffer__consume", _log_mark())

    def free(self) -> None:
        ptr, self._ptr = self._ptr, None
        if ptr:
            lib().ring_buffer__free(ptr)
