"""perf_event_open through ctypes: the attr layout byte for byte, the read formats, the ioctl
numbers, sysfs PMU event encoding, and the real syscall on this machine (software events
count; hardware events fail with a reason, never a zero)."""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import time
from pathlib import Path

import pytest
from snumap_tui.native import perf_event as pe
from snumap_tui.native import perf_pmu as pmus


def test_attr_layout_matches_the_uapi_header() -> None:
    # include/uapi/linux/perf_event.h: PERF_ATTR_SIZE_VER8 = 136
    assert ctypes.sizeof(pe.PerfEventAttr) == 136
    assert pe.PerfEventAttr.config.offset == 8
    assert pe.PerfEventAttr.read_format.offset == 32
    assert pe.PerfEventAttr.bp_type.offset == 52
    assert pe.PerfEventAttr.config1.offset == 56
    assert pe.PerfEventAttr.clockid.offset == 92
    assert pe.PerfEventAttr.sig_data.offset == 120
    assert pe.PerfEventAttr.config3.offset == 128


def test_flag_bits_land_where_the_kernel_reads_them() -> None:
    a = pe.make_attr(pe.PERF_TYPE_SOFTWARE, pe.PERF_COUNT_SW_CONTEXT_SWITCHES, disabled=True,
                     exclude_hv=True)
    a.precise_ip = 3
    a.sigtrap = 1
    flags = int.from_bytes(bytes(a)[40:48], "little")
    assert flags == (1 << 0) | (1 << 6) | (3 << 15) | (1 << 37)
    a.sample_period = 4000
    assert a.sample_freq == 4000          # a union
    assert int.from_bytes(bytes(a)[16:24], "little") == 4000


def test_syscall_number_per_architecture() -> None:
    assert pe.syscall_number("x86_64") == 298
    assert pe.syscall_number("aarch64") == 241
    assert pe.syscall_number("ppc64le") == 319
    with pytest.raises(pe.PerfOpenError):
        pe.syscall_number("vax")


def test_ioctl_numbers() -> None:
    x86 = pe.ioctl_numbers("x86_64")
    assert x86["ENABLE"] == 0x2400 and x86["RESET"] == 0x2403
    assert x86["ID"] == 0x80082407 and x86["SET_FILTER"] == 0x40082406
    ppc = pe.ioctl_numbers("ppc64le")
    assert ppc["ENABLE"] == 0x20002400 and ppc["ID"] == 0x40082407


def test_parse_group_read() -> None:
    fmt = pe.GROUP_READ_FORMAT
    buf = struct.pack("<6Q", 3, 2000, 1000, 10, 20, 30)
    assert pe.read_size(fmt, 3) == len(buf)
    values, te, tr = pe.parse_read(buf, fmt)
    assert values == [10, 20, 30] and (te, tr) == (2000, 1000)
    with_id = fmt | pe.PERF_FORMAT_ID
    buf = struct.pack("<7Q", 2, 5, 5, 10, 111, 20, 222)
    assert pe.parse_read(buf, with_id)[0] == [10, 20]
    single = pe.PERF_FORMAT_TOTAL_TIME_ENABLED | pe.PERF_FORMAT_TOTAL_TIME_RUNNING
    assert pe.parse_read(struct.pack("<3Q", 42, 9, 3), single) == ([42], 9, 3)


def test_scale_multiplexed_and_never_ran() -> None:
    assert pe.scale(100, 2000, 1000) == (200.0, True)
    assert pe.scale(100, 1000, 1000) == (100.0, False)
    assert pe.scale(0, 1000, 0) == (None, True)


def test_encode_event_from_sysfs_format() -> None:
    formats = {"event": "config:0-7\n", "umask": "config:8-15\n", "cmask": "config:24-31\n",
               "split": "config1:0-3,8-11\n"}
    assert pmus.encode_event("event=0x02\n", formats) == {"config": 0x02}
    assert pmus.encode_event("event=0x3c,umask=0x01", formats) == {"config": 0x013c}
    assert pmus.encode_event("split=0xab", formats) == {"config": 0, "config1": 0xa0b}
    with pytest.raises(ValueError):
        pmus.encode_event("bogus=1", formats)


