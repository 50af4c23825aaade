"""How long loading a topology takes: snumap (hwloc through ctypes + a Python walk into the
model) next to hwloc's own ``lstopo-no-graphics`` on the same input.

Inputs: the corpus XML with the most objects and the gathered tree with the most objects
(../shared/corpus), plus this machine. Numbers are medians of several runs:
- ``load_topology`` in-process (what every snumap command pays once);
- of that, hwloc's own load (hwloc_topology_set_xml/load) without our walk;
- end to end as a process: ``snumap topo`` and ``lstopo-no-graphics`` printing their text tree.

Run: ``python bench/topo_load.py [--runs N]``; writes its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import median_ms, table, write_section

from snumap_tui.topology.build import load_topology

CORPUS = REPO.parent / "shared" / "corpus"


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def hwloc_only(kind: str, src: str) -> Callable[[], object]:
    """hwloc's load without the walk, through the same binding."""
    from snumap_tui.native import hwloc as hw

    def run() -> None:
        with hw.HwlocTopology() as t, hw.captured_c_stderr():
            if kind == "xml":
                t.set_xml(src)
                t.load()
            elif kind == "fsroot":
                t.blacklist_component("x86")
                t.load({"HWLOC_FSROOT": src, "HWLOC_THISSYSTEM": "0"})
            else:
                t.load()
    return run


def process(argv: list[str]) -> Callable[[], object]:
    def run() -> None:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return run


def largest(inputs: list[tuple[str, str]], kind: str) -> tuple[str, str, int] | None:
    best = None
    for label, src in inputs:
        n = len(load_topology(**{kind: src}))  # type: ignore[arg-type]
        if best is None or n > best[2]:
            best = (label, src, n)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    lstopo = shutil.which("lstopo-no-graphics")
    snumap = [sys.executable, "-m", "snumap_tui.cli", "topo"]
    cases: list[tuple[str, str, str, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if CORPUS.is_dir():
            xmls = [(p.name, str(p)) for p in sorted((CORPUS / "xml").glob("*.xml"))]
            best = largest(xmls, "xml")
            if best:
                cases.append(("xml", *best))
            trees = []
            for tb in sorted((CORPUS / "fsroot").glob("*.tar.bz2")):
                with tarfile.open(tb, "r:bz2") as tf:
                    tf.extractall(tmp, filter="data")
                name = tb.name.removesuffix(".tar.bz2")
                trees.append((name, os.path.join(tmp, name)))
            best = largest(trees, "fsroot")
            if best:
                cases.append(("fsroot", *best))
        else:
            print("../shared/corpus is absent: measuring this machine only")
        cases.append(("machine", "this machine", "", len(load_topology())))

        rows = []
        for kind, label, src, nobj in cases:
            kw = {} if kind == "machine" else {kind: src}
            ours = median_ms(lambda kw=kw: load_topology(**kw), args.runs)
            core = median_ms(hwloc_only(kind, src), args.runs)
            opt = [] if kind == "machine" else (["--topology", src] if kind == "xml"
                                               else ["--fsroot", src])
            runs_p = max(3, args.runs // 2)
            ours_p = median_ms(process(snumap + opt), runs_p)
            # Both with I/O objects, lstopo's default filter (snumap keeps the same ones).
            ls_p = (median_ms(process([lstopo, *(["-i", src] if src else []),
                                       "--of", "console"]), runs_p) if lstopo else float("nan"))
            rows.append([f"{label} ({kind})", nobj, f"{ours:.1f}", f"{core:.1f}",
                         f"{ours - core:.1f}", f"{ours_p:.0f}", f"{ls_p:.0f}"])
            print(" | ".join(str(c) for c in rows[-1]), flush=True)

    header = ["input", "objects", "load_topology ms", "of which hwloc ms", "walk + model ms",
              "`snumap topo` process ms", "`lstopo-no-graphics` process ms"]
    body = (f"Median of {args.runs} in-process runs and {max(3, args.runs // 2)} process runs "
            "(after one warm-up). `load_topology` = hwloc load through ctypes + the Python "
            "walk + `Topology.from_flat`; the process columns include interpreter start-up and "
            "printing the text tree (`lstopo-no-graphics --of console`). Both keep the I/O "
            "objects (lstopo's default filter): for this machine that is most of hwloc's "
            "load (its I/O discovery: `load_topology(io=False)` takes ~9 ms here). "
            f"Load average when the run ended: {load_average()}.\n\n"
            + table(header, rows))
    write_section("topo_load", "Topology load: snumap vs lstopo", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
