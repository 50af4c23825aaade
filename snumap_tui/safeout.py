"""Every file snumap writes goes through here: nothing is destroyed that was not asked for.

The rule (README, "Files and safety"):

- An output is written under a temporary name in its own directory (``mkstemp``: O_EXCL, so a
  planted name or link is never opened, mode 0600 while written) and renamed into place when
  it is complete; a directory output (Parquet) is built in a temporary directory beside it.
  A failure or Ctrl-C leaves the old output as it was and no temporary behind.
- Without ``--force`` an output whose name is taken -- by anything, a dangling symbolic link
  included -- is refused; the final rename is a hard link, which fails if the name was taken
  meanwhile.
- With ``--force``: a file is replaced; a symbolic link is replaced itself (the rename
  replaces the directory entry; what it points to is never opened); a directory only when
  snumap wrote it (it holds the ``MARKER`` file), never another one; a character device or
  FIFO (``-o /dev/null``) is written in place, never renamed over.
- An output that is an input (same inode, a hard link included), a directory that holds an
  input, or a path inside one is refused with one line before anything is written.
- A recording being written holds an exclusive ``flock`` on its file; replacing a locked file
  is refused, so a second ``record -o same.rec --force`` cannot take the first one's name. The
  lock test and the rename run under a short ``flock`` of the directory, so two writers that
  start at once cannot both pass it.
- Mode: 0600 when written by root (perf's choice for perf.data: a recording holds every
  task's name), else 0666 minus the umask; ``--mode`` sets it.

Standard library only, so every layer (store, export, exporter, commands) may use it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from snumap_tui.errors import SnumapError

MARKER = ".snumap-output"       # in a directory snumap wrote; --force may replace only such
TMP_SUFFIX = ".snumap-tmp"


def parse_mode(text: str) -> int:
    """``--mode 0644`` -> 0o644; one SnumapError line for anything else."""
    try:
        mode = int(text, 8)
    except ValueError:
        raise SnumapError(f"--mode: expected octal permissions such as 0600 or 0644, "
                          f"not {text!r}") from None
    if not 0 <= mode <= 0o777:
        raise SnumapError(f"--mode {text}: permissions go from 000 to 777 (no setuid bits)")
    return mode


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def default_mode() -> int:
    """0600 as root, else what the umask leaves of 0666."""
    if os.geteuid() == 0:
        return 0o600
    return 0o666 & ~_umask()


def dir_mode(file_mode: int) -> int:
    """A directory's mode for files of ``file_mode``: searchable where readable."""
    return file_mode | ((file_mode & 0o444) >> 2)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise SnumapError(f"cannot write {path}: a part of its directory is not one") from None


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _inside(inner: Path, outer: Path) -> bool:
    try:
        inner.relative_to(outer)
    except ValueError:
        return False
    return True


def check_inputs(out: Path, inputs: Sequence[str | Path]) -> None:
    """Refuse an output that is an input, holds one, or lies inside one."""
    targets = [s for s in (_lstat(out), _stat(out)) if s is not None]
    try:
        out_real = out.resolve()
    except (OSError, RuntimeError):
        out_real = None
    for src in inputs:
        st = _stat(Path(src))
        if st is None:
            continue        # the reader says what is wrong with it
        if any((t.st_dev, t.st_ino) == (st.st_dev, st.st_ino) for t in targets):
            raise SnumapError(f"{out} is the input {src}: give another output name")
        try:
            src_real = Path(src).resolve()
        except (OSError, RuntimeError):
            continue
        if out_real is not None and src_real != out_real:
            if _inside(src_real, out_real):
                raise SnumapError(f"{out} holds the input {src}: give another output name")
            if _inside(out_real, src_real):
                raise SnumapError(f"{out} is inside the input {src}")