def test_pmu_event_from_a_sysfs_tree(tmp_path: Path) -> None:
    d = tmp_path / pmus.EVENT_SOURCE / "power"
    (d / "events").mkdir(parents=True)
    (d / "format").mkdir()
    (d / "type").write_text("24\n")
    (d / "format/event").write_text("config:0-7\n")
    (d / "events/energy-pkg").write_text("event=0x02\n")
    (d / "events/energy-pkg.scale").write_text("2.3283064365386962890625e-10\n")
    (d / "events/energy-pkg.unit").write_text("Joules\n")
    (d / "cpumask").write_text("0,48\n")
    typ, cfg, sc, unit = pmus.pmu_event("power", "energy-pkg", tmp_path)  # type: ignore[misc]
    assert (typ, cfg["config"], unit) == (24, 2, "Joules")
    assert sc == pytest.approx(2 ** -32)
    assert pmus.pmu_event("power", "energy-gpu", tmp_path) is None
    assert pmus.pmu_cpumask("power", tmp_path) == [0, 48]


def test_explain_errno_gives_a_fix() -> None:
    reason, fix = pe.explain_errno(errno.EACCES, pe.PERF_TYPE_HARDWARE, paranoid=2,
                                   privileged=False)
    assert "perf_event_paranoid" in reason and "(now 2)" in reason
    assert fix and "perf_event_paranoid=0" in fix
    reason, fix = pe.explain_errno(errno.EMFILE, pe.PERF_TYPE_HARDWARE)
    assert fix and "ulimit" in fix


def test_software_events_count_on_this_machine() -> None:
    """A group of context-switches + cpu-migrations on PU 0 counts real switches."""
    if not Path("/sys/bus/event_source/devices/software").is_dir():
        pytest.skip("no perf events in this kernel")
    fmt = pe.GROUP_READ_FORMAT
    try:
        lead = pe.perf_event_open(pe.make_attr(pe.PERF_TYPE_SOFTWARE,
                                               pe.PERF_COUNT_SW_CONTEXT_SWITCHES,
                                               read_format=fmt), -1, 0)
    except pe.PerfOpenError as exc:
        pytest.skip(f"cannot open per-CPU software events here: {exc}")
    try:
        member = pe.perf_event_open(pe.make_attr(pe.PERF_TYPE_SOFTWARE,
                                                 pe.PERF_COUNT_SW_CPU_MIGRATIONS,
                                                 read_format=fmt), -1, 0, lead)
        before = pe.read_counter(lead, fmt, 2)
        pinned = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {0})
        try:
            for _ in range(50):
                time.sleep(0.001)     # each sleep is a switch out and back in on PU 0
        finally:
            os.sched_setaffinity(0, pinned)
        after = pe.read_counter(lead, fmt, 2)
        assert after[0][0] - before[0][0] >= 50
        assert after[1] is not None and after[1] > before[1]  # type: ignore[operator]
        os.close(member)
    finally:
        os.close(lead)


def test_hardware_event_fails_with_a_reason_when_there_is_no_pmu() -> None:
    if Path("/sys/bus/event_source/devices/cpu").exists():
        pytest.skip("this machine has a hardware PMU")
    with pytest.raises(pe.PerfOpenError) as info:
        pe.perf_event_open(pe.make_attr(pe.PERF_TYPE_HARDWARE, pe.PERF_COUNT_HW_CPU_CYCLES),
                           -1, 0, event="cycles")
    assert info.value.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV)
    assert "cycles" in str(info.value) and info.value.reason


def test_short_group_read_is_an_error_not_an_index_error() -> None:
    # A group read shorter than nr members (here 2 of the 4 words a 2-member group needs)
    # must fail as an OSError the sources handle, never an IndexError in parse_read.
    r, w = os.pipe()
    try:
        os.write(w, struct.pack("=2Q", 2, 123))
        with pytest.raises(OSError, match="short read"):
            pe.read_counter(r, pe.GROUP_READ_FORMAT, 2)
    finally:
        os.close(r)
        os.close(w)
