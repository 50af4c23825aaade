"""An unprivileged user cannot even look into tracefs: the tracers must say so, not crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from snumap_tui.trace import tracefs


def _deny(monkeypatch: pytest.MonkeyPatch, denied: Path) -> None:
    real = Path.is_dir

    def is_dir(self: Path) -> bool:
        if str(self).startswith(str(denied)):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "is_dir", is_dir)


def test_root_only_tracefs_is_absent_not_an_exception(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    denied = tmp_path / "tracing"
    (denied / "events").mkdir(parents=True)
    _deny(monkeypatch, denied)
    assert tracefs.tracefs_root((denied,)) is None
    st = tracefs.tracefs_missing("trace:perf", (denied,))
    assert not st.available
    assert "root-only" in (st.reason or "") and str(denied) in (st.reason or "")


def test_unmounted_tracefs_is_reported_as_such(tmp_path: Path) -> None:
    st = tracefs.tracefs_missing("trace:bcc", (tmp_path / "nothing",))
    assert not st.available and st.reason == "tracefs is not mounted"
    assert tracefs.tracefs_root((tmp_path / "nothing",)) is None


def test_a_readable_tracefs_is_found(tmp_path: Path) -> None:
    (tmp_path / "events").mkdir()
    assert tracefs.tracefs_root((tmp_path / "missing", tmp_path)) == tmp_path
