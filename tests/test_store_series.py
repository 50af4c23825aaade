"""A recording's metrics over time through the Python API: the same derive() as live."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from snumap_tui import store
from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.model.sample import Sample
from snumap_tui.trace.events import empty_events


def _samples(topo, busy_by_frame: list[list[float]]) -> list[Sample]:
    """procstat samples whose PUs are busy by the given fractions in each 1 s frame."""
    cpus = np.array(topo.pu_os_indexes, dtype=np.int64)
    ticks = np.zeros((len(cpus), 10), dtype=np.uint64)
    out = [Sample(t_ns=1_000_000_000, wall_ns=5_000_000_000,
                  readings={"procstat": {"cpus": cpus.copy(), "ticks": ticks.copy(), "hz": 100}})]
    for i, busy in enumerate(busy_by_frame, start=1):
        for j, b in enumerate(busy):
            ticks[j, 0] += np.uint64(round(100 * b))          # user
            ticks[j, 3] += np.uint64(round(100 * (1 - b)))    # idle
        out.append(Sample(t_ns=(1 + i) * 1_000_000_000, wall_ns=(5 + i) * 1_000_000_000,
                          readings={"procstat": {"cpus": cpus.copy(), "ticks": ticks.copy(),
                                                 "hz": 100}}))
    return out


def test_metric_series_matches_the_known_load(tmp_path: Path) -> None:
    topo = synthetic_topology(packages=2, numa_per_package=1, cores_per_numa=1, pus_per_core=2)
    pus = topo.pu_os_indexes
    assert len(pus) == 4
    frames = [[1.0, 0.0, 0.5, 0.5], [0.25, 0.25, 0.0, 1.0]]
    path = write_recording(tmp_path / "m.rec", topo, empty_events(), samples=_samples(topo, frames))
    with store.open(path) as rec:
        s = store.metric_series(rec)
    assert s.values["util_pct"].shape == (2, len(topo))
    assert np.allclose(s.dt_s, [1.0, 1.0])
    for f, busy in enumerate(frames):
        for pu, b in zip(pus, busy):
            assert s.of("util_pct", "PU", pu)[f] == pytest.approx(100 * b)
    # Aggregation: a package is the mean of its PUs, the machine the mean of all.
    pkg0 = topo.by_type("Package")[0]
    first_two = [frames[0][pus.index(p)] for p in sorted(pkg0.cpuset)]
    assert s.of("util_pct", "Package", pkg0.os_index)[0] == pytest.approx(50 * sum(first_two))
    assert s.values["util_pct"][1, topo.root.id] == pytest.approx(100 * sum(frames[1]) / 4)
    # Metrics without data stay NaN, never 0.
    if "ipc" in s.values:
        assert np.isnan(s.values["ipc"]).all()
    with pytest.raises(KeyError, match="no metric"):
        s.of("no-such-metric", "PU", pus[0])


def test_metric_series_as_a_dataframe(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    topo = synthetic_topology(packages=1, numa_per_package=1, cores_per_numa=2, pus_per_core=1)
    path = write_recording(tmp_path / "d.rec", topo, empty_events(),
                           samples=_samples(topo, [[1.0, 0.0]]))
    with store.open(path) as rec:
        df = store.metric_series(rec, metrics=["util_pct"]).to_dataframe()
        frames = rec.to_dataframes()
    assert isinstance(df, pd.DataFrame)
    assert set(df["metric"]) == {"util_pct"}
    pu_rows = df[df["type"] == "PU"].set_index("os_index")["value"]
    assert pu_rows.to_dict() == {topo.pu_os_indexes[0]: 100.0, topo.pu_os_indexes[1]: 0.0}
    assert isinstance(frames["events"], pd.DataFrame)
