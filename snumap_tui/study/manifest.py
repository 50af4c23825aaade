"""The study directory: ``manifest.json`` (the study, its configurations and every run) beside
one recording per run.

Layout::

    STUDY/manifest.json        study-level facts, configurations, the runs (rewritten whole)
    STUDY/runs/ID.json         one run's state and per-region measurements (its source of truth)
    STUDY/runs/ID.rec          its recording (snumap record)
    STUDY/runs/ID.log          the recorder's and the command's output
    STUDY/runs/ID.untraced.log the command's output when run untraced (the state's
                               ``untraced``: time_s, exit_status, order; study/untraced.py)
    STUDY/runs/ID.lock         held (flock) while the run is being recorded
    STUDY/.lock                held by a `snumap scale` running the study here

A run's state file is written when it starts (``running``) and when it ends (``ok``,
``failed`` or ``interrupted``); ``manifest.json`` is rebuilt from the plan and those files
after each run. So several writers (the tasks of a Slurm array) never write the same file,
and a run killed with its recorder leaves ``running`` behind, with its lock free: it is redone
on resume. Files are written through safeout and read as study/files.py reads (regular,
bounded, no link followed; trusted when the study is to be run), and checked against
study/schema.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import socket
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.safeout import is_locked
from snumap_tui.study import files
from snumap_tui.study.configs import Config
from snumap_tui.study.files import make_dir, read_json, trusted_dir, write_text
from snumap_tui.study.schema import check_manifest, check_run
from snumap_tui.textsafe import safe_text

FORMAT = "snumap-study"
VERSION = 1
MANIFEST = "manifest.json"
DONE = ("ok", "failed")          # states a resume keeps


# ---- files ------------------------------------------------------------------------------------

def _lock_fd(path: Path) -> int:
    """PATH opened (created) for a flock: never through a link, a regular file, 0600 as
    root."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 files.study_mode())
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SnumapError(f"{safe_text(path)} is not a regular file: refused")
    return fd


