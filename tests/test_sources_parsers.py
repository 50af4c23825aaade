"""Every parser fed verbatim kernel text (copied from a running kernel's files)."""

from __future__ import annotations

import numpy as np
import pytest

from snumap_tui.sources._io import count_of, parse_cpulist, parse_cpumask
from snumap_tui.sources.jobprocs import rank_of
from snumap_tui.sources.jobs import detect_job, main_cgroup, parse_cgroup
from snumap_tui.sources.numa import (
    parse_distance,
    parse_hugepagesize,
    parse_node_meminfo,
    parse_numastat,
)
from snumap_tui.sources.procmem import parse_statm_resident, parse_vmhwm
from snumap_tui.sources.procstat import busy_fraction, parse_proc_stat
from snumap_tui.sources.rapl import domain_of
from snumap_tui.sources.tasks import parse_numa_maps, parse_stat, parse_status

PROC_STAT = """\
cpu  2935 0 1661 33551 251 0 39 7 0 0
cpu0 664 0 526 18006 10 0 6 1 0 0
cpu1 2270 0 1135 15545 241 0 32 6 0 0
intr 147145 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
ctxt 290450
btime 1795255752
processes 6410
procs_running 2
procs_blocked 0
softirq 94564 0 7461 4 3196 47685 0 2 15162 0 21054
"""

# A 2.6.2x kernel (9 columns) with PU 1 offline: its line is absent.
PROC_STAT_OLD = """\
cpu  640 0 1765 1187508 4024 0 37 0 0
cpu0 335 0 857 15205 2233 0 32 0 0
cpu2 0 0 2 18906 2 0 0 0 0
intr 1 2
ctxt 12345
"""

NODE_MEMINFO = """\
Node 0 MemTotal:        4679884 kB
Node 0 MemFree:         3849660 kB
Node 0 MemUsed:          830224 kB
Node 0 FilePages:        536784 kB
Node 0 AnonPages:         86964 kB
Node 0 Shmem:              8872 kB
Node 0 HugePages_Total:     0
Node 0 HugePages_Free:      0
Node 0 HugePages_Surp:      0
"""

NUMASTAT = """\
numa_hit 1538612
numa_miss 0
numa_foreign 0
interleave_hit 1118
local_node 1538612
other_node 0
"""

TASK_STAT = ("6611 (cat) R 6608 6608 3179 0 -1 4194304 97 0 0 0 12 3 0 0 20 0 1 0 19464 "
             "3133440 359 18446744073709551615 94746943426560 94746943446441 140727900530064 "
             "0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 94746943462448 94746943464064 94747654836224 "
             "140727900535521 140727900535541 140727900535541 140727900536811 0\n")

STATUS = """\
Name:	cat
Umask:	0022
State:	R (running)
Tgid:	6612
Ngid:	0
Pid:	6612
PPid:	6608
Uid:	1000	1000	1000	1000
Threads:	1
Cpus_allowed:	3
Cpus_allowed_list:	0-1
Mems_allowed_list:	0
"""

NUMA_MAPS = """\
55b388abd000 default file=/usr/bin/head mapped=2 N0=2 kernelpagesize_kB=4
55b388ac8000 default file=/usr/bin/head anon=1 dirty=1 active=0 N0=1 kernelpagesize_kB=4
7f2000000000 interleave:0-1 anon=1024 dirty=1024 N0=512 N1=512 kernelpagesize_kB=4
7f4000000000 bind:1 anon=2 dirty=2 N1=2 kernelpagesize_kB=2048
7ffd1e3c8000 default stack anon=3 dirty=3 active=1 N0=3 kernelpagesize_kB=4
"""


def test_proc_stat() -> None:
    r = parse_proc_stat(PROC_STAT)
    assert r["cpus"].tolist() == [0, 1]
    assert r["ticks"].dtype == np.uint64 and r["ticks"].shape == (2, 10)
    assert r["ticks"][1].tolist() == [2270, 0, 1135, 15545, 241, 0, 32, 6, 0, 0]
    assert r["columns"] == 10
    assert (r["ctxt"], r["procs_running"], r["procs_blocked"]) == (290450, 2, 0)


