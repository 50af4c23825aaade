"""The objects of the libbpf binding (native/libbpf.py): an opened ELF object, its maps and
programs, their attachments (links), and libbpf's ring-buffer consumer. Use them through
``snumap_tui.native.libbpf``, which loads the library and re-exports them."""

from __future__ import annotations

import ctypes
import errno as errno_mod
import os
import struct
from collections.abc import Callable, Iterator
from ctypes import POINTER, c_size_t
from pathlib import Path
from typing import Any

from snumap_tui.native.libbpf import (
    BPF_ANY,
    BTF_KIND_DATASEC,
    BTF_KIND_VAR,
    PERCPU_MAP_TYPES,
    SAMPLE_FN,
    BpfError,
    BtfType,
    BtfVarSecinfo,
    UprobeOpts,
    _check,
    _log_mark,
    _ptr,
    lib,
    num_possible_cpus,
)


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

    def set_expected_attach_type(self, attach_type: int) -> None:
        """Before load: the attach type (enum bpf_attach_type) when the section name does not
        give it, e.g. BPF_TRACE_UPROBE_MULTI, which libbpf 1.1 knows no section for."""
        _check(lib().bpf_program__set_expected_attach_type(self._ptr, attach_type),
               f"program {self.name}: set_expected_attach_type", _log_mark())

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
