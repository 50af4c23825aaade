"""`snumap probe` tells the truth about this machine and about a gathered tree."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
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


def test_a_fix_is_printed_once_and_referred_to_after() -> None:
    pmu_fix = "enable the virtual PMU in the hypervisor"
    statuses = [SourceStatus("perf", True, "software events only", pmu_fix),
                SourceStatus("perf:cycles", False, "no hardware PMU", pmu_fix)]
    text = render(statuses, {"machine": "test"})
    assert text.count(pmu_fix) == 1
    assert ("  NO    perf:cycles             no hardware PMU\n"
            "                                fix: as for perf (per PU) above\n") in text
    # usable, but without the hardware events: "some", not a "yes" beside "no PMU"
    part = SourceStatus("perf", True, "no hardware PMU: software events only", pmu_fix,
                        {"missing": {"cycles": "no hardware PMU"}})
    assert "  some  perf (per PU)" in render([part], {"machine": "test"})


def test_long_paths_wrap_after_a_slash_never_mid_word() -> None:
    s = SourceStatus("tracepoints", False, "permission denied (EACCES): "
                     "/sys/kernel/tracing/events/sched/sched_switch/format", None)
    text = render([s], {"machine": "test"})
    assert ("  NO    tracepoints             permission denied (EACCES): /sys/kernel/tracing/\n"
            "                                events/sched/sched_switch/format\n") in text
    hyphen = SourceStatus("kernel-headers", True, "headers of another kernel "
                          "(linux-headers-6.1.0-56-amd64): tracepoint programs only", None)
    assert "(linux-headers-6.1.0-56-amd64):" in render([hyphen], {"machine": "test"})


def _status_reader(capeff: str) -> Callable[[Path], str]:
    def reader(path: Path) -> str:
        if path.name == "status":
            return f"Name:\tsnumap\nCapEff:\t{capeff}\n"
        raise FileNotFoundError(path)
    return reader


def test_capability_fix_targets_an_interpreter_copy_not_the_script() -> None:
    from snumap_tui.sources.system import capability_statuses, kernel_at_least

    checks = {s.name: s for s in capability_statuses(Path("/"), _status_reader("0" * 16))}
    fix = checks["cap:CAP_PERFMON"].fix or ""
    assert not checks["cap:CAP_PERFMON"].available
    # A file capability on a "#!" script is never used: only the interpreter's counts.
    assert "setcap on the snumap script has no effect" in fix
    assert 'cp "$(readlink -f .venv/bin/python)" .venv/bin/python-caps' in fix
    assert "setcap cap_perfmon,cap_bpf+ep .venv/bin/python-caps" in fix
    assert checks["cap:CAP_BPF"].fix == fix
    assert kernel_at_least("6.18.44-fc-v669", 5, 8) and not kernel_at_least("5.4.0-1", 5, 8)
    assert kernel_at_least("5.8", 5, 8) and not kernel_at_least("weird", 5, 8)
    with_perfmon = capability_statuses(Path("/"), _status_reader(f"{1 << 38 | 1 << 39:016x}"))
    assert all(s.available for s in with_perfmon if s.name != "cap:CAP_SYS_ADMIN")


def test_msr_pmu_with_only_tsc_gives_no_frequency(tmp_path: Path) -> None:
    from snumap_tui.sources.system import msr_status

    fake = FakeRoot(tmp_path, cpus=2, hypervisor=True)
    msr = fake.root / "sys/bus/event_source/devices/msr"
    (msr / "events").mkdir(parents=True)
    (msr / "type").write_text("9\n")
    (msr / "events/tsc").write_text("event=0x00\n")
    s = msr_status(fake.root)
    assert not s.available and s.detail["partial"] and s.detail["events"] == ["tsc"]
    assert s.reason == ("no frequency from it: the msr PMU has only tsc, no aperf/mperf (a "
                        "virtual machine: the hypervisor does not expose APERF/MPERF)")
    for ev in ("aperf", "mperf"):
        (msr / "events" / ev).write_text("event=0x01\n")
    assert msr_status(fake.root).available


def test_fsroot_never_suggests_fixes_for_this_machine(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A gathered tree without powercap: RAPL is unknown there (not "absent, modprobe
    intel_rapl_msr"); nothing local is suggested for the other machine."""
    fake = FakeRoot(tmp_path, cpus=4, rapl=False, cpufreq=False)
    checks = {c["name"]: c for c in probe_json(capsys, "--fsroot", str(fake.root))["checks"]}
    assert checks["rapl"]["reason"] == (
        "unknown for that machine: the gathered tree has no sys/class/powercap and no "
        "sys/bus/event_source/devices/power")
    assert checks["rapl"]["fix"] is None and checks["rapl"]["detail"]["unknown"]
    assert all(c["fix"] is None for c in checks.values()), [c for c in checks.values()
                                                            if c["fix"]]
    assert main(["probe", "--fsroot", str(fake.root)]) == 0
    text = capsys.readouterr().out
    assert "modprobe" not in text and "sysctl" not in text and "fix:" not in text
    assert "   ?    rapl                    unknown for that machine" in text


