"""bench/sched_floor.py's stripped-down builds of bpf/sched.bpf.c: each edit still applies to
the shipped source and does what its row in docs/benchmarks.md says."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import sched_floor


def bodies(src: str) -> list[str]:
    """The text of every tp_btf program, from its signature to its closing brace."""
    return re.findall(r'SEC\("tp_btf/[^"]+"\)\nint BPF_PROG\(.*?\n}\n', src, flags=re.DOTALL)


def test_variants_of_the_shipped_source() -> None:
    src = sched_floor.SOURCE.read_text()
    v = sched_floor.variants(src)
    n = src.count('SEC("tp_btf/')               # every program (8, 10 since task_rename
    assert len(bodies(src)) == n >= 8           # and sched_exit_tp joined)

    at_once = bodies(v[sched_floor.RETURN_AT_ONCE])
    assert len(at_once) == n
    assert all(re.search(r"\n\{\n    return 0;\n", b) for b in at_once)

    store = v[sched_floor.STORE]
    assert "bpf_ringbuf_reserve" not in store and "bpf_ringbuf_submit" not in store
    assert "snumap_floor SEC(\".maps\")" in store
    assert store.count("bpf_ktime_get_ns()") == src.count("bpf_ktime_get_ns()") >= 5
    # The programs themselves are untouched: only emit_at changed.
    assert bodies(store) == bodies(src)

    no_clock = v[sched_floor.STORE_NO_CLOCK]
    assert "bpf_ktime_get_ns" not in no_clock
    assert len(bodies(no_clock)) == n


def test_an_edit_that_no_longer_applies_is_an_error() -> None:
    src = sched_floor.SOURCE.read_text().replace("bpf_ringbuf_reserve(ring", "bpf_ringbuf_output(ring")
    with pytest.raises(RuntimeError, match="no longer matches"):
        sched_floor.variants(src)


@pytest.mark.skipif(shutil.which("clang") is None, reason="needs clang")
def test_variants_compile(tmp_path: Path) -> None:
    objs = sched_floor.build(tmp_path)
    assert set(objs) == {sched_floor.RETURN_AT_ONCE, sched_floor.STORE_NO_CLOCK,
                         sched_floor.STORE}
    for obj in objs.values():
        assert obj.read_bytes()[:4] == b"\x7fELF"
    # The repository is left as it was: the sources were written to tmp_path.
    assert not list((REPO / "bpf").glob("*floor*"))
