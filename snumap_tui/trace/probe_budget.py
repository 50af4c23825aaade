"""The region probes' budget: what a probed call costs, and a function called too often to
trap has its probes detached (docs/architecture.md, "A probe budget per function").

On the eBPF path the kernel keeps the budget (bpf/regions.bpf.c "Probe budget": a credit per
thread and function, the first hit past it cuts the function's records at that instant and
wakes the drain); ``BudgetMixin._over_budget`` then detaches the function's probes. On the perf
path the decoded hits are counted per function and thread over windows (``_perf_budget``).
Either way the function's calls until then stay exact, the detach is said (stderr, a marker,
the report's partial mark), and ``probe_costs`` gives per function its hits and their
estimated cost for the recording's "region probes" info chunk.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Above this many region-body hits a second the body probes are detached (the rest of the
# recording keeps every span, call and count; per-thread times come from the time before):
# a body's entry is usually single-stepped by the kernel, ~14 us a hit measured here
# (docs/benchmarks.md), so 10,000 hits a second is ~5 % of a core.
BODY_BUDGET = 10_000
BODY_WINDOW_NS = 500_000_000
# What a probed call costs the thread that makes it, estimated (bench/observer_critical.py
# measures them: the kernel's BPF run time plus the trap, probed vs unprobed calls): an entry
# probe on an instruction the kernel emulates, one it single-steps, and a return probe.
ENTRY_NS = 850
STEPPED_NS = 9_400
RETURN_NS = 700
BUDGET_SHARE = 0.01             # default --probe-budget: 1 % of a thread's time per function


def group_of(site: Any) -> str:
    """The probes detached together: every parallel-region body, or one function's."""
    return "body" if site.entry.role == "body" else f"fn:{site.entry.symbol}"


def _emulated(path: str, off: int) -> bool:
    """Whether the instruction at file offset OFF of PATH is one the kernel emulates (the
    cheap hit; trace/probe_point.py); True when it cannot be read (the estimate stays low)."""
    from snumap_tui.trace.probe_point import emulated

    try:
        with open(path, "rb") as f:
            f.seek(off)
            return emulated(f.read(16))
    except OSError:
        return True