def test_proc_stat_old_kernel_and_offline_pu() -> None:
    r = parse_proc_stat(PROC_STAT_OLD)
    assert r["cpus"].tolist() == [0, 2]          # PU 1 offline: absent, not zero
    assert r["columns"] == 9
    assert r["ticks"][0, :9].tolist() == [335, 0, 857, 15205, 2233, 0, 32, 0, 0]


def test_busy_fraction_across_hotplug() -> None:
    a = parse_proc_stat(PROC_STAT)
    b = parse_proc_stat(PROC_STAT.replace("cpu1 2270 0 1135 15545", "cpu1 2370 0 1135 15545")
                        .replace("cpu0 664 0 526 18006", "cpu0 664 0 526 18106"))
    f = busy_fraction(a, b)
    assert f == {0: 0.0, 1: 1.0}
    # PU 1 went offline: left out, not reported idle or busy
    assert 1 not in busy_fraction(a, parse_proc_stat(PROC_STAT_OLD))


def test_node_meminfo_and_numastat() -> None:
    mi = parse_node_meminfo(NODE_MEMINFO)
    assert mi["MemTotal"] == 4679884 * 1024
    assert mi["HugePages_Total"] == 0          # a count, not kB
    ns = parse_numastat(NUMASTAT)
    assert ns["numa_hit"] == 1538612 and ns["interleave_hit"] == 1118
    assert parse_distance("10 16 16 22\n") == [10, 16, 16, 22]
    assert parse_hugepagesize("MemTotal: 1 kB\nHugepagesize:       2048 kB\n") == 2048 * 1024


@pytest.mark.parametrize("bad", ["\u00b2", "\ufffd\ufffd", "-5", "1e999", "nan", "9" * 30, "", "0x10"])
def test_numa_numbers_that_are_not_counts(bad: str) -> None:
    """A crafted --fsroot (CI's fuzz found '\ufffd\ufffd' in Hugepagesize, a traceback): a
    field that is not a kernel count is unknown, never a traceback and never negative.
    '\u00b2' passes str.isdigit, which int() refuses."""
    assert count_of(bad) is None
    assert parse_hugepagesize(f"Hugepagesize: {bad} kB\n") is None
    assert parse_distance(f"10 {bad} 20") == (None if bad else [10, 20])
    ns = parse_numastat(f"numa_hit {bad}\nnuma_miss 7\n")
    assert ns == {"numa_miss": 7}
    assert rank_of({"PMI_RANK": bad, "SLURM_PROCID": "3"}) == (3, "SLURM_PROCID")
    with pytest.raises(ValueError):
        parse_statm_resident(f"12 {bad}")
    assert parse_vmhwm(f"VmHWM: {bad} kB\n") is None


def test_stat_with_hostile_comm() -> None:
    t = parse_stat(TASK_STAT)
    assert (t["tid"], t["comm"], t["state"], t["ppid"]) == (6611, "cat", "R", 6608)
    assert (t["utime"], t["stime"], t["last_cpu"]) == (12, 3, 1)
    evil = TASK_STAT.replace("(cat)", "(a) b (c) R 1)")
    t = parse_stat(evil)
    assert t["comm"] == "a) b (c) R 1" and t["last_cpu"] == 1 and t["utime"] == 12


def test_status() -> None:
    s = parse_status(STATUS)
    assert s == {"uid": 1000, "affinity": [0, 1], "tgid": 6612, "ppid": 6608, "threads": 1}


def test_numa_maps_counts_base_pages() -> None:
    # the 2 MiB huge page mapping counts as 2 * 512 base pages on node 1
    assert parse_numa_maps(NUMA_MAPS) == {0: 2 + 1 + 512 + 3, 1: 512 + 2 * 512}


