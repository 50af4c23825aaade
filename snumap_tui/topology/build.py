"""Build a :class:`Topology` from hwloc: this machine, an XML export, a synthetic description or
a gathered /sys + /proc tree (hwloc's HWLOC_FSROOT).

This is the one place the topology package touches hwloc, and it imports the binding lazily
inside :func:`load_topology`, so reading a recording (``Topology.from_json``) never needs the
library. Every hwloc failure a user can cause (a missing file, an XML hwloc rejects, an XML
from hwloc 3.x, a wrong synthetic string, a missing fsroot) becomes one SnumapError line.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snumap_tui.errors import SnumapError
from snumap_tui.topology import isolate
from snumap_tui.topology.build_io import walk_io
from snumap_tui.topology.model import Topology
from snumap_tui.topology.validate import MAX_PU

if TYPE_CHECKING:  # pragma: no cover
    from snumap_tui.native import hwloc as _hw

# hwloc XML: <topology version="2.0"> (2.x writes "2.0"; hwloc 3.x writes "3.0" with a
# hwloc3.dtd doctype; 1.x wrote no version attribute).
_XML_VERSION = re.compile(r"<topology\b[^>]*\bversion=\"(\d+)(?:\.(\d+))?\"")
_XML_V3_DOCTYPE = re.compile(r"<!DOCTYPE\s+topology\s+SYSTEM\s+\"hwloc3\.dtd\"")


# What lstopo sets so hwloc explains a rejected XML file or synthetic string on stderr.
_VERBOSE = {"HWLOC_XML_VERBOSE": "1", "HWLOC_SYNTHETIC_VERBOSE": "1"}


def xml_major_version(head: str) -> int | None:
    """The hwloc XML format major version declared in the first bytes of an export."""
    m = _XML_VERSION.search(head)
    if m:
        return int(m.group(1))
    if _XML_V3_DOCTYPE.search(head):
        return 3
    return None


# The first element of an XML document, after its declaration, comments, processing
# instructions and DOCTYPE (XML 1.0, section 2.8 "Prolog").
_XML_PROLOG = re.compile(r"\A(?:\ufeff)?(?:\s+|<\?.*?\?>|<!--.*?-->"
                         r"|<!DOCTYPE[^>\[]*(?:\[.*?\])?\s*>)*", re.DOTALL)
_XML_ROOT = re.compile(r"<([A-Za-z_][\w.:-]*)")
# What hwloc says on its own about any XML without a DOCTYPE: noise, never the reason.
_XML_NOISE = ("Loading XML topology without DTD",)


def xml_root_element(head: str) -> str | None:
    """The root element's name in the first bytes of an XML file; "" when the text is not
    XML at all (no element where the first one should be); None when the prolog is longer
    than ``head`` (let hwloc decide)."""
    m = _XML_PROLOG.match(head)
    rest = head[m.end():] if m else head
    if not rest:
        return None
    root = _XML_ROOT.match(rest)
    if root:
        return root.group(1)
    # A comment, PI or DOCTYPE still open at the end of the head: undecided.
    return None if rest.startswith(("<!", "<?")) else ""


# hwloc builds a synthetic topology in C without a way to stop it: "pack:99999 core:99999
# pu:99999" asked for 10^15 objects, grew memory and ignored Ctrl-C. The largest real machines
# have a few thousand PUs (~20 000 objects with their cores and caches), which loads in a second
# or two; beyond this many objects a description is refused before hwloc sees it.
MAX_SYNTHETIC_OBJECTS = 1 << 15
# hwloc also takes time in the square of one object's children: "core:16000 pu:1" (32 001
# objects) ran 93 s, "core:4000 pu:1" 5 s, "core:1024 pu:1" 0.3 s. A real level holds at most
# a few hundred (cores of a package).
MAX_SYNTHETIC_ARITY = 1024
_SYN_ATTRS = re.compile(r"\([^()]*\)")
_SYN_MEMORY = re.compile(r"\[[^\[\]]*\]")
_SYN_LEVEL = re.compile(r"(?:[A-Za-z][\w]*:)?(\d+)")


def synthetic_object_count(desc: str) -> int | None:
    """How many objects an hwloc synthetic description makes (levels "type:arity" or bare
    arities, attributes in parentheses, memory attached in brackets: one object per parent),
    or None when the text is not in that shape (hwloc then says what is wrong)."""
    text = _SYN_ATTRS.sub(" ", desc)
    total = per_level = 1
    for tok in _SYN_MEMORY.sub(" [mem] ", text).split():
        if tok == "[mem]":
            total += per_level
            continue
        m = _SYN_LEVEL.fullmatch(tok)
        if m is None:
            return None
        per_level *= int(m.group(1))
        total += per_level
        if total > 1 << 62:        # no need to multiply further
            return total
    return total


def synthetic_max_arity(desc: str) -> int:
    """The most children one object gets in a synthetic description (its largest level)."""
    text = _SYN_MEMORY.sub(" ", _SYN_ATTRS.sub(" ", desc))
    arities = [int(m.group(1)) for tok in text.split()
               if (m := _SYN_LEVEL.fullmatch(tok)) is not None]
    return max(arities, default=0)


def check_synthetic(desc: str) -> None:
    n = synthetic_object_count(desc)
    if n is not None and n > MAX_SYNTHETIC_OBJECTS:
        raise SnumapError(f"synthetic description {desc!r} makes {n:,} objects; at most "
                          f"{MAX_SYNTHETIC_OBJECTS:,} are accepted (a real machine has a few "
                          "thousand)")
    arity = synthetic_max_arity(desc)
    if arity > MAX_SYNTHETIC_ARITY:
        raise SnumapError(f"synthetic description {desc!r} gives one object {arity:,} children;"
                          f" at most {MAX_SYNTHETIC_ARITY:,} are accepted (hwloc's time grows "
                          "with their square)")


def _check_pus(raw: list[dict[str, Any]], source: str) -> None:
    """What hwloc accepts and the model cannot hold: a PU without an OS index (an XML whose PU
    lacks os_index), or numbered beyond any Linux CPU (PU tables are indexed by it)."""
    for d in raw:
        if d["type"] == "PU" and (d["os_index"] is None or d["os_index"] > MAX_PU):
            what = "no os_index" if d["os_index"] is None else f"os_index {d['os_index']}"
            raise SnumapError(f"topology of {source}: PU L#{d['logical_index']} has {what}; "
                              f"PUs need an OS index in 0..{MAX_PU}")


def first_c_error(lines: list[str]) -> str | None:
    """The most telling line of what libxml2/hwloc printed: a parser error if there is one
    (hwloc's remark about a missing DTD is not a reason and is skipped)."""
    lines = [ln for ln in lines if not any(n in ln for n in _XML_NOISE)]
    for ln in lines:
        if "error" in ln.lower():
            return re.sub(r"\s+", " ", ln)
    return re.sub(r"\s+", " ", lines[0]) if lines else None


def _check_readable_file(path: Path, what: str) -> None:
    if not path.exists():
        raise SnumapError(f"{what} {path}: no such file")
    if path.is_dir():
        raise SnumapError(f"{what} {path}: is a directory, not a file")
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as exc:
        raise SnumapError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None


# What a topology file may be: hwloc's XML of the largest machines with their I/O devices is a
# few MB. Read whole (bounded) before hwloc sees it, so it can be screened.
MAX_TOPOLOGY_FILE = 64 << 20
# The one DOCTYPE hwloc writes: an external DTD named by the format, no internal subset.
_XML_DOCTYPE = re.compile(rb"<!DOCTYPE\b[^>\[]*>|<!DOCTYPE\b")
_XML_HWLOC_DOCTYPE = re.compile(rb'<!DOCTYPE\s+topology\s+SYSTEM\s+"hwloc[0-9]?\.dtd"\s*>')


def read_topology_file(path: Path) -> bytes:
    """The bytes of a topology file: a regular file (a FIFO would block, /dev/zero never end)
    of at most MAX_TOPOLOGY_FILE bytes; SnumapError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SnumapError(f"topology file {path}: cannot read it ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SnumapError(f"topology file {path}: not a regular file")
        body = f.read(MAX_TOPOLOGY_FILE + 1)
    if len(body) > MAX_TOPOLOGY_FILE:
        raise SnumapError(f"topology file {path}: larger than {MAX_TOPOLOGY_FILE >> 20} MiB; "
                          "not a topology")
    return body


def screen_xml(path: Path, body: bytes) -> None:
    """Refuse what no hwloc export holds and what reaches libxml2's dangerous paths: a DTD
    subset inside the file or entity declarations (the system's hwloc/libxml2 crash on an
    internal DTD subset, and entities expand without bound). hwloc's own DOCTYPE, an external
    ``hwloc2.dtd``, is fine."""
    if b"<!ENTITY" in body:
        raise SnumapError(f"topology file {path}: declares XML entities; an hwloc export "
                          "never does (refused before parsing)")
    for m in _XML_DOCTYPE.finditer(body):
        if not _XML_HWLOC_DOCTYPE.match(body, m.start()):
            raise SnumapError(f"topology file {path}: has a DOCTYPE other than hwloc's "
                              "(an internal DTD subset?); refused before parsing")


# Entries of an --fsroot tree looked at before hwloc reads it (a gathered tree has ~3,000).
MAX_FSROOT_ENTRIES = 200_000


def screen_fsroot(root: Path) -> None:
    """Refuse a tree holding a FIFO, a device or a socket under sys/ or proc/: hwloc (C, no
    timeout) would block on a FIFO for ever and read /dev/zero to the end of memory. A
    gathered tree holds files, directories and links only. At most MAX_FSROOT_ENTRIES are
    looked at, without following links."""
    seen = 0
    stack = [(root / "sys", 64), (root / "proc", 2)]
    while stack and seen < MAX_FSROOT_ENTRIES:
        d, depth = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for e in it:
                seen += 1
                try:
                    mode = e.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                if stat.S_ISDIR(mode):
                    if depth > 0:
                        stack.append((Path(e.path), depth - 1))
                elif not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                    rel = os.path.relpath(e.path, root)
                    raise SnumapError(f"fsroot {root}: {rel} is not a file (a FIFO or a "
                                      "device); a gathered tree holds only files")


def _check_fsroot(root: Path) -> None:
    if not root.exists():
        raise SnumapError(f"fsroot {root}: no such directory")
    if not root.is_dir():
        raise SnumapError(f"fsroot {root}: not a directory (unpack the gathered tarball first)")
    if not (root / "sys" / "devices" / "system" / "cpu").is_dir():
        raise SnumapError(f"fsroot {root}: no sys/devices/system/cpu inside; it is not a "
                          "gathered /sys + /proc tree (hwloc-gather-topology output)")
    check_links_inside(root)
    screen_fsroot(root)


def check_links_inside(root: Path) -> None:
    """Refuse a tree with a symbolic link that leads out of it (``cpu/online ->
    /etc/shadow``): hwloc and the sources would read this machine's file as root. Links that
    stay inside (a gathered tree's relative ones) are fine. One line, naming the link, never
    what it points to or holds."""
    top = Path(os.path.realpath(root))
    for d, dirs, files in os.walk(top):       # does not descend into linked directories
        for name in (*dirs, *files):
            p = os.path.join(d, name)
            if not os.path.islink(p) or _read_as_link(os.path.relpath(p, top)):
                continue
            real = Path(os.path.realpath(p))
            if real != top and top not in real.parents:
                rel = os.path.relpath(p, top)
                raise SnumapError(f"fsroot {root}: {rel} is a symbolic link out of the tree; "
                                  "refusing to read through it")


def _read_as_link(rel: str) -> bool:
    """/proc links that snumap reads with readlink(), never through: proc/PID/fd/N (a
    gathered one names /dev/... or socket:[...]), cwd, exe and root."""
    parts = rel.split(os.sep)
    if parts[0] != "proc" or len(parts) < 3:
        return False
    return parts[-2] == "fd" or (parts[-1] in ("cwd", "exe", "root") and len(parts) in (3, 5))


def _object_dict(hw: Any, o: Any) -> dict[str, Any]:
    """One hwloc object as the plain dict Topology.from_flat takes."""
    t = int(o.type)
    d: dict[str, Any] = {
        "type": hw.type_string(t),
        "os_index": None if o.os_index == hw.HWLOC_UNKNOWN_INDEX else int(o.os_index),
        "logical_index": int(o.logical_index),
        # hwloc's depth: negative special levels for memory objects (HWLOC_TYPE_DEPTH_*).
        "depth": int(o.depth),
        "cpuset": hw.bitmap_indexes(o.cpuset),
        "nodeset": hw.bitmap_indexes(o.nodeset),
        "name": hw.decode(o.name),
        "subtype": hw.decode(o.subtype),
        # hwloc has no "unknown": 0 bytes means it was not given (an XML without
        # local_memory, a tree without meminfo), and unknown is not zero.
        "total_memory": int(o.total_memory) or None,
        "infos": hw.infos(o.infos, o.infos_count) if o.infos_count else [],
    }
    if o.attr:
        attr = o.attr.contents
        if hw.obj_type_is_cache(t) or t == hw.OBJ_MEMCACHE:
            c = attr.cache
            d["cache_size"] = int(c.size)
            d["cache_depth"] = int(c.depth)
            d["cache_linesize"] = int(c.linesize) or None
            d["cache_type"] = hw.CACHE_TYPE_NAMES.get(int(c.type))
        elif t == hw.OBJ_NUMANODE:
            d["local_memory"] = int(attr.numanode.local_memory) or None
    return d


def walk_hwloc(hw: Any, root: Any, io_roots: list[tuple[int, Any]] | None = None
               ) -> tuple[list[dict[str, Any]], list[int | None], list[list[int]]]:
    """Flatten hwloc's tree in the model's order: depth first, memory children (NUMA nodes,
    memory-side caches) before normal children; Misc children are left out, and I/O children
    too, but the objects that have some are listed in ``io_roots`` with their ids."""
    raw: list[dict[str, Any]] = []
    parents: list[int | None] = []
    kids: list[list[int]] = []
    # Explicit stack of (object, parent id); children pushed reversed to pop in order.
    stack: list[tuple[Any, int | None]] = [(root, None)]
    while stack:
        o, parent = stack.pop()
        my_id = len(raw)
        raw.append(_object_dict(hw, o))
        parents.append(parent)
        kids.append([])
        if parent is not None:
            kids[parent].append(my_id)
        if io_roots is not None and o.io_arity:
            io_roots.append((my_id, o))
        children = list(hw.memory_children(o)) + list(hw.normal_children(o))
        stack.extend((c, my_id) for c in reversed(children))
    return raw, parents, kids


def _extras(hw: Any, topo: _hw.HwlocTopology, raw_root: dict[str, Any],
            source: str, kind: str) -> dict[str, Any]:
    kinds = [{"cpuset": k.cpus, "efficiency": k.efficiency, "infos": k.infos}
             for k in topo.cpukinds()]
    dists = []
    for m in topo.distances(hw.DISTANCES_KIND_MEANS_LATENCY):
        if any(t != hw.OBJ_NUMANODE for t in m.obj_types):
            continue  # only NUMA latency matrices are part of the model
        dists.append({"name": m.name, "kind": m.kind, "nodes": m.os_indexes,
                      "values": m.values})
    meta = {k: v for k, v in raw_root.get("infos", ())}
    meta["source"] = source
    meta["source_kind"] = kind
    return {"cpukinds": kinds, "distances": dists, "meta": meta}


def _fail(what: str, lines: list[str], fallback: str) -> SnumapError:
    detail = first_c_error(lines) or fallback
    return SnumapError(f"{what}: {detail}")


def load_topology(xml: str | Path | None = None, synthetic: str | None = None,
                  fsroot: str | Path | None = None, io: bool = True) -> Topology:
    """The topology of this machine (all None), an hwloc XML file, a synthetic description, or
    a gathered /sys + /proc tree. A snumap JSON topology (``snumap topo --json``) is accepted
    in place of XML and read without hwloc. ``io=False`` leaves the I/O objects out."""
    given = [n for n, v in (("--topology", xml), ("--synthetic", synthetic),
                            ("--fsroot", fsroot)) if v is not None]
    if len(given) > 1:
        raise SnumapError(f"{' and '.join(given)} name different machines: give only one")
    if synthetic is not None:
        check_synthetic(synthetic)       # before hwloc, which cannot be stopped once loading

    if xml is not None:
        path = Path(xml)
        _check_readable_file(path, "topology file")
        body = read_topology_file(path)
        head = body[:4096]
        if head.lstrip().startswith(b"{"):
            try:
                return Topology.from_json(body)
            except ValueError as exc:
                raise SnumapError(f"topology file {path}: not a snumap topology "
                                  f"({str(exc)[:200]})") from None
        text = head.decode("utf-8", "replace")
        root_name = xml_root_element(text)
        if not text.strip():
            raise SnumapError(f"not an hwloc XML topology: {path} (empty file)")
        if root_name is not None and root_name != "topology":
            what = f"root element <{root_name}>, not <topology>" if root_name else "not XML"
            raise SnumapError(f"not an hwloc XML topology: {path} ({what})")
        major = xml_major_version(text)
        if major is not None and major != 2:
            raise SnumapError(
                f"topology file {path}: hwloc XML format {major}.x, but snumap reads hwloc 2.x "
                "XML; export it with hwloc 2.x (lstopo --of xml)")
        screen_xml(path, body)

    if xml is None and fsroot is None:
        return _load_with_hwloc(None, synthetic, None, io)
    # A file or a tree others wrote: hwloc reads it in a child (topology/isolate.py), so a
    # crash or a hang in C costs one line, not the process.
    what = f"topology file {xml}" if xml is not None else f"fsroot {fsroot}"
    text = isolate.in_child(lambda: _load_with_hwloc(xml, None, fsroot, io).to_json(), what)
    try:
        return Topology.from_json(text)
    except ValueError as exc:
        raise SnumapError(f"{what}: hwloc read a topology snumap cannot use "
                          f"({str(exc)[:200]})") from None


def _load_with_hwloc(xml: str | Path | None, synthetic: str | None,
                     fsroot: str | Path | None, io: bool) -> Topology:
    """load_topology's work once its arguments are checked (in this process or a child)."""
    from snumap_tui.native import hwloc as hw  # lazily: only loading needs the library

    with hw.HwlocTopology(io=io) as topo:
        env: dict[str, str] | None = None
        if xml is not None:
            source, kind = str(xml), "xml"
            # The XML backend parses in set_xml; verbose makes it say why it refuses.
            with hw.captured_c_stderr() as lines, hw.environment(_VERBOSE):
                rc = topo.set_xml(os.fspath(xml))
                if rc == 0:
                    rc = topo.load()
            if rc != 0:
                # libxml2 prefixes "FILE:LINE:"; the file is already in the message.
                lines = [ln.replace(f"{os.fspath(xml)}:", "line ", 1) for ln in lines]
                raise _fail(f"hwloc rejected the XML topology {xml}", lines,
                            "not a valid hwloc XML export")
        elif synthetic is not None:
            source, kind = synthetic, "synthetic"
            with hw.captured_c_stderr() as lines, hw.environment(_VERBOSE):
                rc = topo.set_synthetic(synthetic)
                if rc == 0:
                    rc = topo.load()
            if rc != 0:
                raise _fail(f"hwloc rejected the synthetic description {synthetic!r}", lines,
                            "invalid description")
        else:
            if fsroot is not None:
                root = Path(fsroot)
                _check_fsroot(root)
                source, kind = str(fsroot), "fsroot"
                # hwloc 2.x reads the root from HWLOC_FSROOT; THISSYSTEM=0 says the tree is
                # not this machine (no binding, no CPUID of this CPU mixed in).
                env = {"HWLOC_FSROOT": str(root.resolve()), "HWLOC_THISSYSTEM": "0"}
                topo.blacklist_component("x86")
            else:
                source, kind = "this machine", "machine"
            with hw.captured_c_stderr() as lines:
                rc = topo.load(env)
            if rc != 0:
                raise _fail(f"hwloc could not read the topology of {source}", lines,
                            "hwloc_topology_load failed")
        io_roots: list[tuple[int, Any]] = []
        raw, parents, kids = walk_hwloc(hw, topo.root(), io_roots)
        _check_pus(raw, source)
        extra = _extras(hw, topo, raw[0], source, kind)
        extra["io"] = walk_io(hw, io_roots, raw)
    return Topology.from_flat(raw, parents, kids, extra)
