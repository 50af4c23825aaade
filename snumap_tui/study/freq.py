"""`--freq`: CPU frequency through cpufreq, restored afterwards.

A frequency is pinned by writing it to ``scaling_max_freq`` and ``scaling_min_freq`` of every
CPU (in the order that keeps min <= max at each step), or, where the ``userspace`` governor
is the one in use, to ``scaling_setspeed``. What was there before is saved first -- in memory
and in a restore file of the study (``freq-restore.json``; a Slurm task's
``freq-restore-HOST-PID.json``), written before the first change -- and written back by
``restore()``: at the end, on Ctrl-C, SIGTERM or an exception (the runner's ``finally``), and,
after a SIGKILL, by the next `snumap scale` (or Slurm task) on that study before it does
anything else.

A restore file is applied only if it is what snumap itself recorded here: a regular file of
the invoking user or root that no one else may write (study/files.py), naming this host,
this boot (``/proc/sys/kernel/random/boot_id``: after a reboot the frequencies are the
firmware's again) and a process that is gone, and only to the cpufreq files of
``/sys/devices/system/cpu/cpuN/cpufreq`` with values of their form (a governor's name, kHz
digits). A CPU that is not there any more is skipped, and the file is removed once it was
applied: it never stops a later resume.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError

SYSFS = Path("/sys/devices/system/cpu")
FILES = ("scaling_governor", "scaling_min_freq", "scaling_max_freq", "scaling_setspeed")


def parse_freq(text: str) -> str:
    """A --freq item checked: ``max``, ``min``, ``1.2GHz``, ``2000MHz`` or kHz digits."""
    t = text.strip()
    if t in ("max", "min") or re.fullmatch(r"\d+(\.\d+)?\s*(GHz|MHz|kHz|ghz|mhz|khz)?", t):
        return t
    raise SnumapError(f"--freq {text}: give max, min, or a frequency such as 1.2GHz, 2000MHz")


def to_khz(text: str, lo: int, hi: int) -> int:
    if text == "max":
        return hi
    if text == "min":
        return lo
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([GMk]Hz)?", text, re.IGNORECASE)
    assert m is not None
    unit = (m.group(2) or "kHz").lower()
    khz = round(float(m.group(1)) * {"ghz": 1e6, "mhz": 1e3, "khz": 1}[unit])
    if not lo <= khz <= hi:
        raise SnumapError(f"--freq {text}: outside what the CPUs run at "
                          f"({lo / 1e6:.2f}-{hi / 1e6:.2f} GHz)")
    return khz


class CpuFreq:
    """The cpufreq files of a machine (ROOT: its /sys/devices/system/cpu, a fake tree in
    tests)."""

    def __init__(self, root: Path = SYSFS, restore_file: Path | None = None) -> None:
        self.root = Path(root)
        self.restore_file = restore_file
        self.saved: dict[str, dict[str, str]] = {}

    def cpus(self) -> list[Path]:
        try:
            return sorted((p / "cpufreq" for p in self.root.glob("cpu[0-9]*")
                           if (p / "cpufreq").is_dir()), key=lambda p: int(p.parent.name[3:]))
        except OSError:
            return []

    def unavailable(self) -> str | None:
        """Why frequencies cannot be set here (None when they can)."""
        cpus = self.cpus()
        if not cpus:
            return f"no cpufreq on this machine ({self.root}/cpu*/cpufreq missing)"
        for c in cpus:
            for f in ("scaling_min_freq", "scaling_max_freq"):
                if not os.access(c / f, os.W_OK):
                    return f"{c / f} is not writable" + \
                        (" (run as root)" if os.geteuid() != 0 else "")
        return None

    def limits(self) -> tuple[int, int]:
        c = self.cpus()[0]
        return (int(_read(c / "cpuinfo_min_freq")), int(_read(c / "cpuinfo_max_freq")))

    def check(self, freqs: list[str]) -> None:
        why = self.unavailable()
        if why:
            raise SnumapError(f"--freq: cannot set the CPU frequency: {why}")
        lo, hi = self.limits()
        for f in freqs:
            to_khz(f, lo, hi)

    def set(self, text: str) -> int:
        """Pin every CPU to TEXT; returns the kHz written."""
        lo, hi = self.limits()
        khz = to_khz(text, lo, hi)
        if not self.saved:
            self._save()
        for c in self.cpus():
            gov = _read(c / "scaling_governor") if (c / "scaling_governor").exists() else ""
            if gov == "userspace" and (c / "scaling_setspeed").exists():
                _write(c / "scaling_setspeed", str(khz))
                continue
            cur_max = int(_read(c / "scaling_max_freq"))
            order = ("scaling_max_freq", "scaling_min_freq") if khz > cur_max else \
                ("scaling_min_freq", "scaling_max_freq")
            for name in order:
                _write(c / name, str(khz))
        return khz

    def _save(self) -> None:
        for c in self.cpus():
            vals = {}
            for f in FILES:
                try:
                    v = _read(c / f)
                except FileNotFoundError:
                    continue
                if v not in ("", "<unsupported>"):
                    vals[f] = v
            self.saved[str(c)] = vals
        if self.restore_file is not None:
            from snumap_tui.study.files import write_text

            write_text(self.restore_file, json.dumps(
                {"format": RESTORE_FORMAT, "host": socket.gethostname(), "boot_id": boot_id(),
                 "pid": os.getpid(),
                 "cpus": {Path(c).parent.name: v for c, v in self.saved.items()}}, indent=1))

    def restore(self) -> None:
        """Write back what was there before the first set() (idempotent)."""
        restore_values(self.saved)
        self.saved = {}
        if self.restore_file is not None:
            try:
                os.unlink(self.restore_file)
            except FileNotFoundError:
                pass

    def __enter__(self) -> CpuFreq:  # noqa: PYI034 - py3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


RESTORE_FORMAT = "snumap-freq-restore"
_CPU = re.compile(r"cpu\d{1,5}")
_VALUE = {"scaling_governor": re.compile(r"[A-Za-z0-9_-]{1,32}"),
          "scaling_min_freq": re.compile(r"\d{1,10}"), "scaling_max_freq": re.compile(r"\d{1,10}"),
          "scaling_setspeed": re.compile(r"\d{1,10}")}


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read(64).strip()
    except OSError:
        return ""


def restore_values(saved: dict[str, dict[str, str]]) -> list[str]:
    """Write SAVED back (cpufreq directory -> file -> value); returns what could not be
    (one line each): a CPU gone, a file the kernel refused."""
    problems = []
    for c, vals in saved.items():
        cdir = Path(c)
        try:
            _restore_one(cdir, vals)
        except (OSError, ValueError) as exc:
            problems.append(f"{cdir}: {getattr(exc, 'strerror', None) or exc}")
    return problems


def _restore_one(cdir: Path, vals: dict[str, str]) -> None:
    if "scaling_governor" in vals:
        _write(cdir / "scaling_governor", vals["scaling_governor"])
    lo, hi = vals.get("scaling_min_freq"), vals.get("scaling_max_freq")
    if lo is not None and hi is not None:
        cur_max = int(_read(cdir / "scaling_max_freq"))
        # min <= max at every step: raise max first when the old max is above the current
        order = [("scaling_max_freq", hi), ("scaling_min_freq", lo)] if int(hi) >= cur_max \
            else [("scaling_min_freq", lo), ("scaling_max_freq", hi)]
        for name, v in order:
            _write(cdir / name, v)
    if vals.get("scaling_governor") == "userspace" and "scaling_setspeed" in vals:
        _write(cdir / "scaling_setspeed", vals["scaling_setspeed"])


def restore_file_for_task(study_dir: Path) -> Path:
    """A Slurm task's restore file (tasks on one node, or on several sharing the directory,
    never share one)."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"
    return study_dir / f"freq-restore-{host}-{os.getpid()}.json"


