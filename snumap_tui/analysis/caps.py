"""The bound on distinct keys an analysis of a recording lays out (issue 30): a valid thread
counters or process memory chunk may still name 200,000 tids, pids or PU numbers. The report's
counter tables and PUs, the memory timelines and the Perfetto counter tracks each keep the
first ``MAX_ROWS`` keys by ``ranked`` (the heaviest: on-CPU time, rows, memory) and count the
rest; one cap and one ranking for all of them."""

from __future__ import annotations

import numpy as np

MAX_ROWS = 4096


def ranked(keys: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Indexes of KEYS by WEIGHT, heaviest first (among equals the smaller key first): one
    sort; the first ``MAX_ROWS`` are those kept."""
    return np.lexsort((keys, -np.asarray(weight, dtype=np.float64)))
