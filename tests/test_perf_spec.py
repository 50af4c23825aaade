"""Event names as perf(1) writes them (native/perf_spec.py): on a fake PMU tree, against
perf's own encoding where perf is installed, and through the perf source for real."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from snumap_tui.native import perf_spec as ps

ES = "sys/bus/event_source/devices"


def _fake_pmus(root: Path) -> Path:
    """An Intel-like core PMU and a RAPL power PMU, as the kernel lays them out in sysfs."""
    cpu = root / ES / "cpu"
    (cpu / "format").mkdir(parents=True)
    (cpu / "events").mkdir()
    (cpu / "type").write_text("4\n")
    for term, spec in {"event": "config:0-7", "umask": "config:8-15", "edge": "config:18",
                       "any": "config:21", "inv": "config:23", "cmask": "config:24-31",
                       "ldlat": "config1:0-15", "offcore_rsp": "config1:0-63"}.items():
        (cpu / "format" / term).write_text(spec + "\n")
    (cpu / "events" / "mem-loads").write_text("event=0xcd,umask=0x1,ldlat=3\n")
    (cpu / "events" / "topdown-total-slots").write_text("event=0x00,umask=0x4\n")
    (cpu / "events" / "topdown-total-slots.scale").write_text("4\n")
    power = root / ES / "power"
    (power / "format").mkdir(parents=True)
    (power / "events").mkdir()
    (power / "type").write_text("23\n")
    (power / "format" / "event").write_text("config:0-7\n")
    (power / "events" / "energy-pkg").write_text("event=0x02\n")
    (power / "events" / "energy-pkg.scale").write_text("2.3283064365386962890625e-10\n")
    (power / "events" / "energy-pkg.unit").write_text("Joules\n")
    return root


@pytest.mark.parametrize("name, type_, config", [
    ("cycles", 0, 0), ("cpu-cycles", 0, 0), ("instructions", 0, 1), ("branches", 0, 4),
    ("ref-cycles", 0, 9), ("task-clock", 1, 1), ("faults", 1, 2), ("cs", 1, 3),
    ("LLC-load-misses", 3, 0x10002), ("LLC-loads", 3, 0x2), ("LLC-store-misses", 3, 0x10102),
    ("L1-dcache-load-misses", 3, 0x10000), ("L1-icache-load-misses", 3, 0x10001),
    ("dTLB-load-misses", 3, 0x10003), ("iTLB-load-misses", 3, 0x10004),
    ("branch-load-misses", 3, 0x10005), ("node-loads", 3, 0x6),
    ("L1-dcache-prefetch-misses", 3, 0x10200), ("r01c2", 4, 0x1c2),
])
def test_generic_cache_and_raw_names(tmp_path, name, type_, config):
    spec = ps.parse_event(name, tmp_path)
    assert (spec.type, spec.config) == (type_, config)
    assert spec.needs_pmu == (type_ != 1)


def test_pmu_term_syntax_on_a_fake_tree(tmp_path):
    root = _fake_pmus(tmp_path)
    s = ps.parse_event("cpu/event=0x3c,umask=0x1,cmask=2,inv/", root)
    assert (s.type, s.config, s.pmu, s.kind) == (4, 0x3c | 0x1 << 8 | 1 << 23 | 2 << 24,
                                                 "cpu", "pmu")
    # an alias expanded; a later term replaces the alias's own (perf's rule)
    s = ps.parse_event("cpu/mem-loads,ldlat=30/", root)
    assert (s.config, s.config1) == (0xcd | 0x1 << 8, 30)
    assert ps.parse_event("mem-loads", root).config1 == 3           # core PMU event by name
    s = ps.parse_event("power/energy-pkg/", root)
    assert (s.type, s.config, s.unit) == (23, 2, "Joules")
    assert s.scale == pytest.approx(2.3283064365386962890625e-10)
    s = ps.parse_event("cpu/config=0x1234,config1=7,name=mine/u", root)
    assert (s.name, s.config, s.config1) == ("mine", 0x1234, 7)
    assert (s.exclude_user, s.exclude_kernel) == (False, True)
    assert ps.parse_event("cycles:k", root).exclude_user is True
    assert ps.parse_event("cpu/topdown-total-slots/", root).scale == 4.0


@pytest.mark.parametrize("name, message", [
    ("cpu/umask=0x1ff/", "too big for format 'umask' (8 bits: at most 0xff)"),
    ("cpu/event=0x3c,bogus=1/", "has no term 'bogus'"),
    ("cpu/nosuchevent/", "has no term or event 'nosuchevent'"),
    ("cpu/event=zz/", "term 'event' wants a number"),
    ("cpu/event=0x3c,period=1000/", "configures sampling"),
    ("gpu9/event=1/", "no PMU 'gpu9' on this machine (its PMUs: cpu, power)"),
    ("cycles:pp", "modifier 'p' is not supported"),
    ("LLC-load-bogus", "unknown event 'LLC-load-bogus'"),
    ("not-an-event", "unknown event"),
    ("", "empty"),
    ("cycles\x1b[2J", "not an event name"),
    ("x" * 300, "not an event name"),
])
def test_bad_events_are_one_clear_line(tmp_path, name, message):
    root = _fake_pmus(tmp_path)
    with pytest.raises(ps.EventSpecError) as exc:
        ps.parse_event(name, root)
    text = str(exc.value)
    assert message in text and "\n" not in text and "\x1b" not in text


def _perf_attr(event: str) -> dict[str, int]:
    out = subprocess.run(["perf", "stat", "-vv", "-e", event, "true"], capture_output=True,
                         text=True, timeout=30, check=False)
    block = out.stderr.split("perf_event_attr:", 1)[1].split("---", 1)[0]
    fields = dict(re.findall(r"^\s+(\w+)\s+(\S+)$", block, re.MULTILINE))
    attr = {"type": 0, "config": 0}            # perf -vv leaves out the fields that are 0
    attr.update({k: int(v, 0) for k, v in fields.items()
                 if k in ("type", "config", "config1", "exclude_user", "exclude_kernel")})
    return attr


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf(1) is not installed")
@pytest.mark.parametrize("event", [
    "cycles", "instructions", "branch-misses", "task-clock", "cs", "page-faults",
    "LLC-load-misses", "dTLB-load-misses", "L1-dcache-loads", "iTLB-load-misses",
    "branch-loads", "node-store-misses", "r01c2", "cycles:u", "task-clock:k",
])
def test_same_encoding_as_perf(event):
    """perf stat -vv prints the perf_event_attr it opens: ours must equal it."""
    want = _perf_attr(event)
    got = ps.parse_event(event)
    assert want.get("type") == got.type
    assert want.get("config", 0) == got.config
    assert bool(want.get("exclude_user", 0)) == got.exclude_user
    assert bool(want.get("exclude_kernel", 0)) == got.exclude_kernel


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf(1) is not installed")
def test_same_encoding_as_perf_for_this_machines_pmus():
    """The PMUs of this machine in sysfs (msr is there even in a VM): term syntax and aliases
    through perf's parser and ours."""
    root = Path("/")
    pmus = [p.name for p in (root / ES).iterdir() if (p / "events").is_dir()
            and (p / "format").is_dir() and any((p / "events").iterdir())]
    if not pmus:
        pytest.skip("no PMU with sysfs events here")
    pmu = min(pmus)
    alias = min(e.name for e in (root / ES / pmu / "events").iterdir() if "." not in e.name)
    for event in (f"{pmu}/{alias}/", f"{pmu}/{alias}/u"):
        want = _perf_attr(event)
        got = ps.parse_event(event)
        assert (want["type"], want.get("config", 0)) == (got.type, got.config), event
        assert bool(want.get("exclude_kernel", 0)) == got.exclude_kernel, event