def is_locked(path: Path) -> bool:
    """True when a regular file at ``path`` is held by a writer's flock (a recording being
    written). Opened without following a link and without blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False        # a file system without flock: nothing to test
        return False
    finally:
        os.close(fd)


def _busy(out: Path) -> SnumapError:
    return SnumapError(f"{out} is being written by another snumap (a recording in progress); "
                       "not replacing it")


def check_output(out: Path, *, force: bool, inputs: Sequence[str | Path] = (),
                 directory: bool = False, own_names: Collection[str] = ()
                 ) -> os.stat_result | None:
    """Everything that makes OUT unwritable, said before any work starts. Returns OUT's
    lstat (None when the name is free). ``own_names``: a directory holding only files of
    these names (what snumap wrote before it left a marker) counts as snumap's."""
    out = Path(out)
    check_inputs(out, inputs)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise SnumapError(f"cannot write {out}: {parent} is not a directory")
    st = _lstat(out)
    if st is None:
        return None
    mode = st.st_mode
    if stat.S_ISDIR(mode) and not directory:
        raise SnumapError(f"{out} is a directory")
    if not force:
        if stat.S_ISLNK(mode):
            raise SnumapError(f"{out} is a symbolic link (snumap never writes through one; "
                              "--force replaces the link itself)")
        raise SnumapError(f"{out} already exists (use --force to overwrite it)")
    if stat.S_ISDIR(mode):
        if not _snumap_dir(out, own_names):
            raise SnumapError(f"{out} is a directory snumap did not write (no {MARKER} in "
                              "it); --force replaces only its own outputs: give a new name")
    elif stat.S_ISREG(mode) and is_locked(out):
        raise _busy(out)
    return st


def _snumap_dir(path: Path, own_names: Collection[str] = ()) -> bool:
    st = _lstat(path / MARKER)
    if st is not None and stat.S_ISREG(st.st_mode):
        return True
    if not own_names:
        return False
    try:
        entries = list(os.scandir(path))
    except OSError:
        return False
    return bool(entries) and all(e.name in own_names and e.is_file(follow_symlinks=False)
                                 for e in entries)


@contextlib.contextmanager
def _dir_lock(parent: Path, wait_s: float = 2.0) -> Iterator[None]:
    """A short exclusive flock on the directory: the lock test and the rename of two writers
    of the same name do not interleave. Where the directory cannot be opened, or someone
    holds it longer than ``wait_s`` (any user may flock /tmp), the rename goes on without it:
    the lock only narrows a race the lock test already makes rare."""
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.01)
            except OSError:
                break
        yield
    finally:
        os.close(fd)


