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
import threading
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
from typing import TYPE_CHECKING, Any

from snumap_tui.native.libc import libc

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
    ("bpf_map_create", c_int, [c_int, c_char_p, c_uint32, c_uint32, c_uint32, c_void_p]),
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
    ("bpf_program__set_expected_attach_type", c_int, [c_void_p, c_int]),
    ("bpf_program__fd", c_int, [c_void_p]),
    ("bpf_program__attach", c_void_p, [c_void_p]),
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
_log_total = 0     # lines ever kept: a mark stays valid once the deque drops old lines
_log_lock = threading.Lock()
_vsnprintf = libc().vsnprintf
_vsnprintf.restype = c_int
_vsnprintf.argtypes = [c_char_p, c_size_t, c_char_p, c_void_p]


def _print(level: int, fmt: bytes | None, args: int | None) -> int:
    """libbpf's print callback: format the message (vsnprintf on the va_list) and keep it."""
    if level > PRINT_INFO or fmt is None:
        return 0
    buf = ctypes.create_string_buffer(2048)
    _vsnprintf(buf, len(buf), fmt, args)
    text = buf.value.decode("utf-8", "replace")
    global _log_total
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    with _log_lock:
        _log.extend(lines)
        _log_total += len(lines)
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
    from snumap_tui.native.mapped import mapped_file

    lib()
    return mapped_file("/libbpf.so")


def log_lines(since: int = 0) -> list[str]:
    """libbpf's messages (warnings and info) after the first SINCE ever logged (a mark from
    ``_log_mark``), as far as the last 400 lines go back."""
    with _log_lock:
        new = _log_total - since
        return list(_log)[-new:] if new > 0 else []


def _log_mark() -> int:
    """Where libbpf's log stands before an operation. The print callback is installed again
    here: it is process-wide, and bcc (whose libbcc uses the same libbpf.so.1) sets its own
    when it loads a program."""
    lib().libbpf_set_print(_print_cb)
    with _log_lock:
        return _log_total


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


def create_ringbuf(size: int, name: str = "snumap_ring") -> int:
    """A new BPF ring buffer map of SIZE bytes (a power-of-two number of pages), outside any
    object -- e.g. to put into an array of maps; its file descriptor (the caller closes it)."""
    mark = _log_mark()
    return _check(lib().bpf_map_create(MAP_RINGBUF, name.encode()[:15], 0, 0, size, None),
                  f"BPF ring buffer of {size} bytes", mark)


def probe_map_type(map_type: int) -> bool:
    """Whether this kernel supports MAP_TYPE (e.g. MAP_RINGBUF: Linux >= 5.8)."""
    return lib().libbpf_probe_bpf_map_type(map_type, None) == 1


def kernel_btf_missing() -> str | None:
    """Why CO-RE programs cannot run here (no kernel BTF), or None."""
    if not KERNEL_BTF.exists():
        return (f"no kernel BTF ({KERNEL_BTF}): the kernel was built without "
                "CONFIG_DEBUG_INFO_BTF")
    return None


# The objects (BpfObject, BpfMap, BpfProgram, Link, RingBuffer) live in bpf_objects.py, which
# imports this module: they are looked up from it when first asked for (``libbpf.BpfObject``),
# so either module can be imported first.
_OBJECTS = ("BpfMap", "BpfObject", "BpfProgram", "Link", "RingBuffer")

if TYPE_CHECKING:
    from snumap_tui.native.bpf_objects import (  # noqa: F401 - re-exported
        BpfMap,
        BpfObject,
        BpfProgram,
        Link,
        RingBuffer,
    )


def __getattr__(name: str) -> Any:
    if name in _OBJECTS:
        from snumap_tui.native import bpf_objects

        return getattr(bpf_objects, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