def leftover_values(record: Any, root: Path = SYSFS) -> dict[str, dict[str, str]] | None:
    """What a restore file RECORD asks to write back here: None when it is not this host's,
    this boot's, or its process still runs (a Slurm task at work); else cpufreq directory ->
    file -> value, only ROOT's cpuN/cpufreq files with values of their form (anything else
    in the record is dropped)."""
    if not isinstance(record, dict) or record.get("format") != RESTORE_FORMAT:
        return {}
    if record.get("host") != socket.gethostname() or record.get("boot_id") != boot_id():
        return None
    pid = record.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool) and pid != os.getpid() \
            and _alive(pid):
        return None
    cpus = record.get("cpus")
    out: dict[str, dict[str, str]] = {}
    for cpu, vals in (cpus.items() if isinstance(cpus, dict) else ()):
        if not isinstance(cpu, str) or not _CPU.fullmatch(cpu) or not isinstance(vals, dict):
            continue
        good = {f: v for f, v in vals.items() if f in _VALUE and isinstance(v, str)
                and _VALUE[f].fullmatch(v)}
        if good:
            out[str(root / cpu / "cpufreq")] = good
    return out


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def restore_leftover(study_dir: Path, root: Path = SYSFS) -> list[str]:
    """After a study (or Slurm task) killed while it held the frequencies: put them back
    from the study's restore files that are this host's and this boot's; returns one line
    per file applied (and per CPU that could not be). A restore file another user may have
    written is refused (SnumapError)."""
    from snumap_tui.study.files import TrustError, read_json

    said = []
    for path in sorted(study_dir.glob("freq-restore*.json")):
        try:
            record = read_json(path, trust=True, what="frequency restore file")
        except FileNotFoundError:
            continue
        except TrustError:
            raise
        except SnumapError as exc:
            said.append(f"{exc}: removed, nothing restored from it")
            _unlink(path)
            continue
        values = leftover_values(record, root)
        if values is None:
            continue                # another host's, another boot's, or a task still at work
        if not values:
            said.append(f"{path.name}: no CPU frequency snumap recorded in it: removed")
            _unlink(path)
            continue
        problems = restore_values(values)
        said.append(f"restored the CPU frequencies a killed study had changed ({path.name})")
        said += [f"  not restored: {p}" for p in problems]
        _unlink(path)
    return said


def _unlink(path: Path) -> None:
    """PATH removed if it can be (a directory in its place stays: it is never applied)."""
    try:
        os.unlink(path)
    except OSError:
        pass


def _read(p: Path) -> str:
    return p.read_text().strip()


def _write(p: Path, value: str) -> None:
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def describe(actuator: Any) -> dict[str, Any]:
    return {"how": "cpufreq scaling_min_freq/scaling_max_freq (userspace: scaling_setspeed)",
            "root": str(actuator.root)}
