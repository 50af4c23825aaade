"""The files of a study directory, read and written as files another user may have planted.

A study directory sits on a shared node (a shared file system, under a Slurm array), and
`snumap scale` runs as root there, so what it reads from a study can be a trap:

- **Trust** (``trusted``): before a study is run or resumed (its command executed, its
  frequencies applied), the directory, ``runs/``, the manifest, the run files and the restore
  files must be owned by the invoking user or root and writable by no one else; else one line
  and exit 2. Reading a study (`scale report`, `export`, `view`) needs no trust: what is read
  is only shown, after the checks below.
- **Reads** (``read_json``): a regular file (a FIFO is refused without blocking on it, a link
  is not followed), at most ``MAX_BYTES``, decoded within a budget of items and nesting, with
  no NaN or Infinity (``topology/jsonlimits.py``); then the caller checks it against its
  schema (study/schema.py).
- **Writes** (``write_text``, ``make_dir``, ``open_log`` for a command's output): through ``safeout`` -- a fresh temporary file
  beside the target, renamed over it, no link followed, 0600 as root (directories 0700).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.safeout import SafeOutput, default_mode, dir_mode
from snumap_tui.textsafe import safe_text

MAX_BYTES = 16 << 20     # a manifest of 100,000 runs is ~10 MB; a run file a few hundred kB
MAX_DEPTH = 32           # what snumap writes nests 6 deep
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


class TrustError(SnumapError):
    """A file or directory of a study that the invoking user may not run or apply from."""


def _name(path: Path | str) -> str:
    return safe_text(str(path))[:300]


def untrusted_why(st: os.stat_result) -> str | None:
    """Why a file or directory of status ST cannot be trusted to run or apply from: owned by
    a user who is neither the invoking one nor root, or writable by group or others."""
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        return f"owned by uid {st.st_uid}, not by you (uid {me}) or root"
    if st.st_mode & 0o022:
        return f"writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def check_trusted(path: Path | str, st: os.stat_result, what: str) -> None:
    why = untrusted_why(st)
    if why:
        raise TrustError(f"{_name(path)}: {what} {why}: refused (a study runs commands and "
                          "sets CPU frequencies from it)")


def trusted_dir(path: Path | str, what: str = "the study directory") -> None:
    """PATH is a directory (not a link to one) the invoking user may run a study from."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise SnumapError(f"{_name(path)}: no such directory") from None
    if stat.S_ISLNK(st.st_mode):
        raise SnumapError(f"{_name(path)} is a symbolic link: give the directory itself")
    if not stat.S_ISDIR(st.st_mode):
        raise SnumapError(f"{_name(path)} exists and is not a directory")
    check_trusted(path, st, what)


def read_bytes(path: Path | str, *, trust: bool = False, limit: int = MAX_BYTES,
               what: str = "file") -> bytes:
    """A regular file of at most LIMIT bytes (with TRUST: one the invoking user may act on),
    read as the sources read kernel files (``sources/_io.py``: without blocking on a FIFO),
    never through a link. FileNotFoundError passes through; everything else is one
    SnumapError line."""
    from snumap_tui.sources._io import read_bytes as read_regular

    def opener(p: Path | str, flags: int) -> int:
        fd = os.open(p, flags | os.O_NOFOLLOW)
        if trust:
            try:
                check_trusted(p, os.fstat(fd), what)
            except BaseException:
                os.close(fd)
                raise
        return fd

    try:
        return read_regular(path, limit, opener)
    except FileNotFoundError:
        raise
    except OSError as exc:
        why = {errno.ELOOP: "is a symbolic link: refused",
               errno.EINVAL: "is not a regular file: refused",
               errno.EFBIG: f"is larger than {limit:,} bytes: refused"}.get(exc.errno or 0)
        if why:
            raise SnumapError(f"{_name(path)} {why}") from None
        raise SnumapError(f"cannot read {_name(path)}: {exc.strerror or exc}") from None


def read_json(path: Path | str, *, trust: bool = False, what: str = "file") -> Any:
    """The JSON value in PATH, read as ``read_bytes`` reads and decoded within a budget."""
    from snumap_tui.topology.jsonlimits import JsonLimitError, loads

    data = read_bytes(path, trust=trust, what=what)
    try:
        value = loads(data, max_bytes=MAX_BYTES, max_depth=MAX_DEPTH)
    except JsonLimitError as exc:
        raise SnumapError(f"{_name(path)}: not JSON snumap wrote ({exc})") from None
    # Strict UTF-8 has no surrogates: only a \uD800-\uDFFF escape makes one, so the walk
    # (a third of a decode's time) is for texts that hold such an escape.
    if _SURROGATE_ESCAPE.search(data) and _has_lone_surrogate(value):
        raise SnumapError(f"{_name(path)}: not JSON snumap wrote (text with a lone surrogate, "
                          "which is no character)")
    return value


def _has_lone_surrogate(value: Any) -> bool:
    """Whether a string in VALUE (keys too) holds a lone surrogate (``"\\udcff"`` in JSON):
    snumap never writes one (sources/_io.py decode_name), and no export could encode it."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if not v.isascii() and _SURROGATE.search(v):
                return True
        elif isinstance(v, dict):
            stack.extend(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def study_mode() -> int:
    """The mode of a study's own files: safeout's (0600 as root, else what the umask leaves),
    never writable by group or others -- a umask of 002 would make a study its own user may
    no longer run (``trusted``)."""
    return default_mode() & ~0o022


def write_text(path: Path, text: str, *, executable: bool = False) -> None:
    """TEXT as PATH, a file of the study, replaced whole (safeout: beside, renamed; no link
    followed; ``study_mode``, searchable where readable when EXECUTABLE: a script)."""
    mode = dir_mode(study_mode()) if executable else study_mode()
    with SafeOutput(path, force=True, mode=mode) as sink, sink.open(text=True) as f:
        f.write(text)


def write_bytes(path: Path, data: bytes, *, force: bool) -> None:
    """DATA as PATH through safeout (replacing PATH only with FORCE)."""
    with SafeOutput(path, force=force) as sink, sink.open() as f:
        f.write(data)


def open_log(path: Path) -> int:
    """PATH made afresh (a killed run's file removed) for a command's output, and its fd: never
    through a link, ``study_mode`` (private as root, like every output: safeout)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                   study_mode())


def make_dir(path: Path) -> None:
    """PATH made (its parents as mkdir -p makes them), 0700 as root, never writable by group
    or others; an existing directory is kept as it is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, dir_mode(study_mode()))
    except FileExistsError:
        pass