class BudgetMixin:
    """RegionTracer's budget: its sites, probes, names, notes and problems are the tracer's."""

    sites: list[Any]
    uprobes: Any
    names: Any
    notes: list[tuple[int, str]]
    problems: list[str]
    path: str | None
    _lock: Any

    def _init_budget(self) -> None:
        self.budget = BUDGET_SHARE      # a function's probes' share of a thread (0: no budget)
        self.detached: dict[str, tuple[int, int]] = {}      # group -> (t_ns, calls until)
        self._row_hits = np.zeros(0, np.int64)   # hits per tag seen as rows (the perf path)
        self._perf_window: tuple[int, dict[int, int]] = (0, {})    # (start, (tag, tid) hits)
        self._body_tags = np.zeros(0, np.int64)
        self._window = (0, 0)           # (start t_ns, body hits since)
        self.bodies_off_at: int | None = None

    def spend_ns(self, site: Any) -> int:
        """The credit one hit of SITE spends in the kernel (0: none): its function's counting
        site spends the call's probe cost over the budget. A --probe function is the user's
        choice: never detached, its cost still said."""
        if not site.counting or not self.budget or site.entry.kind == "user":
            return 0
        return int(site.call_ns / self.budget)

    def count_rows(self, rec: np.ndarray) -> None:
        """Hits per tag of decoded rows (the perf path; the eBPF path counts in the kernel)."""
        if self.path == "ebpf" or not len(rec):
            return
        n = np.bincount(rec["tag"].astype(np.int64), minlength=len(self.sites))
        if len(self._row_hits) < len(n):
            self._row_hits = np.concatenate(
                [self._row_hits, np.zeros(len(n) - len(self._row_hits), np.int64)])
        self._row_hits[:len(n)] += n

    def _over_budget(self) -> None:
        """Detach the functions whose probes passed their budget (in the drain thread, within
        ~10 ms of the kernel's record): their calls until then stay counted."""
        over, self.uprobes.over = self.uprobes.over, []
        for tag, t_ns in over:
            if tag >= len(self.sites):
                continue
            site = self.sites[tag]
            group = group_of(site)
            if group in self.detached:
                continue
            self.uprobes.detach(group, wait=False)
            calls = self.uprobes.hits_of(tag)
            self.detached[group] = (t_ns, calls)
            what = "parallel-region bodies" if group == "body" else site.entry.symbol
            rate = self.budget * 1e9 / site.call_ns
            text = (f"regions: {what}: probes detached after {calls:,} calls, past the budget "
                    f"({100 * self.budget:g}% of a thread's time at ~{site.call_ns:,} ns a "
                    f"call: {rate:,.0f} calls/s per thread); its counts and times up to the "
                    "budget are exact, later calls are not counted")
            self.notes.append((t_ns, text))
            self.problems.append(text.removeprefix("regions: "))

    def probe_costs(self) -> dict[str, dict[str, int]]:
        """Per probed function (region name; a span opener under its runtime function's):
        ``hits`` (calls the probes trapped), ``probe_ns`` they cost in all (estimated), ``call_ns`` per call, and
        ``detached_ns`` when its probes were detached past the budget (0: never)."""
        with self._lock:
            by_tag = getattr(self.uprobes, "hits_by_tag", None)
            hits = by_tag(len(self.sites)) if by_tag is not None else \
                {t: int(n) for t, n in enumerate(self._row_hits.tolist()) if n}
            out: dict[str, dict[str, int]] = {}
            for tag, site in enumerate(self.sites):
                if not site.counting:
                    continue
                name = self.names[site.rid].name if site.rid >= 0 else site.entry.symbol
                n = hits.get(tag, 0)
                got = self.detached.get(group_of(site))
                o = out.setdefault(name, {"hits": 0, "probe_ns": 0, "call_ns": site.call_ns,
                                          "detached_ns": 0})
                o["hits"] += n
                o["probe_ns"] += n * site.call_ns
                if got is not None:
                    o["detached_ns"] = got[0]
            return {k: v for k, v in out.items() if v["hits"] or v["detached_ns"]}

    def _perf_budget(self, rec: np.ndarray) -> None:
        """The probe budget on the perf path (the eBPF path keeps it in the kernel): per
        function, the busiest thread's calls over BODY_WINDOW_NS times a call's probe cost,
        past the budget's share of the window, detach the function's probes (at the next
        decode: up to a poll later than the kernel would)."""
        if self.path == "ebpf" or not self.budget or not len(rec):
            return
        t1 = int(rec["t_ns"][-1])
        start = self._perf_window[0] or int(rec["t_ns"][0])
        tag = rec["tag"].astype(np.int64)
        key = (tag << 32) | (rec["tid"].astype(np.int64) & 0xFFFFFFFF)
        counted = self._perf_window[1]
        for k, c in zip(*np.unique(key, return_counts=True)):
            counted[int(k)] = counted.get(int(k), 0) + int(c)
        if t1 - start < BODY_WINDOW_NS:
            self._perf_window = (start, counted)
            return
        self._perf_window = (t1, {})
        most: dict[int, int] = {}
        for k, c in counted.items():
            most[k >> 32] = max(most.get(k >> 32, 0), c)
        for t, c in most.items():
            site = self.sites[t] if t < len(self.sites) else None
            if site is None or not site.counting or site.entry.kind == "user":
                continue
            share = c * site.call_ns / (t1 - start)
            group = group_of(site)
            if share <= self.budget or group in self.detached:
                continue
            self.uprobes.detach(group)
            self.detached[group] = (t1, 0)
            if group == "body":
                self.bodies_off_at = t1
            what = "parallel-region bodies" if group == "body" else site.entry.symbol
            text = (f"regions: {what}: probes detached, past the budget ({100 * share:.1f}% of "
                    f"a thread's time, budget {100 * self.budget:g}%); its counts and times "
                    "until then are exact, later calls are not seen")
            self.notes.append((t1, text))
            self.problems.append(text.removeprefix("regions: "))

    def _budget(self, rec: np.ndarray) -> None:
        """Detach the body probes when they hit more than BODY_BUDGET times a second (not
        with ``--probe-budget 0``, which never detaches)."""
        if not self.budget or self.bodies_off_at is not None or not len(self._body_tags) or \
                not len(rec) or "body" in self.detached:
            return
        n = int(np.isin(rec["tag"], self._body_tags).sum())
        t0, hits = self._window
        if not t0:
            t0 = int(rec["t_ns"][0])
        hits += n
        t1 = int(rec["t_ns"][-1])
        if t1 - t0 >= BODY_WINDOW_NS:
            rate = hits * 1e9 / (t1 - t0)
            if rate > BODY_BUDGET:
                self.uprobes.detach("body")
                self.bodies_off_at = t1
                self.detached["body"] = (t1, 0)
                text = (f"regions: parallel-region bodies detached after {rate:,.0f} hits/s "
                        f"(budget {BODY_BUDGET:,}): counts, spans and calls stay exact, "
                        "threads' time inside comes from before this point")
                self.notes.append((t1, text))
                self.problems.append(text.removeprefix("regions: "))
                return
            t0, hits = t1, 0
        self._window = (t0, hits)
