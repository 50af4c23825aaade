"""Function symbols of ELF files, for uprobes and for naming code addresses.

A uprobe is placed at a *file offset* (perf_event_open(2), ``config2`` of the ``uprobe`` PMU;
Documentation/trace/uprobetracer.rst), so a symbol's virtual address is turned into one through
the PT_LOAD segment holding it: ``offset = vaddr - p_vaddr + p_offset``. A runtime address in a
process goes the other way through the process's mapping of that file (/proc/PID/maps,
Documentation/filesystems/proc.rst): ``file offset = addr - map_start + map_offset``.

Symbols come from ``.symtab`` (local functions such as GCC's outlined ``main._omp_fn.0``, gone
when the file is stripped) and ``.dynsym`` (exported entry points, always there in a shared
library). File and line come from DWARF ``.debug_line`` when the file has it. pyelftools (the
``regions`` extra) does the parsing; everything is cached per (path, inode, mtime).
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.errors import SnumapError
from snumap_tui.extras import install_extra
from snumap_tui.trace import probe_point


def have_elftools() -> bool:
    try:
        import elftools  # noqa: F401
    except ImportError:
        return False
    return True


def need_elftools() -> None:
    if not have_elftools():
        raise SnumapError(f"regions need pyelftools: {install_extra('regions')}")


def _dynamic(sec: Any, path: str, needed: list[str], runpath: list[str]) -> None:
    """DT_NEEDED names and DT_RUNPATH/DT_RPATH directories ($ORIGIN resolved) of a
    dynamic section, appended to ``needed`` and ``runpath``."""
    for tag in sec.iter_tags():
        if tag.entry.d_tag == "DT_NEEDED":
            needed.append(str(getattr(tag, "needed", "")))
        elif tag.entry.d_tag in ("DT_RUNPATH", "DT_RPATH"):
            v = getattr(tag, "runpath", None) or getattr(tag, "rpath", "")
            origin = os.path.dirname(os.path.abspath(path))
            runpath += [d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
                        for d in str(v).split(":") if d]


@dataclass(frozen=True)
class Segment:
    vaddr: int
    offset: int
    filesz: int
    exec: bool


@dataclass
class ElfFile:
    """One ELF file's function symbols (sorted by address) and load segments."""

    path: str
    pie_or_dso: bool                      # ET_DYN: addresses are relative to the load base
    segments: list[Segment]
    names: list[str]
    addr: np.ndarray                      # u64, sorted
    size: np.ndarray                      # u64
    by_name: dict[str, int]               # name -> address (the first seen wins)
    stripped: bool                        # no .symtab: local functions are not named
    needed: list[str] = field(default_factory=list)
    runpath: list[str] = field(default_factory=list)
    has_dwarf: bool = False
    machine: str = ""                     # e_machine as pyelftools names it: EM_X86_64 ...
    _lines: tuple[np.ndarray, list[str], np.ndarray] | None = None

    def file_offset(self, vaddr: int) -> int | None:
        for s in self.segments:
            if s.vaddr <= vaddr < s.vaddr + s.filesz:
                return vaddr - s.vaddr + s.offset
        return None

    def vaddr_of_offset(self, off: int) -> int | None:
        for s in self.segments:
            if s.offset <= off < s.offset + s.filesz:
                return off - s.offset + s.vaddr
        return None

    def offset_of(self, name: str) -> int | None:
        """The file offset of function NAME (for a uprobe), None when the file has no such
        symbol."""
        a = self.by_name.get(name)
        return None if a is None else self.file_offset(a)

    def probe_offset(self, name: str, keep_args: bool = False) -> int | None:
        """Where to put a uprobe for function NAME: its file offset, moved forward to the
        first instruction the kernel emulates when that is safe (trace/probe_point.py: a hit
        there costs ~0.3 us instead of ~14 us single-stepped). KEEP_ARGS: the probe reads an
        argument register, so no instruction passed over may write one."""
        off = self.offset_of(name)
        # The file's own instruction set decides, not the host's: an i386 program on an
        # x86-64 host is 32-bit code, which the decoder (64-bit mode) would misread.
        if off is None or self.machine != "EM_X86_64":
            return off
        a = self.by_name[name]
        i = int(np.searchsorted(self.addr, a, "left"))
        size = int(self.size[i]) if i < len(self.addr) and int(self.addr[i]) == a else 0
        try:
            with open(self.path, "rb") as f:
                f.seek(off)
                code = f.read(min(size, probe_point.MAX_FUNC_BYTES) if size else 16)
        except OSError:
            return off
        skip = probe_point.fallback_skip(code) if not size else \
            probe_point.probe_skip(code, keep_args)
        # Another symbol starting inside what the probe passes over (an alias entry point, a
        # jump target of its own) would reach the probe without passing the entry.
        j = int(np.searchsorted(self.addr, a, "right"))
        if skip and j < len(self.addr) and int(self.addr[j]) <= a + skip:
            return off
        return off + skip

    def symbol_at(self, vaddr: int) -> str | None:
        """The function containing VADDR (or starting nearest below it, when sizes are 0)."""
        if not len(self.addr):
            return None
        i = int(np.searchsorted(self.addr, vaddr, "right")) - 1
        if i < 0:
            return None
        a, z = int(self.addr[i]), int(self.size[i])
        if z and vaddr >= a + z:
            return None
        return self.names[i]

    def matching(self, pattern: re.Pattern[str]) -> list[str]:
        return sorted(n for n in self.by_name if pattern.search(n))

    def line_of(self, vaddr: int) -> str | None:
        """``file.c:LINE`` of VADDR from DWARF line tables, None without debug info."""
        if not self.has_dwarf:
            return None
        if self._lines is None:
            self._lines = _line_table(self.path)
        addrs, files, lines = self._lines
        if not len(addrs):
            return None
        i = int(np.searchsorted(addrs, vaddr, "right")) - 1
        if i < 0:
            return None
        return f"{files[i]}:{int(lines[i])}"


