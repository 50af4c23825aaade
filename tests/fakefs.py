"""A fake /sys + /proc tree, written in the kernel's own text formats, whose counters advance.

Why: this development machine (and CI) is a 2-vCPU VM without a hardware PMU, RAPL, cpufreq or
more than one NUMA node. The code paths for those are exercised on trees like this one, the
way ``below`` tests its procfs readers. The same tree serves benchmarks (128..1024 PUs) and
snapshot tests of the views, so the API is small:

    fake = FakeRoot(tmp_path, cpus=384, nodes=8, packages=2)
    src = ProcStatSource(fake.root)          # any source constructed on fake.root
    fake.advance(seconds=1.0, busy={1: 1.0}) # PU 1 fully busy, the rest at ``idle_busy``
    fake.set_online(5, False)                # hotplug: PU 5 leaves /proc/stat
    fake.set_energy("intel-rapl:0", fake.rapl_max_uj - 10)  # the next advance wraps
    fake.deny("sys/class/powercap/intel-rapl:0/energy_uj")  # root-only energy_uj
    src = RaplSource(fake.root, reader=fake.reader)         # the reader honours deny()

Costs: every file is a real file (about 10 per PU with ``cpu_dirs``, 6 more per PU with
``caches``, which only hwloc's --fsroot needs). For sweeps of large machines where only
/proc/stat, NUMA and RAPL matter, ``cpu_dirs=False`` skips the per-PU sysfs directories.

Layout of the fake machine (like Linux numbers an Intel server): ``cpus`` PUs, ``smt`` threads
per core, cores spread evenly over ``packages`` and, inside a package, over its NUMA nodes.
PU ``i`` is thread ``i // ncores`` of core ``i % ncores``, so SMT siblings have non-contiguous
OS indexes (PU 0 and PU ncores share a core).

Denied reads: the tests run as root, and a chmod 000 does not stop root from reading. So
``deny(path)`` both chmods the file (a real denial for an unprivileged reader) and records it;
``fake.reader`` (the ``reader=`` hook every source takes) raises ``PermissionError`` (EACCES)
for recorded paths, exactly what ``open()`` raises for a normal user on kernels >= 5.10 for
``energy_uj`` (CVE-2020-8694).

Formats follow: Documentation/filesystems/proc.rst (/proc/stat, /proc/PID/stat, status,
numa_maps), Documentation/admin-guide/cputopology.rst, Documentation/ABI/testing/
sysfs-devices-system-cpu and sysfs-devices-node (node meminfo, numastat, distance),
Documentation/power/powercap/powercap.rst, and perf_event_open(2) / sysfs-bus-event_source-
devices-events for the ``power`` PMU.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

HZ = 100  # USER_HZ: /proc/stat and /proc/PID/stat count in these ticks
PAGE_KB = 4

# RAPL energy counters are 32-bit in units of ~15.3 uJ on Intel; the kernel exposes the range.
RAPL_MAX_UJ = 262143328850
# The perf `power` PMU reports energy in units of 2^-32 J (the .scale file of each event).
POWER_SCALE = "2.3283064365386962890625e-10"


def cpulist(cpus: Iterable[int]) -> str:
    """Format a set of OS indexes as the kernel's cpulist ("0-3,8,10-11")."""
    xs = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(parts)