def test_software_event_counts_through_the_perf_source():
    """An event named perf's way ("faults", an alias) opens and counts, per PU, for real."""
    from snumap_tui.sources.perf import PerfSource

    src = PerfSource(hw_events=(), sw_events=("task-clock", "faults", "cs:k"))
    try:
        status = {s.name: s for s in src.statuses()}
        if not status["perf:task-clock"].available:
            pytest.skip(f"perf events not allowed here: {status['perf:task-clock'].reason}")
        first = src.read()
        x = bytearray(64 << 20)          # touch 16 K pages: page faults on this PU or another
        x[::4096] = b"\x01" * (len(x) // 4096)
        second = src.read()
    finally:
        src.close()
    assert first["events"] == ["task-clock", "faults", "cs:k"]
    j = first["events"].index("faults")
    assert (second["value"][:, j] - first["value"][:, j]).sum() >= 16000


def test_unsupported_event_is_said_not_silent(tmp_path):
    """A metrics file's event the machine cannot count: the perf source says why per event."""
    from snumap_tui.errors import SnumapError
    from snumap_tui.model.usermetrics import parse_metrics
    from snumap_tui.sources.perf import PerfSource

    _metrics, events = parse_metrics('events = ["LLC-load-misses"]\n[metric.llc_mpki]\n'
                                    'formula = "llc_load_misses / instructions * 1000"\n')
    assert events == ["LLC-load-misses"]
    with pytest.raises(SnumapError, match="modifier 'z' is not supported"):
        parse_metrics('events = ["cycles:z"]\n')
    src = PerfSource(hw_events=("cycles", "LLC-load-misses", "cpu/umask=0x1ff/"),
                     sw_events=())
    try:
        st = {s.name: s for s in src.statuses()}
    finally:
        src.close()
    llc = st["perf:LLC-load-misses"]
    if llc.available:
        pytest.skip("this machine counts LLC-load-misses")
    assert llc.reason and llc.reason != "not tried"
    bad = st["perf:cpu/umask=0x1ff/"]
    assert not bad.available and ("too big" in bad.reason or "no PMU 'cpu'" in bad.reason)
