"""`snumap scale` without running a program: placements against hwloc's own tools on fake
topologies, the cpufreq actuator on a fake sysfs tree, the numbers and findings of a
synthetic study, the hand-off forms, and bad input (one line, exit 2, nothing lost)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from snumap_tui import study as study_api
from snumap_tui.errors import SnumapError
from snumap_tui.study import configs as C
from snumap_tui.study.freq import CpuFreq, restore_leftover
from snumap_tui.study.synth import make_study

SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
# logical PU order differs from OS numbering: compact is not taskset 0-(N-1) here
TWO_PACKAGES = "pack:2 core:2 pu:2(indexes=0,4,1,5,2,6,3,7)"
WITH_NUMA = "pack:2 numa:2 l3:1 core:3 pu:2"


def scale(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SNUMAP, "scale", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, check=False)


def plan(desc: str, threads: str, places: str) -> dict[str, list[int]]:
    r = scale("--synthetic", desc, "--threads", threads, "--places", places, "--dry-run",
              "--json", "--", "prog")
    assert r.returncode == 0, r.stderr
    return {c["key"]: c["cpus"] for c in json.loads(r.stdout)["configurations"]}


def _hwloc(args: list[str]) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()


def _mask_pus(desc: str, mask: str) -> set[int]:
    out = _hwloc(["hwloc-calc", "--input", desc, mask, "--intersect", "pu", "--po"])
    return {int(x) for x in out.split(",")}


@pytest.mark.parametrize("desc", [TWO_PACKAGES, WITH_NUMA])
def test_placements_are_what_hwloc_computes(desc: str) -> None:
    """compact = hwloc's first N PUs in logical order (hwloc-calc pu:0-(N-1)); spread = the
    first PU of each of hwloc-distrib's N sets (hwloc-distrib --single N)."""
    if shutil.which("hwloc-distrib") is None or shutil.which("hwloc-calc") is None:
        pytest.skip("hwloc-utils not installed")
    pus = len(_hwloc(["hwloc-calc", "--input", desc, "all", "--intersect", "pu"]).split(","))
    counts = [1, 2, 3, 4, pus // 2 + 1, pus]
    got = plan(desc, ",".join(map(str, counts)), "compact,spread")
    for n in counts:
        compact = _mask_pus(desc, f"pu:0-{n - 1}")
        spread: set[int] = set()
        for mask in _hwloc(["hwloc-distrib", "--input", desc, "--single", str(n)]).split():
            spread |= _mask_pus(desc, mask)
        assert set(got[f"t{n}-compact"]) == compact, n
        assert set(got[f"t{n}-spread"]) == spread, n
    if desc == TWO_PACKAGES:       # on a 2-package machine: both packages at 2 threads
        assert got["t2-compact"] == [0, 4] and got["t2-spread"] == [0, 2]


def test_places_cores_pus_numa() -> None:
    got = plan(WITH_NUMA, "1,2,4", "cores,pus,numa")
    assert got["t2-cores"] == [0, 1, 2, 3]              # two whole cores
    assert got["t4-pus"] == [0, 1, 2, 3]
    # 2 threads over the NUMA nodes: one node of each package (3 cores x 2 PUs a node)
    assert got["t2-numa"] == [0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17]
    assert got["t1-numa"] == [0, 1, 2, 3, 4, 5]


def test_omp_places_follow_the_placement() -> None:
    from snumap_tui.topology.build import load_topology

    p = C.placement(load_topology(synthetic=TWO_PACKAGES), "spread", 2)
    assert p.env() == {"OMP_PLACES": "{0},{2}", "OMP_PROC_BIND": "spread"}
    assert C.placement(load_topology(synthetic=TWO_PACKAGES), "none", 2).env() == {}


def test_counts_inputs_and_substitution() -> None:
    assert C.parse_counts("pow2", "--threads", 12, "PUs", 6) == [1, 2, 4, 8]
    assert C.parse_counts("all:cores", "--threads", 12, "PUs", 3) == [1, 2, 3]
    assert C.parse_counts("4,1,2,2", "--threads", 12, "PUs", 6) == [1, 2, 4]
    with pytest.raises(SnumapError):
        C.parse_counts("two", "--threads", 4, "PUs", 2)
    inputs = C.parse_inputs(["small=-n 100 -v", "1000=big.dat", "n=250"])
    assert [(n, v) for n, _a, v in inputs] == [("small", None), ("1000", 1000.0), ("n", 250.0)]
    cfg = C.Config(threads=2, input="small", input_args="-n 100 -v", ranks=4)
    assert C.substitute(["mpirun", "./a", "{input}", "--out=x{input}"], cfg) == \
        ["mpirun", "-np", "4", "./a", "-n", "100", "-v", "--out=x-n 100 -v"]
    assert C.cpulist([0, 1, 2, 4, 6, 7]) == "0-2,4,6-7"
    assert C.parse_cpulist("0-2,4,6-7") == [0, 1, 2, 4, 6, 7]


# ---- cpufreq on a fake sysfs tree --------------------------------------------------------------

def fake_cpufreq(root: Path, n: int = 2, governor: str = "schedutil") -> Path:
    for i in range(n):
        d = root / f"cpu{i}" / "cpufreq"
        d.mkdir(parents=True)
        for name, v in (("cpuinfo_min_freq", "800000"), ("cpuinfo_max_freq", "3000000"),
                        ("scaling_min_freq", "800000"), ("scaling_max_freq", "3000000"),
                        ("scaling_governor", governor), ("scaling_setspeed", "<unsupported>")):
            (d / name).write_text(v + "\n")
    return root


def _state(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text().strip() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_cpufreq_sets_and_restores(tmp_path: Path) -> None:
    root = fake_cpufreq(tmp_path / "cpu")
    before = _state(root)
    restore = tmp_path / "freq-restore.json"
    f = CpuFreq(root, restore)
    f.check(["1.2GHz", "2000MHz", "max"])
    with pytest.raises(SnumapError, match="outside"):
        f.check(["5GHz"])
    with pytest.raises(RuntimeError), f:
        assert f.set("1.2GHz") == 1_200_000
        assert (root / "cpu1/cpufreq/scaling_max_freq").read_text() == "1200000"
        assert (root / "cpu1/cpufreq/scaling_min_freq").read_text() == "1200000"
        assert restore.exists()              # saved before the first change
        f.set("max")
        assert (root / "cpu0/cpufreq/scaling_min_freq").read_text() == "3000000"
        raise RuntimeError("a crash mid-study")
    assert _state(root) == before and not restore.exists()


def test_cpufreq_userspace_governor_and_leftover(tmp_path: Path) -> None:
    root = fake_cpufreq(tmp_path / "cpu", governor="userspace")
    for c in root.glob("cpu*/cpufreq"):
        (c / "scaling_setspeed").write_text("1500000")
    before = _state(root)
    f = CpuFreq(root, tmp_path / "freq-restore.json")
    f.set("2GHz")
    assert (root / "cpu0/cpufreq/scaling_setspeed").read_text() == "2000000"
    # the study is killed (no restore): the next one puts the frequencies back
    assert restore_leftover(tmp_path, root)
    assert _state(root) == before and not (tmp_path / "freq-restore.json").exists()


def test_cpufreq_refused_where_missing(tmp_path: Path) -> None:
    with pytest.raises(SnumapError, match="no cpufreq"):
        CpuFreq(tmp_path).check(["max"])


# ---- numbers and findings on a synthetic study -----------------------------------------------

def test_synthetic_study_numbers(tmp_path: Path) -> None:
    from snumap_tui import study as S

    make_study(tmp_path / "s", threads=[1, 2, 4, 8], repeats=3,
               serial={"scales": 0.0, "amdahl": 0.2, "serial": 0.9})
    data = S.load(tmp_path / "s")
    agg = {(a["region"], a["threads"]): a for a in data.aggregated()}
    assert agg["scales", 8]["efficiency"] == pytest.approx(1.0)
    assert agg["amdahl", 4]["speedup"] == pytest.approx(1 / (0.2 + 0.8 / 4))
    for p in (2, 4, 8):        # Karp-Flatt recovers Amdahl's serial fraction
        assert agg["amdahl", p]["karp_flatt"] == pytest.approx(0.2)
        assert agg["serial", p]["karp_flatt"] == pytest.approx(0.9)
    assert agg["amdahl", 1]["karp_flatt"] is None and agg["amdahl", 8]["n"] == 3
    rep = data.report()
    below = {b["region"]: b["threads"] for b in rep["first_below_half"]}
    # amdahl 0.2: E(4) = 1/(4*0.4) = 0.625, E(8) = 1/(8*0.3) = 0.42; serial 0.9: E(2) = 0.53,
    # E(4) = 0.27
    assert below == {"amdahl": 8, "serial": 4, "(program)": 4}
    assert rep["most_lost"]["region"] == "serial" and rep["most_lost"]["threads"] == 8
    texts = [f["text"] for f in rep["findings"]]
    assert "serial [compact] does not scale: efficiency 0.53 at 2 threads, 0.27 at 4, 0.14 at " \
           "8; serial fraction 0.90" in texts
    assert any(t.startswith("scales [compact] scales: efficiency 1.00 at 2 threads")
               for t in texts)
    tree = [(n["region"], n["depth"]) for n in rep["regions"]]
    assert tree[0] == ("(program)", 0) and ("serial", 1) in tree
    df = data.to_pandas()
    assert len(df) == 4 * 3 * 4 and set(df["region"]) == {"(program)", "scales", "amdahl",
                                                           "serial"}


def test_report_and_export_cli(tmp_path: Path) -> None:
    make_study(tmp_path / "s", threads=[1, 2], serial={"a": 0.5}, repeats=2)
    r = scale("report", str(tmp_path / "s"))
    assert r.returncode == 0, r.stderr
    assert "a [compact] scales partly: efficiency 0.67 at 2 threads; serial fraction 0.50" \
        in r.stdout
    j = json.loads(scale("report", str(tmp_path / "s"), "--json").stdout)
    assert j["runs"] == {"planned": 4, "ok": 4}
    out = tmp_path / "m.parquet"
    r = scale("export", str(tmp_path / "s"), "--format", "parquet", "-o", str(out))
    assert r.returncode == 0, r.stderr
    pq = pytest.importorskip("pyarrow.parquet")
    t = pq.read_table(out).to_pydict()
    assert len(t["region"]) == 4 * 2 and set(t["threads"]) == {1, 2}
    assert scale("export", str(tmp_path / "s"), "-o", str(out)).returncode == 2   # exists


# ---- bad input --------------------------------------------------------------------------------

def _digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file() and not p.name.endswith(".lock")}


def _refused(r: subprocess.CompletedProcess[str], words: str) -> None:
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_bad_input_one_line_nothing_lost(tmp_path: Path) -> None:
    st = tmp_path / "study"
    make_study(st, threads=[1], serial={"a": 0.5})
    before = _digest(st)
    pus = os.cpu_count() or 1
    _refused(scale("-o", str(st), "--input", "a=1", "--", "prog"), "no {input}")
    _refused(scale("-o", str(st), "--", "prog", "{input}"), "no --input")
    _refused(scale("-o", str(st), "--threads", str(pus + 1), "--", "prog"),
             f"{pus + 1} threads but the machine has {pus} PUs")
    _refused(scale("-o", str(st), "--", "other-program"), "a study of another command")
    if not Path("/sys/devices/system/cpu/cpu0/cpufreq").exists():
        _refused(scale("-o", str(st), "--freq", "max", "--", "prog"), "--freq: cannot set")
    _refused(scale("-o", str(st), "--places", "diagonal", "--", "prog"), "--places diagonal")
    _refused(scale("report", str(tmp_path)), "not a snumap study")
    assert _digest(st) == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    _refused(scale("-o", str(other), "--", "prog"), "not empty and is not a snumap study")
    assert _digest(other) == {"notes.txt": hashlib.sha256(b"mine").hexdigest()}


def test_unwritable_study_directory() -> None:
    """As nobody: a study directory in a root-owned one, and an existing root-owned study."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as nobody")
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        base.chmod(0o755)
        make_study(base / "study", threads=[1], serial={"a": 0.5})
        for p in [base / "study", *(base / "study").rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        before = _digest(base / "study")
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *SNUMAP,
                  "scale"]
        for target, words in ((base / "new", "cannot create the study directory"),
                              (base / "study", "cannot write in the study directory")):
            r = subprocess.run([*nobody, "-o", str(target), "--", "prog"], capture_output=True,
                               text=True, timeout=60, cwd="/", check=False)
            _refused(r, words)
        assert _digest(base / "study") == before and not (base / "new").exists()


def test_ranks_and_record_cpus_bad_input(tmp_path: Path) -> None:
    r = scale("--ranks", "1,2", "--dry-run", "--json", "--", "mpiexec", "./app")
    assert r.returncode == 0, r.stderr
    cmds = [c["command"] for c in json.loads(r.stdout)["configurations"]]
    assert cmds == [["mpiexec", "-np", "1", "./app"], ["mpiexec", "-np", "2", "./app"]]
    _refused(scale("--ranks", "2", "--dry-run", "--", "./app"), "no MPI launcher")
    pus = os.cpu_count() or 1
    rec = subprocess.run([*SNUMAP, "record", "-o", str(tmp_path / "x.rec"), "--cpus",
                          str(pus + 7), "--", "true"], capture_output=True, text=True,
                         timeout=60, check=False)
    _refused(rec, f"--cpus {pus + 7}: CPUs [{pus + 7}] are not available here")
    assert not (tmp_path / "x.rec").exists()


def test_placement_finding_says_when_the_cpus_are_the_same() -> None:
    from snumap_tui.study.report import _placement_finding

    rows = [{"region": "r", "threads": 2, "ranks": None, "places": p, "input": None,
             "freq": None, "time_median_s": t} for p, t in (("compact", 1.0), ("spread", 1.5))]
    same = [{"places": p, "threads": 2, "cpuset": "0-1"} for p in ("compact", "spread")]
    (f,) = _placement_finding("r", rows, "threads", same)
    assert f["best"] == "compact" and "1.50x faster than spread" in f["text"]
    assert "both on CPUs 0-1: only the OpenMP binding differs" in f["text"]
    other = [{"places": "compact", "threads": 2, "cpuset": "0-1"},
             {"places": "spread", "threads": 2, "cpuset": "0,4"}]
    assert "both on" not in _placement_finding("r", rows, "threads", other)[0]["text"]
    rows[1]["time_median_s"] = 1.05            # under 10 %: no finding
    assert _placement_finding("r", rows, "threads", other) == []


def test_models_plots_extrap_and_view_cli(tmp_path: Path) -> None:
    """The report's PMNF models recover Amdahl's law, --plot and --extrap write their files,
    `scale view --screenshot` draws the efficiency diagram (four thread counts, so the models
    come from a hypothesis search, not the two-point rule)."""
    make_study(tmp_path / "s", threads=[1, 2, 4, 8], repeats=2,
               serial={"amdahl": 0.2, "scales": 0.0})
    r = scale("report", str(tmp_path / "s"), "--json", "--predict", "64", "--plot",
              str(tmp_path / "plots"), "--extrap", str(tmp_path / "study.txt"))
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    models = rep["models"]["models"]
    assert "threads^(-1)" in models["amdahl"]["formula"] and "note" not in models["amdahl"]
    # T(p) = T1 (0.2 + 0.8 / p): at 64 threads 0.2125 T1
    t1 = next(a["time_median_s"] for a in study_api.load(tmp_path / "s").aggregated()
              if a["region"] == "amdahl" and a["threads"] == 1)
    assert models["amdahl"]["at_predict"]["time_s"] == pytest.approx(0.2125 * t1, rel=0.02)
    names = {p.name for p in (tmp_path / "plots").iterdir()}
    assert {"efficiency-amdahl.svg", "speedup.svg", "speedup.png"} <= names
    text = (tmp_path / "study.txt").read_text()
    assert "PARAMETER threads" in text and "REGION program->amdahl" in text
    svg = tmp_path / "view.svg"
    r = scale("view", str(tmp_path / "s"), "--screenshot", str(svg), "--size", "120x30")
    assert r.returncode == 0, r.stderr
    body = svg.read_text()
    assert "parallel&#160;efficiency" in body or "parallel efficiency" in body
    r = scale("view", str(tmp_path / "s"), "--screenshot", str(svg), "--size", "9x9")
    assert r.returncode == 2 and "--size" in r.stderr


def test_models_with_numeric_inputs(tmp_path: Path) -> None:
    """Numeric inputs (three sizes at least): a model of threads and size together, whose
    terms are the study's own: T = n (0.3 + 0.7 / p)."""
    make_study(tmp_path / "s", threads=[1, 2, 4, 8], repeats=1, serial={"r": 0.3},
               sizes=[100.0, 200.0, 400.0, 800.0])
    rep = study_api.load(tmp_path / "s").report(16)
    item = rep["models"]["models"]["r"]
    wi = item["with_input"]
    assert "input_value" in wi["formula"] and "threads^(-1)" in wi["formula"], wi
    assert wi["at_cores_largest_input"]["time_s"] == pytest.approx(800 * (0.3 + 0.7 / 8),
                                                                   rel=0.01)
    assert item["series"]["input"] in {"n100", "n200", "n400", "n800"}