def cpumask(cpus: Iterable[int], nbits: int) -> str:
    """Format a set as the kernel's cpumask: comma-separated 32-bit hex words, high word first."""
    value = 0
    for c in cpus:
        value |= 1 << c
    words = max(1, (nbits + 31) // 32)
    return ",".join(f"{(value >> (32 * w)) & 0xFFFFFFFF:08x}" for w in reversed(range(words)))


@dataclass
class FakeThread:
    tid: int
    comm: str
    last_cpu: int
    state: str = "S"
    utime: int = 0
    stime: int = 0
    share: float | None = None   # its share of its PU; None: all that PU is busy


@dataclass
class FakeProcess:
    pid: int
    comm: str
    cmdline: list[str]
    uid: int
    cgroup: str                      # the cgroup v2 path ("0::<path>")
    affinity: list[int]
    threads: list[FakeThread] = field(default_factory=list)
    ppid: int = 1
    # node -> pages, written into numa_maps
    numa_pages: dict[int, int] = field(default_factory=dict)


class FakeRoot:
    """A fake machine on disk under ``base``; ``root`` is what sources are constructed on."""

    def __init__(self, base: Path, cpus: int = 4, nodes: int = 1, packages: int = 1,
                 smt: int | None = None, *, offline: Iterable[int] = (), rapl: bool = True,
                 rapl_dram: bool = True, rapl_psys: bool = False, power_pmu: bool = True,
                 cpufreq: bool = True, hypervisor: bool = False, caches: bool = False,
                 cpu_dirs: bool = True,
                 processes: bool = True, mem_per_node_kb: int = 16 * 1024 * 1024,
                 idle_busy: float = 0.02) -> None:
        if smt is None:
            smt = 2 if cpus % 2 == 0 and cpus >= 2 else 1
        ncores = cpus // smt
        if cpus % smt or ncores % packages or ncores % nodes or nodes % packages and \
                packages % nodes:
            raise ValueError(f"cannot lay out {cpus} PUs, smt={smt} over {packages} packages "
                             f"and {nodes} nodes")
        self.root = Path(base)
        self.ncpus = cpus
        self.nnodes = nodes
        self.npackages = packages
        self.smt = smt
        self.ncores = ncores
        self.hypervisor = hypervisor
        self.cpufreq = cpufreq
        self.caches = caches
        self.cpu_dirs = cpu_dirs
        self.idle_busy = idle_busy
        self.mem_per_node_kb = mem_per_node_kb
        self.rapl_max_uj = RAPL_MAX_UJ
        self.denied: set[Path] = set()
        self._dirs: set[Path] = set()
        self.online = [c not in set(offline) for c in range(cpus)]
        # Cumulative state.
        self.ticks = [[0] * 10 for _ in range(cpus)]
        for t in self.ticks:
            t[3] = 1000  # some idle time since boot
        self.ctxt = 1000
        self.cur_khz = [2_400_000] * cpus
        self.numastat = [{"numa_hit": 100_000 * (n + 1), "numa_miss": 0, "numa_foreign": 0,
                          "interleave_hit": 500, "local_node": 100_000 * (n + 1),
                          "other_node": 0} for n in range(nodes)]
        self.mem_free_kb = [mem_per_node_kb * 3 // 4] * nodes
        # RAPL zones: name -> (sysfs zone id, human name, watts when busy, watts idle)
        self.rapl_zones: dict[str, dict[str, object]] = {}
        if rapl:
            for p in range(packages):
                self._zone(f"intel-rapl:{p}", f"package-{p}", 120.0, 40.0)
                self._zone(f"intel-rapl:{p}:0", "core", 90.0, 10.0)
                if rapl_dram:
                    self._zone(f"intel-rapl:{p}:1", "dram", 20.0, 6.0)
            if rapl_psys:
                self._zone(f"intel-rapl:{packages}", "psys", 200.0, 60.0)
        self.power_pmu = power_pmu and rapl
        self.processes: list[FakeProcess] = self._default_processes() if processes else []
        self._write_all()

    # ---- layout ------------------------------------------------------------------------
    def core_of(self, cpu: int) -> int:
        return cpu % self.ncores

    def package_of(self, cpu: int) -> int:
        return self.core_of(cpu) // (self.ncores // self.npackages)

    def node_of(self, cpu: int) -> int:
        return self.core_of(cpu) // (self.ncores // self.nnodes)

    def siblings(self, cpu: int) -> list[int]:
        core = self.core_of(cpu)
        return [core + t * self.ncores for t in range(self.smt)]

    def cpus_of_node(self, node: int) -> list[int]:
        return [c for c in range(self.ncpus) if self.node_of(c) == node]

    def cpus_of_package(self, pkg: int) -> list[int]:
        return [c for c in range(self.ncpus) if self.package_of(c) == pkg]

    def distance(self, a: int, b: int) -> int:
        """SLIT distances: 10 local, 16 same package, 32 across packages."""
        if a == b:
            return 10
        pa = a * self.npackages // self.nnodes
        pb = b * self.npackages // self.nnodes
        return 16 if pa == pb else 32

    # ---- mutation ----------------------------------------------------------------------
    def advance(self, seconds: float = 1.0, busy: dict[int, float] | None = None,
                watts: dict[str, float] | None = None) -> None:
        """Let ``seconds`` pass: PUs in ``busy`` run at that fraction (0..1), the others at
        ``idle_busy``; counters advance and every file is rewritten. ``watts`` overrides the
        power of a RAPL zone (by sysfs id, e.g. "intel-rapl:0")."""
        busy = busy or {}
        total = round(seconds * HZ)
        for c in range(self.ncpus):
            if not self.online[c]:
                continue
            frac = min(1.0, max(0.0, busy.get(c, self.idle_busy)))
            used = round(total * frac)
            user = round(used * 0.9)
            t = self.ticks[c]
            t[0] += user
            t[2] += used - user
            t[3] += total - used
            self.cur_khz[c] = 3_000_000 if frac > 0.5 else 1_200_000
        self.ctxt += int(seconds * 500 * self.ncpus)
        for n, ns in enumerate(self.numastat):
            ns["numa_hit"] += int(seconds * 10_000)
            ns["local_node"] += int(seconds * 10_000)
            ns["numa_miss"] += int(seconds * 100 * n)
            ns["other_node"] += int(seconds * 100 * n)
        busy_pkgs = {self.package_of(c) for c, f in busy.items() if f > 0.5}
        for zid, z in self.rapl_zones.items():
            pkg = z["package"]
            w = (watts or {}).get(zid)
            if w is None:
                w = z["busy_w"] if pkg in busy_pkgs or pkg is None and busy_pkgs else z["idle_w"]
            inc = int(float(w) * seconds * 1e6)  # type: ignore[arg-type]
            z["true_uj"] = int(z["true_uj"]) + inc  # type: ignore[call-overload]
            z["energy_uj"] = (int(z["energy_uj"]) + inc) % (self.rapl_max_uj + 1)  # type: ignore[call-overload]
        for p in self.processes:
            for th in p.threads:
                frac = busy.get(th.last_cpu, 0.0) if th.share is None else th.share
                th.utime += round(total * frac * 0.9)
                th.stime += round(total * frac * 0.1)
                th.state = "R" if frac > 0.5 else "S"
        self._write_all()

    def set_online(self, cpu: int, online: bool) -> None:
        """CPU hotplug: an offline PU disappears from /proc/stat and loses its topology dir."""
        if cpu == 0 and not online:
            raise ValueError("cpu0 cannot go offline on x86 (it has no online file)")
        self.online[cpu] = online
        self._write_all()

    def set_energy(self, zone: str, uj: int) -> None:
        """Put a RAPL counter at ``uj`` (e.g. just below max_energy_range_uj, to wrap next)."""
        self.rapl_zones[zone]["energy_uj"] = uj
        self._write_all()

    def deny(self, relpath: str) -> None:
        """Make a file unreadable: chmod 000 and have ``reader`` raise EACCES on it."""
        p = self.root / relpath
        os.chmod(p, 0)
        self.denied.add(p.resolve())

    def reader(self, path: Path) -> str:
        """Read a file as an unprivileged user would: EACCES on denied paths."""
        if Path(path).resolve() in self.denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return Path(path).read_text()

    def energy_uj(self, zone: str) -> int:
        return int(self.rapl_zones[zone]["energy_uj"])  # type: ignore[call-overload]

    def true_energy_uj(self, zone: str) -> int:
        """The energy consumed since start, without wraparound."""
        return int(self.rapl_zones[zone]["true_uj"])  # type: ignore[call-overload]

    # ---- construction ------------------------------------------------------------------
    def _zone(self, zid: str, name: str, busy_w: float, idle_w: float) -> None:
        pkg: int | None = int(zid.split(":")[1]) if name != "psys" else None
        self.rapl_zones[zid] = {"name": name, "package": pkg, "busy_w": busy_w,
                                "idle_w": idle_w, "energy_uj": 1_000_000 * (len(self.rapl_zones) + 1),
                                "true_uj": 0}

    def _default_processes(self) -> list[FakeProcess]:
        n = self.ncpus
        allcpus = list(range(n))
        half = allcpus[: max(1, n // 2)]
        procs = [
            FakeProcess(1, "systemd", ["/sbin/init"], 0, "/init.scope", allcpus,
                        [FakeThread(1, "systemd", 0)]),
            FakeProcess(4200, "lmp_mpi", ["lmp_mpi", "-in", "in.lj"], 1000,
                        "/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0", half,
                        [FakeThread(4200 + i, "lmp_mpi", half[i % len(half)])
                         for i in range(min(4, len(half)))],
                        numa_pages={0: 5000}),
            FakeProcess(4300, "(weird) name", ["./a.out", "x y"], 1001,
                        "/pbs_jobs.slice/pbs-5678.server.scope", [n - 1],
                        [FakeThread(4300, "(weird) name", n - 1)],
                        numa_pages={self.nnodes - 1: 300}),
            FakeProcess(880, "sshd", ["sshd: /usr/sbin/sshd -D"], 0,
                        "/system.slice/ssh.service", allcpus, [FakeThread(880, "sshd", 0)]),
        ]
        return procs

    def _w(self, rel: str, text: str) -> None:
        p = self.root / rel
        parent = p.parent
        if parent not in self._dirs:
            parent.mkdir(parents=True, exist_ok=True)
            self._dirs.add(parent)
        if self.denied and p.resolve() in self.denied:
            os.chmod(p, 0o600)
            p.write_text(text)
            os.chmod(p, 0)
        elif p.is_file():
            # Rewritten in place, never truncated first: a reader on another thread (a
            # sampler while a test advances the counters) must not find /proc/stat empty,
            # and sources that keep a file open and pread it keep the same inode.
            data = text.encode()
            fd = os.open(p, os.O_WRONLY)
            try:
                os.write(fd, data)
                os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
        else:
            p.write_text(text)

    def _write_all(self) -> None:
        self._write_proc()
        self._write_cpus()
        self._write_nodes()
        self._write_powercap()
        self._write_pmus()
        self._write_tasks()

    def _write_proc(self) -> None:
        # Documentation/filesystems/proc.rst, "1.8 Miscellaneous kernel statistics in /proc/stat"
        online = [c for c in range(self.ncpus) if self.online[c]]
        agg = [sum(self.ticks[c][i] for c in online) for i in range(10)]
        lines = ["cpu  " + " ".join(map(str, agg))]
        lines += [f"cpu{c} " + " ".join(map(str, self.ticks[c])) for c in online]
        lines.append("intr 123456 " + " ".join(["0"] * 16))
        lines.append(f"ctxt {self.ctxt}")
        lines.append("btime 1700000000")
        lines.append("processes 65432")
        running = sum(1 for c in online if self.cur_khz[c] > 2_500_000) + 1
        lines.append(f"procs_running {running}")
        lines.append("procs_blocked 0")
        lines.append("softirq 9999 0 10 0 20 30 0 40 50 0 60")
        self._w("proc/stat", "\n".join(lines) + "\n")
        total = self.mem_per_node_kb * self.nnodes
        free = sum(self.mem_free_kb)
        self._w("proc/meminfo", "".join(f"{k + ':':<16}{v:>8} kB\n" for k, v in [
            ("MemTotal", total), ("MemFree", free), ("MemAvailable", free + total // 10),
            ("Buffers", 1024), ("Cached", total // 10), ("SwapCached", 0),
            ("AnonPages", total // 20), ("Shmem", 2048),
            ("HugePages_Total", 16 * self.nnodes), ("Hugepagesize", 2048)]))
        flags = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 " \
                "clflush mmx fxsr sse sse2 ht syscall nx lm constant_tsc rep_good nopl " \
                "xtopology nonstop_tsc cpuid pni ssse3 sse4_1 sse4_2 x2apic popcnt aes " \
                "avx avx2" + (" hypervisor" if self.hypervisor else "") + " arat"
        blocks = []
        for c in online:
            blocks.append(
                f"processor\t: {c}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
                f"model name\t: Fake(R) Xeon(R) CPU @ 2.40GHz\nstepping\t: 8\n"
                f"cpu MHz\t\t: {self.cur_khz[c] / 1000:.3f}\ncache size\t: 107520 KB\n"
                f"physical id\t: {self.package_of(c)}\n"
                f"siblings\t: {self.ncpus // self.npackages}\n"
                f"core id\t\t: {self.core_of(c) % (self.ncores // self.npackages)}\n"
                f"cpu cores\t: {self.ncores // self.npackages}\napicid\t\t: {c}\n"
                f"fpu\t\t: yes\nflags\t\t: {flags}\nbogomips\t: 4800.00\n"
                f"clflush size\t: 64\ncache_alignment\t: 64\n"
                f"address sizes\t: 46 bits physical, 57 bits virtual\npower management:\n")
        self._w("proc/cpuinfo", "\n".join(blocks) + "\n")
        self._w("proc/sys/kernel/perf_event_paranoid", "2\n")

    def _write_cpus(self) -> None:
        # Documentation/admin-guide/cputopology.rst and ABI/testing/sysfs-devices-system-cpu
        base = "sys/devices/system/cpu"
        n = self.ncpus
        online = [c for c in range(n) if self.online[c]]
        self._w(f"{base}/online", cpulist(online) + "\n")
        self._w(f"{base}/possible", cpulist(range(n)) + "\n")
        self._w(f"{base}/present", cpulist(range(n)) + "\n")
        offline = [c for c in range(n) if not self.online[c]]
        self._w(f"{base}/offline", (cpulist(offline) if offline else "") + "\n")
        if not self.cpu_dirs:
            return
        for c in range(n):
            d = f"{base}/cpu{c}"
            if c != 0:
                self._w(f"{d}/online", "1\n" if self.online[c] else "0\n")
            topo = self.root / d / "topology"
            if not self.online[c]:
                # The kernel removes topology/ and cpufreq/ of an offline CPU.
                for sub in ("topology", "cpufreq"):
                    sd = self.root / d / sub
                    if sd.is_dir():
                        for f in sd.iterdir():
                            f.unlink()
                        sd.rmdir()
                        self._dirs.discard(sd)
                continue
            if not topo.is_dir():
                sib = self.siblings(c)
                pkg = self.cpus_of_package(self.package_of(c))
                for name, val in (
                    ("physical_package_id", str(self.package_of(c))),
                    ("die_id", "0"),
                    ("core_id", str(self.core_of(c) % (self.ncores // self.npackages))),
                    ("thread_siblings_list", cpulist(sib)),
                    ("thread_siblings", cpumask(sib, n)),
                    ("core_siblings_list", cpulist(pkg)),
                    ("core_siblings", cpumask(pkg, n)),
                ):
                    self._w(f"{d}/topology/{name}", val + "\n")
            if self.cpufreq:
                # Documentation/admin-guide/pm/cpufreq.rst: values in kHz
                if not (self.root / d / "cpufreq").is_dir():
                    self._w(f"{d}/cpufreq/cpuinfo_max_freq", "3500000\n")
                    self._w(f"{d}/cpufreq/cpuinfo_min_freq", "800000\n")
                    self._w(f"{d}/cpufreq/scaling_max_freq", "3500000\n")
                self._w(f"{d}/cpufreq/scaling_cur_freq", f"{self.cur_khz[c]}\n")
            if self.caches and not (self.root / d / "cache/index3").exists():
                node_cpus = self.cpus_of_node(self.node_of(c))
                for idx, (level, typ, size, shared) in enumerate((
                        (1, "Data", "48K", self.siblings(c)),
                        (1, "Instruction", "32K", self.siblings(c)),
                        (2, "Unified", "2048K", self.siblings(c)),
                        (3, "Unified", "107520K", node_cpus))):
                    cd = f"{d}/cache/index{idx}"
                    for name, val in (("level", str(level)), ("type", typ), ("size", size),
                                      ("coherency_line_size", "64"),
                                      ("shared_cpu_map", cpumask(shared, n))):
                        self._w(f"{cd}/{name}", val + "\n")

    def _write_nodes(self) -> None:
        # Documentation/ABI/stable/sysfs-devices-node; admin-guide/numastat.rst
        base = "sys/devices/system/node"
        self._w(f"{base}/online", cpulist(range(self.nnodes)) + "\n")
        self._w(f"{base}/possible", cpulist(range(self.nnodes)) + "\n")
        self._w(f"{base}/has_cpu", cpulist(range(self.nnodes)) + "\n")
        self._w(f"{base}/has_memory", cpulist(range(self.nnodes)) + "\n")
        for nd in range(self.nnodes):
            d = f"{base}/node{nd}"
            cpus = self.cpus_of_node(nd)
            self._w(f"{d}/cpulist", cpulist(cpus) + "\n")
            self._w(f"{d}/cpumap", cpumask(cpus, self.ncpus) + "\n")
            self._w(f"{d}/distance",
                    " ".join(str(self.distance(nd, o)) for o in range(self.nnodes)) + "\n")
            total = self.mem_per_node_kb
            free = self.mem_free_kb[nd]
            used = total - free
            rows = [("MemTotal", total), ("MemFree", free), ("MemUsed", used),
                    ("SwapCached", 0), ("Active", used // 2), ("Inactive", used // 4),
                    ("Dirty", 12), ("Writeback", 0), ("FilePages", used // 3),
                    ("Mapped", used // 10), ("AnonPages", used // 2), ("Shmem", 2048),
                    ("KernelStack", 1640), ("PageTables", 2484), ("Slab", 131768),
                    ("SReclaimable", 106512), ("SUnreclaim", 25256), ("AnonHugePages", 0)]
            text = "".join(f"Node {nd} {k + ':':<15} {v:>8} kB\n" for k, v in rows)
            text += "".join(f"Node {nd} {k + ':':<15} {v:>5}\n" for k, v in (
                ("HugePages_Total", 16), ("HugePages_Free", 8), ("HugePages_Surp", 0)))
            self._w(f"{d}/meminfo", text)
            self._w(f"{d}/numastat",
                    "".join(f"{k} {v}\n" for k, v in self.numastat[nd].items()))
            self._w(f"{d}/hugepages/hugepages-2048kB/nr_hugepages", "16\n")

    def _write_powercap(self) -> None:
        # Documentation/power/powercap/powercap.rst: zones live under
        # /sys/devices/virtual/powercap/intel-rapl/, linked from /sys/class/powercap/.
        if not self.rapl_zones:
            return
        dev = "sys/devices/virtual/powercap/intel-rapl"
        self._w(f"{dev}/enabled", "1\n")
        cls = self.root / "sys/class/powercap"
        cls.mkdir(parents=True, exist_ok=True)
        if not (cls / "intel-rapl").exists():
            (cls / "intel-rapl").symlink_to(Path("../../devices/virtual/powercap/intel-rapl"))
        for zid, z in self.rapl_zones.items():
            parts = zid.split(":")
            rel = f"{dev}/intel-rapl:{parts[1]}"
            if len(parts) == 3:
                rel += f"/{zid}"
            self._w(f"{rel}/name", f"{z['name']}\n")
            self._w(f"{rel}/enabled", "1\n")
            self._w(f"{rel}/energy_uj", f"{z['energy_uj']}\n")
            self._w(f"{rel}/max_energy_range_uj", f"{self.rapl_max_uj}\n")
            link = cls / zid
            if not link.is_symlink():
                link.symlink_to(Path("../../" + rel[len("sys/"):]))

    def _write_pmus(self) -> None:
        # Documentation/ABI/testing/sysfs-bus-event_source-devices-events
        base = "sys/bus/event_source/devices"
        for name, typ in (("software", 1), ("tracepoint", 2), ("breakpoint", 5)):
            self._w(f"{base}/{name}/type", f"{typ}\n")
        if self.power_pmu:
            d = f"{base}/power"
            self._w(f"{d}/type", "24\n")
            self._w(f"{d}/format/event", "config:0-7\n")
            first = [self.cpus_of_package(p)[0] for p in range(self.npackages)]
            self._w(f"{d}/cpumask", cpulist(first) + "\n")
            events = {"energy-pkg": "0x02", "energy-cores": "0x01"}
            if any(z["name"] == "dram" for z in self.rapl_zones.values()):
                events["energy-ram"] = "0x03"
            if any(z["name"] == "psys" for z in self.rapl_zones.values()):
                events["energy-psys"] = "0x05"
            for ev, code in events.items():
                self._w(f"{d}/events/{ev}", f"event={code}\n")
                self._w(f"{d}/events/{ev}.scale", POWER_SCALE + "\n")
                self._w(f"{d}/events/{ev}.unit", "Joules\n")

    def _write_tasks(self) -> None:
        # Documentation/filesystems/proc.rst, Table 1-4 (stat) and 1-2 (status); numa(7)
        for p in self.processes:
            d = f"proc/{p.pid}"
            self._w(f"{d}/cmdline", "\0".join(p.cmdline) + "\0")
            self._w(f"{d}/comm", p.comm + "\n")
            self._w(f"{d}/cgroup", f"0::{p.cgroup}\n")
            self._w(f"{d}/status", self._status(p, p.threads[0]))
            ut = sum(t.utime for t in p.threads)
            st = sum(t.stime for t in p.threads)
            lead = p.threads[0]
            self._w(f"{d}/stat", self._stat(p, lead, p.pid, ut, st))
            for th in p.threads:
                self._w(f"{d}/task/{th.tid}/stat", self._stat(p, th, th.tid, th.utime, th.stime))
                self._w(f"{d}/task/{th.tid}/comm", th.comm + "\n")
                self._w(f"{d}/task/{th.tid}/status", self._status(p, th))
            lines = []
            addr = 0x7F0000000000
            for node, pages in sorted(p.numa_pages.items()):
                lines.append(f"{addr:x} default anon={pages} dirty={pages} active=0 "
                             f"N{node}={pages} kernelpagesize_kB={PAGE_KB}")
                addr += pages * PAGE_KB * 1024
            lines.append(f"{addr:x} default file=/usr/lib/x86_64-linux-gnu/libc.so.6 "
                         f"mapped=40 mapmax=30 N0=40 kernelpagesize_kB=4")
            self._w(f"{d}/numa_maps", "\n".join(lines) + "\n")

    def _stat(self, p: FakeProcess, th: FakeThread, tid: int, ut: int, st: int) -> str:
        fields = [str(tid), f"({th.comm})", th.state, str(p.ppid), str(p.pid), str(p.pid),
                  "0", "-1", "4194304", "100", "0", "0", "0", str(ut), str(st), "0", "0",
                  "20", "0", str(len(p.threads)), "0", "12345", "3133440", "359",
                  "18446744073709551615", "1", "1", "0", "0", "0", "0", "0", "0", "0", "0",
                  "0", "0", "17", str(th.last_cpu), "0", "0", "0", "0", "0", "0", "0", "0",
                  "0", "0", "0", "0", "0"]
        return " ".join(fields) + "\n"

    def _status(self, p: FakeProcess, th: FakeThread) -> str:
        state = {"R": "R (running)", "S": "S (sleeping)", "D": "D (disk sleep)"}[th.state]
        return (f"Name:\t{th.comm}\nUmask:\t0022\nState:\t{state}\nTgid:\t{p.pid}\n"
                f"Ngid:\t0\nPid:\t{th.tid}\nPPid:\t{p.ppid}\nTracerPid:\t0\n"
                f"Uid:\t{p.uid}\t{p.uid}\t{p.uid}\t{p.uid}\n"
                f"Gid:\t{p.uid}\t{p.uid}\t{p.uid}\t{p.uid}\n"
                f"Threads:\t{len(p.threads)}\n"
                f"CapEff:\t0000000000000000\n"
                f"Cpus_allowed:\t{cpumask(p.affinity, self.ncpus)}\n"
                f"Cpus_allowed_list:\t{cpulist(p.affinity)}\n"
                f"Mems_allowed_list:\t{cpulist(range(self.nnodes))}\n"
                f"voluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t2\n")
