"""The replay of a merged job of many nodes reads the first screen's nodes first and the others
while that screen is up; once every node is read the data is the whole job's, as if read at
once, and what the user set (folded nodes) stays."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np

from snumap_tui import store
from snumap_tui.store.merge import merge
from snumap_tui.ui.replay_data import LAZY_MIN_NODES, first_nodes, load_replay

sys.path.insert(0, str(Path(__file__).parent))
from jobrecs import node_rec

NODES = 6


def job(tmp_path: Path, n: int = NODES) -> Path:
    files = []
    for k in range(n):
        runs = {r: [(1_000_000 * (k + 1) * (j + 1), 1_000_000 * (k + 1) * (j + 1) + 500_000)
                    for j in range(5)] for r in (2 * k, 2 * k + 1)}
        files.append(node_rec(tmp_path / f"n{k}.rec", f"n{k}", 10**9 + 1000 * k, 5 * 10**9,
                              rank_pids={2 * k: 1000 + 2 * k, 2 * k + 1: 1001 + 2 * k},
                              runs=runs))
    out = tmp_path / "job.rec"
    merge(files, out)
    return out


def rows(data: object) -> list[tuple[list[int], list[int], list[int]]]:
    iv = data.intervals                                    # type: ignore[attr-defined]
    return [(s.tolist(), e.tolist(), t.tolist()) for s, e, t in zip(iv.start, iv.end, iv.tid)]


def test_first_nodes_then_the_rest_equal_the_whole_job(tmp_path: Path) -> None:
    path = job(tmp_path)
    with store.open(path) as rec:
        assert first_nodes(rec, rows=4) == {0, 1}             # 2 PUs a node
        assert first_nodes(rec, rows=10**6) is None           # every node: read at once
        part = load_replay(rec, {0, 1})
        full = load_replay(rec)
        assert part.pending == NODES - 2 and full.pending == 0
        assert (part.t0, part.t1) == (full.t0, full.t1)
        got, want = rows(part), rows(full)
        assert got[:4] == want[:4] and all(len(s) for s, _, _ in want)
        assert all(s == [] for s, _, _ in got[4:])            # the other nodes: not yet
        part.fold("n3", fold=True)                            # the user folds a node meanwhile
        part.adopt(full)
        assert rows(part) == want and part.pending == 0 and part.folded == {"n3"}
        assert len(part.labels) == len(full.labels) - 1


def test_a_small_job_is_read_at_once(tmp_path: Path) -> None:
    with store.open(job(tmp_path, LAZY_MIN_NODES - 1)) as rec:
        assert first_nodes(rec, rows=2) is None


def test_the_app_shows_the_first_nodes_then_every_node(tmp_path: Path) -> None:
    from snumap_tui.ui.replay import GanttView, ReplayApp

    path = job(tmp_path)

    async def shown(data: object) -> tuple[np.ndarray, str]:
        app = ReplayApp(data)                               # type: ignore[arg-type]
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            if data.pending:                                # type: ignore[attr-defined]
                assert "more nodes" in str(app.query_one("#header").render())
            for _ in range(200):                            # the rest, read in a thread
                if not app.data.pending:
                    break
                await pilot.pause(0.02)
            await pilot.pause()
            header = str(app.query_one("#header").render())
            bins = app.query_one(GanttView).rendered.bins   # type: ignore[union-attr]
            return bins.key.copy(), header

    with store.open(path) as rec:
        lazy_key, lazy_header = asyncio.run(shown(load_replay(rec, {0, 1})))
    with store.open(path) as rec:
        whole_key, _ = asyncio.run(shown(load_replay(rec)))
    assert "more nodes" not in lazy_header
    assert np.array_equal(lazy_key, whole_key) and (whole_key[4:] >= 0).any()
