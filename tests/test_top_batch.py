"""`snumap top --batch`: text and JSON lines from a fake machine whose counters advance, and
one-line errors for bad options."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from fakefs import FakeRoot

from snumap_tui.cli import main


def run_while_busy(fr: FakeRoot, argv: list[str], capsys: pytest.CaptureFixture[str],
                   step_s: float = 0.05) -> str:
    """Run the command while PU 0 of the fake machine is 100 % busy, the others idle (the
    fake's counters advance every ``step_s``)."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(step_s):
            fr.advance(step_s, busy={0: 1.0})

    t = threading.Thread(target=tick, daemon=True)
    t.start()
    try:
        rc = main(argv)
    finally:
        stop.set()
        t.join()
    out = capsys.readouterr()
    assert rc == 0, out.err
    return out.out


def test_batch_json_lines_per_pu_and_numa(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    fr = FakeRoot(tmp_path, cpus=8, nodes=2, packages=2)
    out = run_while_busy(fr, ["top", "--fsroot", str(tmp_path), "--batch", "--json",
                               "--count", "2", "--interval", "0.3"], capsys)
    lines = out.splitlines()
    assert len(lines) == 2
    frame = json.loads(lines[-1])
    objs = frame["objects"]
    assert objs["PU:0"]["util_pct"] > 80
    assert objs["PU:5"]["util_pct"] < 20
    assert {"NUMANode:0", "NUMANode:1"} <= objs.keys()
    assert objs["NUMANode:1"]["mem_total_bytes"] == 16 * 1024 * 1024 * 1024
    assert "procstat" in frame["sources"]


def test_batch_text_tree_and_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fr = FakeRoot(tmp_path, cpus=4, nodes=1, packages=1)
    out = run_while_busy(fr, ["top", "--fsroot", str(tmp_path), "--batch", "--count", "1",
                               "--interval", "0.3"], capsys)
    assert out.startswith("== ")
    lines = out.splitlines()
    # a gathered tree, not this machine (after the header, which may wrap to fit 80 columns)
    assert any(x.startswith("data from the tree") for x in lines[1:3])
    assert any(x.startswith("unavailable: perf") for x in lines)   # and why perf is off
    assert any(x.split()[:2] == ["object", "CPU"] for x in lines)
    machine = next(x for x in lines if x.startswith("Machine"))
    assert "%" in machine and "G/" in machine           # utilisation and node memory
    assert any("n/a" in x for x in lines)               # what the fake tree lacks is n/a, not 0


@pytest.mark.parametrize("argv, msg", [
    (["top", "--batch", "--interval", "0"], "--interval"),
    (["top", "--count", "3"], "use it with --batch"),
    (["top", "--json"], "use it with --batch"),
    (["top", "--batch", "--tasks", "-1"], "--tasks -1"),
    (["top", "--batch", "--count", "0"], "--count"),
    (["top", "--batch", "--fsroot", "/nonexistent-snumap-dir"], "not a directory"),
])
def test_bad_options_are_one_line_errors(argv: list[str], msg: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_tui_refuses_a_non_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "--synthetic", "pack:1 core:2 pu:1"]) == 2
    assert "--batch" in capsys.readouterr().err


def test_batch_fsroot_statuses_match_the_tui(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A gathered tree without powercap or power PMU: batch mode says what the TUI's ``i``
    screen says (the tree lacks the files; no fix for this machine offered as that one's)."""
    FakeRoot(tmp_path, cpus=2, rapl=False, power_pmu=False)
    rc = main(["top", "--fsroot", str(tmp_path), "--batch", "--json", "--count", "1",
               "--interval", "0.05"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    rapl = json.loads(out.out.splitlines()[-1])["sources"]["rapl"]
    assert not rapl["available"] and rapl["fix"] is None
    assert rapl["reason"].startswith("unknown for that machine")
    assert main(["top", "--fsroot", str(tmp_path), "--batch", "--count", "1",
                 "--interval", "0.05"]) == 0
    text = capsys.readouterr().out
    assert "unavailable: rapl: unknown for that machine" in text


def test_live_feed_drives_the_samplers_own_api(tmp_path: Path) -> None:
    """The TUI's feed calls the Sampler's methods (no probing for ones it may not have): the
    interval is validated, the watched process and the tasks cadence reach the sampler."""
    from snumap_tui.commands.top import LiveFeed
    from snumap_tui.errors import SnumapError
    from snumap_tui.topology.build import load_topology

    FakeRoot(tmp_path, cpus=2)
    topo = load_topology(fsroot=tmp_path)
    feed = LiveFeed(topo, tmp_path, 1.0, origin=("fsroot", "x"))
    try:
        feed.set_interval(0.5)
        assert feed.interval_s == feed.sampler.interval_s == 0.5
        with pytest.raises(SnumapError):
            feed.set_interval(0.0)
        feed.tasks_cadence(5.0)
        assert feed.sampler.tasks_every_s == 5.0
        feed.watch_pid(4200)
        assert feed.sampler._watched == {4200}
        feed.watch_pid(None)
        assert feed.sampler._watched == set()
    finally:
        feed.stop()


def assert_fits_80(text: str) -> None:
    wide = [(len(x), x) for x in text.splitlines() if len(x) > 80]
    assert not wide, wide


def test_batch_text_fits_80_columns_on_a_fake_tree(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """No source for frequency or power and a kworker whose comm carries its workqueue name
    (Linux 6.x): the reasons wrap at words, the COMMAND column is cut with an ellipsis, and
    the memory heading is short with its page-cache note said once."""
    from fakefs import FakeProcess, FakeThread

    monkeypatch.setenv("COLUMNS", "80")        # an 80-column terminal (piped, lines are whole)
    fr = FakeRoot(tmp_path, cpus=4, nodes=2, packages=2, rapl=False, power_pmu=False,
                  cpufreq=False)
    long_comm = "kworker/R-kvfree_rcu_reclaim_and_then_some_more_words"
    fr.processes.append(FakeProcess(6, long_comm, [], 0, "/", [0, 1, 2, 3],
                                    [FakeThread(6, long_comm, 0)]))
    out = run_while_busy(fr, ["top", "--fsroot", str(tmp_path), "--batch", "--count", "1",
                               "--interval", "0.3", "--tasks", "50"], capsys)
    assert_fits_80(out)
    lines = out.splitlines()
    assert any(x.startswith("unavailable: ") for x in lines)
    wrapped = [i for i, x in enumerate(lines[:-1])
               if x.startswith("unavailable: ") and lines[i + 1].startswith("    ")
               and not lines[i + 1].startswith("unavailable")]
    assert wrapped                                       # a long reason goes on, indented
    head = next(x for x in lines if x.split()[:2] == ["object", "CPU"])
    assert head.endswith("mem used/total")
    assert sum("excludes the page cache" in x for x in lines) == 1
    kworker = next(x for x in lines if "kworker/R-kvfree" in x)
    assert kworker.endswith("\u2026") and len(kworker) == 80


def test_batch_text_fits_80_columns_on_this_machine(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if not Path("/proc/stat").is_file():
        pytest.skip("no procfs")
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["top", "--batch", "--count", "1", "--interval", "0.05",
                 "--tasks", "200"]) == 0
    assert_fits_80(capsys.readouterr().out)


def test_wrap_line_breaks_at_words_with_an_indent() -> None:
    from snumap_tui.commands.top import clip, wrap_line

    text = "unavailable: freq: no cpufreq driver " + "word " * 30
    lines = wrap_line(text)
    assert len(lines) > 1 and all(len(x) <= 80 for x in lines)
    assert all(x.startswith("    ") for x in lines[1:])
    assert " ".join(x.strip() for x in lines) == text.strip()
    assert wrap_line("short") == ["short"]
    assert clip("abcdef", 4) == "abc\u2026" and clip("abc", 4) == "abc"


def test_batch_json_honours_p_as_the_text_does(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    fr = FakeRoot(tmp_path, cpus=4, nodes=1, packages=1)
    pids = sorted({p.pid for p in fr.processes})
    assert len(pids) > 2
    want = pids[1]
    out = run_while_busy(fr, ["top", "--fsroot", str(tmp_path), "--batch", "--json",
                               "--count", "1", "--interval", "0.3", "-p", str(want)], capsys)
    frame = json.loads(out.splitlines()[-1])
    assert {t["pid"] for t in frame["tasks"]} == {want}
    out = run_while_busy(fr, ["top", "--fsroot", str(tmp_path), "--batch", "--json",
                               "--count", "1", "--interval", "0.3"], capsys)
    assert len({t["pid"] for t in json.loads(out.splitlines()[-1])["tasks"]}) > 1


def test_mem_used_is_without_the_page_cache_in_json_and_text(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The text tree's "mem used" and the JSON's mem_used_bytes are one number: MemTotal -
    MemFree - FilePages (what free(1) calls used); the JSON counted the page cache."""
    from snumap_tui.ui.tree_rows import fmt_bytes

    fr = FakeRoot(tmp_path, cpus=4, nodes=1, packages=1)
    out = run_while_busy(fr, ["top", "--fsroot", str(tmp_path), "--batch", "--json",
                               "--count", "1", "--interval", "0.3"], capsys)
    node = json.loads(out.splitlines()[-1])["objects"]["NUMANode:0"]
    used_kb = fr.mem_per_node_kb - fr.mem_free_kb[0]
    assert node["mem_used_bytes"] == (used_kb - used_kb // 3) * 1024
    assert node["mem_used_pct"] == pytest.approx(
        100 * node["mem_used_bytes"] / node["mem_total_bytes"])
    text = run_while_busy(fr, ["top", "--fsroot", str(tmp_path), "--batch", "--count", "1",
                                "--interval", "0.3"], capsys)
    row = next(x for x in text.splitlines() if "NUMA" in x and "/" in x)
    assert f"{fmt_bytes(node['mem_used_bytes'])}/{fmt_bytes(node['mem_total_bytes'])}" in row