class SafeOutput:
    """One output being written. ``tmp`` is where to write (a file, or a directory with
    ``directory=True``); ``fd`` is that file, open for writing. ``commit()`` puts it in
    place, ``discard()`` removes it; as a context manager, commit on success, discard on any
    exception. With ``lock`` the file is flock'ed until ``fd`` (and every dup of it) is
    closed: a recording."""

    def __init__(self, out: str | Path, *, force: bool, inputs: Sequence[str | Path] = (),
                 directory: bool = False, mode: int | None = None, lock: bool = False,
                 own_names: Collection[str] = ()) -> None:
        self.out = Path(out)
        self.own_names = own_names
        self.force = force
        self.directory = directory
        self.mode = default_mode() if mode is None else mode
        self.done = False
        st = check_output(self.out, force=force, inputs=inputs, directory=directory,
                          own_names=own_names)
        self.parent = self.out.parent if str(self.out.parent) else Path(".")
        prefix = f".{self.out.name}."
        self.fd = -1
        # A character device or a FIFO named on purpose (-o /dev/null) is written in place.
        self.in_place = st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode))
        try:
            if self.in_place:
                self.tmp = self.out
                self.fd = os.open(self.out, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            elif directory:
                self.tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=TMP_SUFFIX,
                                                 dir=self.parent))
                with open(self.tmp / MARKER, "x", encoding="ascii") as f:
                    f.write("written by snumap: `--force` may replace this directory\n")
            else:
                self.fd, name = tempfile.mkstemp(prefix=prefix, suffix=TMP_SUFFIX,
                                                 dir=self.parent)
                self.tmp = Path(name)
        except OSError as e:
            raise SnumapError(f"cannot create {self.out}: {e.strerror or e}") from None
        if lock and self.fd >= 0:
            with contextlib.suppress(OSError):       # no flock on this file system
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    # ---- writing ------------------------------------------------------------------------
    def open(self, text: bool = False) -> IO[Any]:
        """A file object on the output (its own descriptor; closing it leaves ``fd`` open)."""
        if text:
            return os.fdopen(os.dup(self.fd), "w", encoding="utf-8", newline="")
        return os.fdopen(os.dup(self.fd), "wb")

    def __enter__(self) -> SafeOutput:  # noqa: PYI034 - py3.10 has no typing.Self
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()

    # ---- ending -------------------------------------------------------------------------
    def commit(self) -> None:
        """Put the output in place (idempotent)."""
        if self.done:
            return
        try:
            self._set_modes()
            if not self.in_place:
                with _dir_lock(self.parent):
                    self._rename()
        except BaseException:
            self.discard()
            raise
        self.done = True
        self._close()

    def _set_modes(self) -> None:
        if self.in_place:
            return
        if self.directory:
            for p in self.tmp.iterdir():
                if p.is_file() and not p.is_symlink():
                    os.chmod(p, self.mode)
            os.chmod(self.tmp, dir_mode(self.mode))
            return
        os.fchmod(self.fd, self.mode)
        with contextlib.suppress(OSError):
            os.fsync(self.fd)

    def _rename(self) -> None:
        st = _lstat(self.out)
        if st is not None:
            if not self.force:
                raise SnumapError(f"{self.out} already exists (use --force to overwrite it)")
            if stat.S_ISREG(st.st_mode) and is_locked(self.out):
                raise _busy(self.out)
        if self.directory:
            self._rename_dir(st)
        elif self.force:
            try:
                os.rename(self.tmp, self.out)
            except IsADirectoryError:
                raise SnumapError(f"{self.out} is a directory") from None
        else:
            self._link_new()

    def _link_new(self) -> None:
        """The name taken only if it is still free: a hard link fails when anything (a link
        planted meanwhile included) is there."""
        try:
            os.link(self.tmp, self.out, follow_symlinks=False)
        except FileExistsError:
            raise SnumapError(f"{self.out} already exists (use --force to overwrite it)") \
                from None
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            if _lstat(self.out) is not None:       # a file system without hard links
                raise SnumapError(f"{self.out} already exists (use --force to overwrite "
                                  "it)") from None
            os.rename(self.tmp, self.out)
            return
        os.unlink(self.tmp)

    def _rename_dir(self, st: os.stat_result | None) -> None:
        if st is None or not stat.S_ISDIR(st.st_mode):
            if st is not None:          # --force over a file or a link: the entry goes
                os.unlink(self.out)
            try:
                os.rename(self.tmp, self.out)
            except OSError as e:        # a non-empty directory appeared meanwhile
                raise SnumapError(f"cannot write {self.out}: {e.strerror or e}") from None
            return
        if not _snumap_dir(self.out, self.own_names):
            raise SnumapError(f"{self.out} is a directory snumap did not write; not replacing it")
        aside = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", suffix=".snumap-old",
                                      dir=self.parent))
        os.rename(self.out, aside)          # over the empty directory mkdtemp made
        os.rename(self.tmp, self.out)
        shutil.rmtree(aside, ignore_errors=True)

    def discard(self) -> None:
        """Remove what was written (nothing, for an output written in place)."""
        if self.done:
            return
        self.done = True
        self._close()
        if self.in_place:
            return
        with contextlib.suppress(OSError):
            if self.directory:
                shutil.rmtree(self.tmp)
            else:
                os.unlink(self.tmp)

    def _close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