_CACHE: dict[tuple[str, int, int], ElfFile] = {}


def load_elf(path: str | Path) -> ElfFile:
    """The symbols of the ELF file at PATH (cached). SnumapError if it is missing or not ELF."""
    need_elftools()
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    p = str(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise SnumapError(f"{p}: no such file (the binary is gone?)") from None
    except OSError as e:
        raise SnumapError(f"cannot read {p}: {e.strerror}") from None
    key = (p, st.st_ino, int(st.st_mtime_ns))
    got = _CACHE.get(key)
    if got is not None:
        return got
    try:
        with open(p, "rb") as f:
            if f.read(4) != b"\x7fELF":
                raise SnumapError(f"{p} is not an ELF file")
            f.seek(0)
            elf = ELFFile(f)
            segs = [Segment(int(s["p_vaddr"]), int(s["p_offset"]), int(s["p_filesz"]),
                            bool(int(s["p_flags"]) & 1))
                    for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
            by_name: dict[str, int] = {}
            rows: dict[int, tuple[str, int]] = {}
            symtab = False
            needed: list[str] = []
            runpath: list[str] = []
            for sec in elf.iter_sections():
                if isinstance(sec, SymbolTableSection):
                    symtab = symtab or sec.name == ".symtab"
                    for sym in sec.iter_symbols():
                        if sym["st_info"]["type"] not in ("STT_FUNC", "STT_GNU_IFUNC") or \
                                not sym["st_value"] or sym["st_shndx"] == "SHN_UNDEF":
                            continue
                        name = sym.name.split("@")[0]
                        a = int(sym["st_value"])
                        by_name.setdefault(name, a)
                        # One name per address: a global (MPI_Barrier) over its aliases.
                        old = rows.get(a)
                        if old is None or (old[0].startswith(("_", "P")) and
                                           not name.startswith(("_", "P"))):
                            rows[a] = (name, int(sym["st_size"]))
                elif isinstance(sec, DynamicSection):
                    _dynamic(sec, p, needed, runpath)
            dwarf = elf.get_section_by_name(".debug_line") is not None
            pie = elf["e_type"] == "ET_DYN"
            machine = str(elf["e_machine"])
    except ELFError as e:
        raise SnumapError(f"{p}: unreadable ELF file ({e})") from None
    except OSError as e:
        raise SnumapError(f"cannot read {p}: {e.strerror}") from None
    order = sorted(rows)
    out = ElfFile(p, pie, segs, [rows[a][0] for a in order],
                  np.array(order, dtype=np.uint64),
                  np.array([rows[a][1] for a in order], dtype=np.uint64), by_name,
                  stripped=not symtab, needed=needed, runpath=runpath, has_dwarf=dwarf,
                  machine=machine)
    _CACHE[key] = out
    return out


def _line_table(path: str) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(address, file, line) rows of every DWARF line program, sorted by address."""
    from elftools.elf.elffile import ELFFile

    rows: list[tuple[int, str, int]] = []
    with open(path, "rb") as f:
        elf = ELFFile(f)
        if not elf.has_dwarf_info():
            return np.zeros(0, np.uint64), [], np.zeros(0, np.int64)
        dw = elf.get_dwarf_info()
        for cu in dw.iter_CUs():
            lp = dw.line_program_for_CU(cu)
            if lp is None:
                continue
            fe = lp["file_entry"]
            base = 0 if lp.header["version"] >= 5 else 1
            for e in lp.get_entries():
                s = e.state
                if s is None or s.end_sequence:
                    continue
                i = s.file - base
                name = fe[i].name.decode(errors="replace") if 0 <= i < len(fe) else "?"
                rows.append((int(s.address), os.path.basename(name), int(s.line)))
    rows.sort()
    return (np.array([r[0] for r in rows], dtype=np.uint64), [r[1] for r in rows],
            np.array([r[2] for r in rows], dtype=np.int64))


# ---- the libraries a program loads ----------------------------------------------------------

DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib")


def _ld_dirs() -> list[str]:
    """Library directories: LD_LIBRARY_PATH, /etc/ld.so.conf (with includes), the defaults and
    the multiarch ones (``/usr/lib/x86_64-linux-gnu``)."""
    out = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    seen: set[str] = set()

    def conf(path: Path) -> None:
        if str(path) in seen:
            return
        seen.add(str(path))
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return
        for ln in lines:
            ln = ln.split("#")[0].strip()
            if ln.startswith("include"):
                for inc in sorted(Path("/").glob(ln.split(None, 1)[1].lstrip("/"))):
                    conf(inc)
            elif ln:
                out.append(ln)

    conf(Path("/etc/ld.so.conf"))
    arch = f"{platform.machine()}-linux-gnu"
    out += [f"/lib/{arch}", f"/usr/lib/{arch}", *DEFAULT_DIRS]
    return out


def resolve_needed(name: str, runpath: list[str], ld_dirs: list[str]) -> str | None:
    """NAME (a DT_NEEDED entry) looked up in RUNPATH, then LD_DIRS (``_ld_dirs()``)."""
    if "/" in name:
        return name if os.path.exists(name) else None
    for d in (*runpath, *ld_dirs):
        cand = os.path.join(d, name)
        if os.path.exists(cand):
            return os.path.realpath(cand)
    return None


def needed_of(path: str) -> tuple[list[str], list[str]]:
    """(DT_NEEDED, RUNPATH) of an ELF file, read from its dynamic section alone (cheap: no
    symbol tables), cached like ``load_elf``."""
    need_elftools()
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    try:
        st = os.stat(path)
    except OSError:
        return [], []
    key = (path, st.st_ino, int(st.st_mtime_ns))
    got = _NEEDED.get(key)
    if got is not None:
        return got
    needed: list[str] = []
    runpath: list[str] = []
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return [], []
            f.seek(0)
            for sec in ELFFile(f).iter_sections():
                if isinstance(sec, DynamicSection):
                    _dynamic(sec, path, needed, runpath)
    except (ELFError, OSError):
        return [], []
    _NEEDED[key] = (needed, runpath)
    return needed, runpath


_NEEDED: dict[tuple[str, int, int], tuple[list[str], list[str]]] = {}


def library_closure(path: str, limit: int = 200, keep: Any = None) -> list[str]:
    """PATH and every shared library it needs, transitively (DT_NEEDED resolved as the dynamic
    loader would, closely enough to find the OpenMP and MPI runtimes), real paths; with KEEP
    (a predicate on a path) only those it keeps are returned (the walk goes on through all)."""
    todo = [os.path.realpath(path)]
    seen: list[str] = []
    ld_dirs = _ld_dirs()        # read once a walk, not for every DT_NEEDED entry
    while todo and len(seen) < limit:
        p = todo.pop(0)
        if p in seen:
            continue
        seen.append(p)
        needed, runpath = needed_of(p)
        for n in needed:
            r = resolve_needed(n, runpath, ld_dirs)
            if r and r not in seen:
                todo.append(r)
    return [p for p in seen if keep is None or keep(p)]


def which(cmd: str) -> str | None:
    """CMD as execvp would find it (a path with a slash is taken as it is)."""
    if "/" in cmd:
        return cmd if os.path.isfile(cmd) else None
    for d in os.environ.get("PATH", os.defpath).split(":"):
        c = os.path.join(d or ".", cmd)
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def command_binaries(cmd: list[str]) -> list[str]:
    """The ELF executables a command line names: CMD[0] and any argument that is an ELF file
    (``mpirun -np 2 ./solver``: the ranks exec ./solver later, and their libraries must be
    probed before they start)."""
    out = []
    for i, a in enumerate(cmd):
        p = which(a) if i == 0 else (a if os.path.isfile(a) else None)
        if p and is_elf(p):
            rp = os.path.realpath(p)
            if rp not in out:
                out.append(rp)
    return out


# ---- /proc/PID/maps -------------------------------------------------------------------------

@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    offset: int
    path: str


def parse_maps(text: str) -> list[Mapping]:
    """/proc/PID/maps lines (``start-end perms offset dev inode path``) that map a file."""
    out = []
    for ln in text.splitlines():
        parts = ln.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        a, b = parts[0].split("-")
        path = parts[5].removesuffix(" (deleted)")
        out.append(Mapping(int(a, 16), int(b, 16), parts[1], int(parts[2], 16), path))
    return out


def read_maps(pid: int, root: Path = Path("/")) -> list[Mapping]:
    try:
        # Paths are bytes to the kernel: decoded as the os module does, so each opens again.
        return parse_maps(os.fsdecode((root / f"proc/{pid}/maps").read_bytes()))
    except OSError:
        return []


def mapped_files(maps: list[Mapping]) -> list[str]:
    """The files mapped executable, in map order, once each."""
    out: list[str] = []
    for m in maps:
        if "x" in m.perms and m.path not in out:
            out.append(m.path)
    return out


def resolve_address(maps: list[Mapping], addr: int) -> tuple[str, str | None, str | None]:
    """(file, symbol, file:line) of a code address in a process with these MAPS; the symbol
    and line are None when the file does not name it, the file is "?" when no mapping holds
    the address."""
    for m in maps:
        if m.start <= addr < m.end:
            off = addr - m.start + m.offset
            try:
                e = load_elf(m.path)
            except SnumapError:
                return m.path, None, None
            v = e.vaddr_of_offset(off)
            if v is None:
                return m.path, None, None
            return m.path, e.symbol_at(v), e.line_of(v)
    return "?", None, None