def test_fsroot_keeps_what_the_tree_says_but_not_the_fix(tmp_path: Path) -> None:
    from snumap_tui.commands.probe import for_gathered_tree

    (tmp_path / "sys/class/powercap").mkdir(parents=True)
    s = SourceStatus("rapl:powercap", False, "no intel-rapl zones in /sys/class/powercap",
                     "modprobe intel_rapl_msr")
    out = for_gathered_tree(s, tmp_path)
    assert out.fix is None and out.detail["fix_on_that_machine"] == "modprobe intel_rapl_msr"
    assert out.reason == ("no intel-rapl zones in /sys/class/powercap on that machine (a fix "
                          "would be made there, not on this one)")


def test_paranoid_that_is_not_a_number_is_a_status_not_a_traceback() -> None:
    from snumap_tui.sources.system import paranoid_status

    s = paranoid_status(Path("/"), reader=lambda p: "two\n")
    assert not s.available and "not a number" in (s.reason or "")


def test_probe_says_which_tracer_record_uses(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    """The tracer probe names is the one `snumap record` then says it traces with."""
    plan = probe_json(capsys)["tracer"]
    name = plan["record"]["tracer"]
    assert name in ("libbpf", "bcc", "perf", "proc")
    assert plan["record"]["why"][0].startswith("the first of libbpf, bcc, perf, proc")
    assert plan["record --job"]["tracer"] in ("perf", name)
    assert main(["probe"]) == 0
    text = capsys.readouterr().out
    assert f"\nRecording\n  record traces with {name}\n" in text
    assert main(["record", "-o", str(tmp_path / "r.rec"), "--regions", "none", "--",
                 "true"]) == 0
    assert f"snumap: tracing with {name}" in capsys.readouterr().err


def test_probe_names_the_fallback_and_why_not_the_better_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No eBPF, no perf: record falls to /proc polling, and probe says so, why, and that it
    is approximate."""
    from snumap_tui.commands import probe
    from snumap_tui.trace.perf import PerfTracer

    def refused(name: str, why: str) -> SourceStatus:
        return SourceStatus(name, False, why, "sysctl kernel.perf_event_paranoid=1")

    monkeypatch.setattr(PerfTracer, "status",
                        classmethod(lambda cls: refused("perf", "perf_event_paranoid is 3")))
    checks = [refused("trace:libbpf", "no CAP_BPF"), refused("trace:bcc", "no bcc")]
    plan = probe.record_plan(checks)
    assert plan["record"]["tracer"] == "proc" and plan["record"]["approximate"]
    assert plan["record"]["why"][1:] == [
        "libbpf not used: no CAP_BPF (fix: sysctl kernel.perf_event_paranoid=1)",
        "bcc not used: no bcc (fix: sysctl kernel.perf_event_paranoid=1)",
        "perf not used: perf_event_paranoid is 3 (fix: sysctl kernel.perf_event_paranoid=1)"]
    assert plan["record --job"]["tracer"] == "proc"
    text = "\n".join(probe.render_plan(plan))
    assert "record traces with proc (approximate" in text
    assert "  - perf not used: perf_event_paranoid is 3" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_probe_of_a_gathered_tree_names_no_tracer(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeRoot(tmp_path, cpus=2)
    assert "tracer" not in probe_json(capsys, "--fsroot", str(fake.root))
    assert main(["probe", "--fsroot", str(fake.root)]) == 0
    assert "Recording" not in capsys.readouterr().out