@contextlib.contextmanager
def flocked(path: Path, what: str) -> Iterator[int]:
    """An exclusive flock on PATH (created), or SnumapError saying who holds it."""
    fd = _lock_fd(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            raise SnumapError(f"{what} is in use by another snumap scale ({holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield fd
    finally:
        os.close(fd)


# ---- the study --------------------------------------------------------------------------------

@dataclass
class RunPlan:
    """One planned run: a configuration and its repeat number (1-based)."""

    config: Config
    repeat: int

    @property
    def id(self) -> str:
        return f"{self.config.key}-rep{self.repeat}"


@dataclass
class Study:
    """A study directory and its manifest. ``trusted``: opened to be run (its files must be
    the invoking user's or root's: study/files.py); ``damaged``: run files that could not be
    read or do not follow their schema, by run id, with why (their runs are redone on
    resume, and the report counts them)."""

    dir: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    trusted: bool = False
    damaged: dict[str, str] = field(default_factory=dict)
    # run id -> (its file's identity when read, its checked state): run_states reads a file
    # again only once it was replaced or changed (each save reads every run's state)
    _read: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    @property
    def runs_dir(self) -> Path:
        return self.dir / "runs"

    def run_file(self, run_id: str, ext: str) -> Path:
        return self.runs_dir / f"{run_id}.{ext}"

    @property
    def command(self) -> list[str]:
        return list(self.manifest.get("command") or [])

    def configs(self) -> list[Config]:
        return [Config.from_dict(c) for c in self.manifest.get("configurations", [])]

    def plan(self) -> list[RunPlan]:
        by_key = {c.key: c for c in self.configs()}
        return [RunPlan(by_key[r["config"]], int(r["repeat"]))
                for r in self.manifest.get("plan", []) if r.get("config") in by_key]

    def run_states(self) -> dict[str, dict[str, Any]]:
        """Every run's state file, by run id. One that is missing is pending; a damaged one
        is named in ``damaged`` and skipped (the run is redone). In a trusted study a run
        file another user may have written is refused (SnumapError). A file read before is
        read again only when it changed (its inode, size, mtime or ctime: snumap replaces a
        run file by rename, and a chmod or chown changes the ctime)."""
        out: dict[str, dict[str, Any]] = {}
        self.damaged = {}
        for p in self.plan():
            f = self.run_file(p.id, "json")
            try:
                st = os.lstat(f)
            except FileNotFoundError:
                self._read.pop(p.id, None)
                continue
            except OSError:
                st = None
            ident = None if st is None else (st.st_dev, st.st_ino, st.st_size,
                                             st.st_mtime_ns, st.st_ctime_ns)
            known = self._read.get(p.id)
            if known is not None and known[0] == ident:
                out[p.id] = known[1]
                continue
            self._read.pop(p.id, None)
            try:
                out[p.id] = check_run(read_json(f, trust=self.trusted), f"runs/{f.name}")
            except FileNotFoundError:
                continue
            except files.TrustError:
                raise
            except SnumapError as exc:
                self.damaged[p.id] = str(exc)
                continue
            if ident is not None:
                self._read[p.id] = (ident, out[p.id])
        return out

    def pending(self, retry_failed: bool = False) -> list[RunPlan]:
        """Runs to record: never run, interrupted, or left ``running`` by a recorder that is
        gone (its lock is free); with RETRY_FAILED failed ones too. Interleaved: repeat 1 of
        every configuration, then repeat 2, ... (the plan's order)."""
        states = self.run_states()
        keep = ("ok",) if retry_failed else DONE
        out = []
        for p in self.plan():
            st = states.get(p.id, {}).get("status")
            if st in keep:
                continue
            if st == "running" and is_locked(self.run_file(p.id, "lock")):
                continue            # being recorded elsewhere (a Slurm task)
            out.append(p)
        return out

    def write_run(self, run_id: str, state: dict[str, Any]) -> None:
        """The run's state file; a number that is not finite is written as null (the reader
        refuses NaN and Infinity: study/schema.py)."""
        write_text(self.run_file(run_id, "json"), json.dumps(_finite(state), indent=1))

    def save(self, keys: tuple[str, ...] | None = ()) -> None:
        """manifest.json: the study with every run's state merged in (measurements left in
        the run files). Under a lock, over what is on disk, so writers in parallel (a Slurm
        array's tasks) lose nothing: KEYS (None: all) of this process's manifest replace the
        file's, and the runs are always read afresh. What runs are executed with never comes
        from here: it was fixed when the study was planned (study/runner.py ``Launch``)."""
        path = self.dir / MANIFEST
        with _blocking_lock(self.dir / ".manifest.lock"):
            base = self.manifest
            if keys is not None:
                try:
                    disk = check_manifest(read_json(path, trust=self.trusted), MANIFEST)
                except FileNotFoundError:
                    disk = None
                except files.TrustError:
                    raise
                except SnumapError:
                    disk = None
                if disk is not None:
                    base = {**disk, **{k: self.manifest[k] for k in keys
                                       if k in self.manifest}}
            states = self.run_states()
            runs = []
            for p in Study(self.dir, base).plan():
                st = states.get(p.id, {"status": "pending"})
                runs.append({"id": p.id, "config": p.config.key, "repeat": p.repeat,
                             **{k: v for k, v in st.items()
                                if k not in ("measurements", "id")}})
            base["runs"] = runs
            base["updated"] = _now()
            write_text(path, json.dumps(base, indent=1))
            self.manifest = base


def _finite(v: Any) -> Any:
    """V with every float that is not finite made None."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


@contextlib.contextmanager
def _blocking_lock(path: Path) -> Iterator[None]:
    fd = _lock_fd(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def open_study(path: str | Path, *, trust: bool = False) -> Study:
    """An existing study (for report, export, resume); SnumapError when PATH is none, or
    its manifest is damaged. TRUST: to be run (a resume, a Slurm task): the directory,
    ``runs/`` and the manifest must be the invoking user's or root's (study/files.py)."""
    d = Path(path)
    m = d / MANIFEST
    if not d.is_dir():
        raise SnumapError(f"{safe_text(d)}: no such study directory")
    if trust:
        trusted_dir(d)
        if os.path.lexists(d / "runs"):
            trusted_dir(d / "runs", "its runs directory")
    try:
        data = read_json(m, trust=trust)
    except FileNotFoundError:
        raise SnumapError(f"{safe_text(d)} is not a snumap study (no {MANIFEST})") from None
    data = check_manifest(data, f"{d}/{MANIFEST}")
    if data["version"] > VERSION:
        raise SnumapError(f"{safe_text(d)}: study format {data['version']} is newer than "
                          f"this snumap reads ({VERSION})")
    return Study(d, data, trusted=trust)


def create_or_resume(path: str | Path, manifest: dict[str, Any]) -> tuple[Study, bool]:
    """The study at PATH for MANIFEST's command: a new directory (made), an empty one, or the
    same command's study (resumed: its plan grows by the new configurations and repeats).
    Refused, with nothing written: a study of another command, a directory holding other
    files, one that cannot be written, one another user owns or may write (its runs would be
    run as the invoking user)."""
    d = Path(path)
    if d.is_symlink():
        raise SnumapError(f"{safe_text(d)} is a symbolic link: give the directory itself")
    if d.exists() and not d.is_dir():
        raise SnumapError(f"{safe_text(d)} exists and is not a directory")
    if d.exists():
        trusted_dir(d)
    if os.path.lexists(d / MANIFEST):
        study = open_study(d, trust=True)
        old = study.manifest
        if old.get("events") != manifest.get("events"):
            was = safe_text("--events " + ",".join(map(str, old["events"])) if old.get("events")
                            else "no --events")
            raise SnumapError(f"{safe_text(d)} was recorded with {was[:80]}: resume it with "
                              "the same --events (its runs must count the same events), or "
                              "give another -o")
        if old.get("command") != manifest["command"] or \
                (old.get("record_args") or []) != manifest["record_args"]:
            was = safe_text(" ".join(old.get("command") or []))
            raise SnumapError(f"{safe_text(d)} is a study of another command ({was[:60]}): "
                              "give another -o, or the same command and record options to "
                              "resume it")
        _check_writable(d)
        _merge(old, manifest)
        return study, True
    if d.exists() and any(d.iterdir()):
        raise SnumapError(f"{safe_text(d)} is not empty and is not a snumap study: give a new "
                          "or empty directory")
    try:
        make_dir(d)
    except OSError as exc:
        raise SnumapError(f"cannot create the study directory {safe_text(d)}: "
                          f"{exc.strerror or exc}") from None
    _check_writable(d)
    trusted_dir(d)
    make_dir(d / "runs")
    trusted_dir(d / "runs", "its runs directory")
    study = Study(d, dict(manifest), trusted=True)
    return study, False


def _check_writable(d: Path) -> None:
    if not os.access(d, os.W_OK | os.X_OK) or (os.geteuid() == 0 and _read_only_fs(d)):
        raise SnumapError(f"cannot write in the study directory {safe_text(d)}")


def _read_only_fs(d: Path) -> bool:
    return bool(os.statvfs(d).f_flag & os.ST_RDONLY)


def _merge(old: dict[str, Any], new: dict[str, Any]) -> None:
    """Configurations and planned runs of NEW added to OLD's (nothing removed)."""
    keys = {c["key"] for c in old.get("configurations", [])}
    for c in new.get("configurations", []):
        if c["key"] not in keys:
            old.setdefault("configurations", []).append(c)
            keys.add(c["key"])
    have = {(r["config"], r["repeat"]) for r in old.get("plan", [])}
    for r in new.get("plan", []):
        if (r["config"], r["repeat"]) not in have:
            old.setdefault("plan", []).append(r)
    old["plan"].sort(key=lambda r: int(r["repeat"]))     # interleaved: by repeat, stable
    old.setdefault("resumed", []).append(_now())
    for k in ("actuators", "options"):
        old[k] = new.get(k, old.get(k))


def new_manifest(command: list[str], record_args: list[str], configs: list[dict[str, Any]],
                 repeat: int, machine: dict[str, Any], actuators: dict[str, Any],
                 options: dict[str, Any], events: list[str] | None = None) -> dict[str, Any]:
    from snumap_tui import __version__

    plan = [{"config": c["key"], "repeat": r} for r in range(1, repeat + 1) for c in configs]
    return {"format": FORMAT, "version": VERSION, "created": _now(),
            "host": socket.gethostname(), "machine": machine, "snumap_version": __version__,
            "command": command, "record_args": record_args, "actuators": actuators,
            "options": options, "events": events, "configurations": configs, "plan": plan}
