"""`snumap probe` tells the truth about this machine and about a gathered tree."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fakefs import FakeRoot

from snumap_tui.cli import main
from snumap_tui.commands.probe import _groups, render
from snumap_tui.sources.base import SourceStatus


def probe_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["probe", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_probe_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    out = probe_json(capsys)
    checks = {c["name"]: c for c in out["checks"]}
    for name in ("hwloc", "procstat", "perf:cycles", "perf:context-switches", "freq", "msr-pmu",
                 "rapl:powercap", "rapl:perf", "rapl", "numa", "numa_maps", "tracepoints",
                 "trace:bcc", "kernel-headers", "btf", "perf_event_paranoid",
                 "cap:CAP_PERFMON", "cap:CAP_BPF", "cap:CAP_SYS_ADMIN"):
        assert name in checks, name
    assert checks["procstat"]["available"]
    for c in checks.values():
        assert c["available"] or c["reason"], c      # every "no" says why
    if not Path("/sys/bus/event_source/devices/cpu").exists():
        assert not checks["perf:cycles"]["available"]
        assert "hardware PMU" in checks["perf:cycles"]["reason"]
        assert checks["perf:cycles"]["fix"]
    if not Path("/sys/class/powercap").exists():
        assert not checks["rapl"]["available"] and checks["rapl"]["fix"]
    if Path("/sys/bus/event_source/devices/tracepoint").exists() and sys.platform == "linux":
        assert checks["tracepoints"]["available"]


def test_probe_text_fits_80_columns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe"]) == 0
    text = capsys.readouterr().out
    assert "Hardware counters" in text and "Energy" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_probe_fsroot_is_not_this_machine(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeRoot(tmp_path, cpus=8, nodes=2, packages=2)
    checks = {c["name"]: c for c in probe_json(capsys, "--fsroot", str(fake.root))["checks"]}
    assert checks["rapl"]["available"] and checks["rapl:powercap"]["available"]
    assert checks["numa"]["available"] and checks["freq"]["available"]
    assert not checks["perf"]["available"] and "not this machine" in checks["perf"]["reason"]
    assert not checks["tracepoints"]["available"]


def test_probe_missing_fsroot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["probe", "--fsroot", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("snumap: ") and len(err.strip().splitlines()) == 1


def test_identical_checks_collapse_into_one_line() -> None:
    same = [SourceStatus(f"perf:{e}", False, "no hardware PMU (virtual machine)", "fix it")
            for e in ("cycles", "instructions")]
    groups = _groups([SourceStatus("perf", True, None), *same])
    assert [g[0] for g in groups] == ["perf", "perf: cycles, instructions"]
    text = render(same, {"machine": "test"})
    assert text.count("no hardware PMU") == 1 and "fix: fix it" in text