def test_cpulist_and_cpumask() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("\n") == []
    assert parse_cpumask("00000000,000000ff\n") == list(range(8))
    assert parse_cpumask("00000001,00000000") == [32]


def test_jobs_from_cgroup_paths() -> None:
    cases = {
        "0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0": "slurm:1234",
        "4:cpuset:/slurm/uid_1000/job_77/step_batch\n0::/": "slurm:77",
        "0::/pbs_jobs.service/jobid/5678.server": "pbs:5678.server",
        "3:cpuset:/pbspro/91.head\n0::/": "pbs:91.head",
        "0::/system.slice/ssh.service": "systemd:ssh.service",
        "0::/user.slice/user-1000.slice/session-3.scope": "systemd:session-3.scope",
        "0::/": None,
    }
    for text, job in cases.items():
        assert detect_job(parse_cgroup(text)) == job, text
    assert main_cgroup(parse_cgroup("4:memory:/batch/x\n0::/")) == "/batch/x"


def test_rapl_domain_mapping() -> None:
    assert domain_of("package-1", None) == ("package-1", ("Package", 1))
    assert domain_of("dram", "package-1") == ("dram-1", ("Package", 1))
    assert domain_of("core", "package-0") == ("core-0", ("Package", 0))
    assert domain_of("uncore", "package-0") == ("uncore-0", ("Package", 0))
    assert domain_of("psys", None) == ("psys", ("Machine", 0))
    assert domain_of("package-0-die-1", None) == ("package-0-die-1", ("Package", 0))
    assert domain_of("dram", "package-0-die-1") == ("dram-0-die-1", ("Package", 0))


# /proc/cpuinfo excerpts, verbatim formats (x86, ARMv7 before 3.8, Raspberry Pi arm64, MIPS)
CPUINFO_X86 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7763 64-Core Processor
stepping\t: 1
"""
CPUINFO_ARMV7 = """Processor\t: ARMv7 Processor rev 10 (v7l)
processor\t: 0
BogoMIPS\t: 1581.05
"""
CPUINFO_RPI = """processor\t: 0
BogoMIPS\t: 108.00
CPU implementer\t: 0x41
CPU part\t: 0xd08

Revision\t: c03111
Model\t\t: Raspberry Pi 4 Model B Rev 1.1
"""
CPUINFO_MIPS = """system type\t\t: MediaTek MT7621 ver:1 eco:3
processor\t\t: 0
cpu model\t\t: MIPS 1004Kc V2.15
"""


def test_cpu_model_per_architecture(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from snumap_tui.sources.cpuinfo import cpu_model, parse_cpu_model

    assert parse_cpu_model(CPUINFO_X86) == "AMD EPYC 7763 64-Core Processor"   # not "1"
    assert parse_cpu_model(CPUINFO_ARMV7) == "ARMv7 Processor rev 10 (v7l)"
    assert parse_cpu_model(CPUINFO_RPI) == "Raspberry Pi 4 Model B Rev 1.1"     # over 0xd08
    assert parse_cpu_model(CPUINFO_MIPS) == "MIPS 1004Kc V2.15"
    assert parse_cpu_model("processor\t: 0\n") is None
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(CPUINFO_X86.replace("7763 64", "7763  64"))
    assert cpu_model(tmp_path) == "AMD EPYC 7763 64-Core Processor"
    assert cpu_model(tmp_path / "nowhere") is None


def test_a_stat_field_past_int64_is_an_unreadable_line() -> None:
    """A crafted --fsroot tree's stat number too large for the int64 columns is a bad line
    (the thread is skipped), not an OverflowError when the columns are built (issue 30)."""
    from snumap_tui.sources.tasks import parse_stat

    line = ("12 (a b) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 "
            "27 28 29 30 31 32 33 34 35 36 37 38")
    assert parse_stat(line)["utime"] == 11
    with pytest.raises(ValueError):
        parse_stat(line.replace(" 11 ", " 99999999999999999999 "))
