"""The running exporter: a Sampler whose Samples feed the totals, an HTTP server, a textfile.

The sampler thread does all the work of a sweep (read the sources, add up the counters, keep
the job processes watched, write the textfile); HTTP threads only render the last snapshot.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from snumap_tui.exporter.collector import ExporterState, Exposition
from snumap_tui.exporter.jobs import JobTotals
from snumap_tui.exporter.server import MetricsServer, serve, write_textfile
from snumap_tui.exporter.totals import NodeTotals
from snumap_tui.heap import LongLived
from snumap_tui.model.sample import Sample
from snumap_tui.model.sampler import Sampler
from snumap_tui.sources.base import Source
from snumap_tui.topology.model import Topology

# The whole process list (where new jobs are found) is read this often, as often as
# Prometheus scrapes by default; the job processes themselves every sweep (set_cadence).
# Reading every process every second was most of the exporter's CPU (bench/exporter.py).
TASKS_EVERY_S = 15.0


class Exporter:
    """Sampler + totals + exposition; ``serve()`` and ``textfile`` are optional outputs."""

    def __init__(self, topology: Topology, root: Path = Path("/"), interval_s: float = 1.0,
                 *, per_pu: bool = False, sources: Iterable[Source] | None = None,
                 textfile: Path | None = None, jobs: bool = True) -> None:
        self.sampler = Sampler(topology, root, interval_s, sources=sources, tasks=jobs)
        if jobs:
            self.sampler.set_tasks_cadence(TASKS_EVERY_S)
        self.state = ExporterState(topology=topology, per_pu=per_pu,
                                   nodes=NodeTotals(topology), jobs=JobTotals(topology),
                                   statuses=self.sampler.statuses)
        self.exposition = Exposition(self.state)
        self.textfile = textfile
        self.server: MetricsServer | None = None
        self._textfile_error: str | None = None
        self.failed = threading.Event()     # the sampler stopped: the command exits 1
        self._heap = LongLived()            # settled after the second sweep (heap.py)

    # ---- the sampler thread ----
    def on_sample(self, sample: Sample) -> None:
        st = self.state
        st.nodes.add(sample)
        if st.jobs.add(sample.readings.get("tasks")):
            self.sampler.watch_pids(st.jobs.pids, counters=True)
        st.sweep_seconds += max(0.0, (time.monotonic_ns() - sample.t_ns) / 1e9)
        st.sweeps += 1
        if st.sweeps == 2:
            # The totals have their first interval: start-up is over, and what lives now
            # lives until the end (heap.py).
            self._heap.settle()
        if self.textfile is not None:
            self._write_textfile()

    def _write_textfile(self) -> None:
        assert self.textfile is not None
        try:
            write_textfile(self.textfile, self.exposition.render(False))
        except OSError as exc:
            why = f"cannot write {self.textfile}: {exc.strerror or exc}"
            if why != self._textfile_error:      # one line per new problem, not per sweep
                print(f"snumap exporter: {why}", file=sys.stderr, flush=True)
            self._textfile_error = why
            self.state.errors["textfile"] = why
        else:
            self._textfile_error = None
            self.state.errors.pop("textfile", None)

    # ---- control ----
    def serve(self, listen: str, **kw: float) -> MetricsServer:
        self.server = serve(listen, self.exposition.render, **kw)
        return self.server

    def start(self) -> None:
        # No Frame callback: the Frames are the views'; the exporter publishes the counters
        # under them, so the sampler need not derive any.
        self.sampler.start(None, on_sample=self.on_sample,
                           on_error=self._on_error)

    def _on_error(self, exc: BaseException) -> None:
        """A bug or a broken machine stopped the sampler: say so and let the command exit
        non-zero (a service manager restarts it) rather than serve frozen counters."""
        self.state.errors["sampler"] = f"stopped: {exc}"
        print(f"snumap exporter: the sampler stopped: {exc!r}", file=sys.stderr, flush=True)
        self.failed.set()

    def render(self, openmetrics: bool = False) -> bytes:
        return self.exposition.render(openmetrics)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        self.sampler.close()
        self._heap.release()
