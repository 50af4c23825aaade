"""A study as data: its manifest, runs, measurements and aggregated table, and the hand-off
forms (JSON-ready dicts, pandas DataFrames, Parquet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.extras import install_extra
from snumap_tui.study.aggregate import MEASURES, aggregate, measurements
from snumap_tui.study.figures import FLAT, event_names, flat
from snumap_tui.study.manifest import Study

#: Parquet/DataFrame columns of the measurements, in this order (one row per run x region),
#: then the counter and memory figures (study/figures.py FLAT) and ``event:NAME`` per event.
COLUMNS = ("run", "config", "region", "parent", "kind", "wait", "threads", "ranks", "places",
           "input", "input_value", "freq", "repeat", "time_s", "untraced_s", "energy_j", "calls",
           "status", "recording")


class StudyData:
    def __init__(self, study: Study) -> None:
        self.study = study
        self.dir = study.dir
        self.manifest = study.manifest
        self.runs = study.run_states()
        self.measurements = measurements(study, self.runs)
        self._agg: list[dict[str, Any]] | None = None

    def aggregated(self) -> list[dict[str, Any]]:
        if self._agg is None:
            self._agg = aggregate(self.measurements)
        return self._agg

    def report(self, predict: int | None = None, metric: str = "time",
               measure: str = "median") -> dict[str, Any]:
        """The report; METRIC: the figure the models fit (study/figures.py METRICS or an
        event's name; SnumapError for another); MEASURE: median or mean of a time's
        repeats for the models."""
        from snumap_tui.study.figures import check_metric
        from snumap_tui.study.report import report_from

        check_metric(metric, self.aggregated())
        if measure not in MEASURES:
            raise SnumapError(f"--measure {measure}: choose {' or '.join(MEASURES)}")
        if measure == "mean" and metric != "time":
            raise SnumapError("--measure mean goes with --metric time (the other figures are "
                              "medians over the repeats)")
        return report_from(self.manifest, self.runs, self.measurements, self.aggregated(),
                           predict, metric, measure, damaged=self.study.damaged)

    def to_json(self) -> dict[str, Any]:
        """Configurations, runs and per-region measurements, JSON-ready."""
        return {"study": {k: v for k, v in self.manifest.items()
                          if k not in ("runs", "plan", "configurations")},
                "configurations": self.manifest.get("configurations", []),
                "runs": self.manifest.get("runs", []),
                "measurements": self.measurements, "aggregated": self.aggregated()}

    def column_names(self) -> list[str]:
        """COLUMNS, the figures' columns and one per event counted in the study."""
        return [*COLUMNS, *FLAT, *(f"event:{e}" for e in event_names(self.measurements))]

    def rows(self) -> list[dict[str, Any]]:
        """The measurements as flat rows (the exports' and the DataFrame's)."""
        events = event_names(self.measurements)
        return [{**{c: m.get(c) for c in COLUMNS}, **flat(m, events)}
                for m in self.measurements]

    def columns(self) -> dict[str, list[Any]]:
        rows = self.rows()
        return {c: [r.get(c) for r in rows] for c in self.column_names()}

    def to_pandas(self, aggregated: bool = False) -> Any:
        """The measurements (one row per run x region) or, with AGGREGATED, the table per
        region and configuration, as a pandas DataFrame."""
        try:
            import pandas as pd
        except ImportError:
            raise SnumapError(f"pandas is not installed: {install_extra('pandas')}") from None
        if aggregated:
            return pd.DataFrame(self.aggregated())
        return pd.DataFrame(self.columns(), columns=self.column_names())

    def write_parquet(self, path: Path | Any) -> int:
        """One row per run x region (PATH: a file name or a binary file object); returns
        the number of rows."""
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise SnumapError(f"Parquet needs pyarrow: {install_extra('parquet')}") from None
        types = {"threads": pa.int32(), "ranks": pa.int32(), "repeat": pa.int32(),
                 "calls": pa.int64(), "wait": pa.bool_(), "input_value": pa.float64(),
                 "time_s": pa.float64(), "untraced_s": pa.float64(), "energy_j": pa.float64()}
        types |= {c: pa.float64() for c in (*FLAT, *self.column_names())
                  if c not in types and c not in COLUMNS and not c.endswith("_why")}
        types["mem_rss_max_bytes"] = pa.int64()
        cols = self.columns()
        for c, v in cols.items():       # 2**64 in a float column, 1.5 bytes in an int one
            t = types.get(c)
            if t == pa.float64():
                cols[c] = [float(x) if isinstance(x, int) else x for x in v]
            elif t in (pa.int64(), pa.int32()):
                cols[c] = [round(x) if isinstance(x, float) else x for x in v]
        table = pa.table({c: pa.array(v, type=types.get(c, pa.string()))
                          for c, v in cols.items()})
        pq.write_table(table, path)
        return table.num_rows
