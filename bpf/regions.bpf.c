/* snumap's region probes: uprobes and uretprobes on OpenMP/MPI runtime entry points, outlined
 * parallel-region bodies and --probe functions (loaded by snumap_tui/trace/region_bpf.py).
 *
 * The user-space loader attaches region_entry / region_return to every probed offset of a
 * file at once (one uprobe_multi link per file and direction: one RCU grace period when they
 * are detached, where one perf-event uprobe each cost ~80 ms apiece). Each offset carries a
 * cookie: tag << 3 | capture, capture 1 = the first argument, 3 = the third (the outlined
 * function GOMP_parallel and __kmpc_fork_call are given), 0 = none.
 *
 * Filtering happens here: `tracked` holds the tgids of the traced tree (seeded by user space
 * with the command's pid, grown at every fork of a tracked process), so a hit of another
 * process costs one hash lookup and no record. A failed reserve (ring full) counts in `lost`.
 * A system-wide recording keeps every hit, and `tracked` then holds the command's tree only.
 *
 * Held execs: a tracked process that execs a program not in `known` (the executables user
 * space has planned, by inode) is stopped before its first instruction (SIGSTOP, delivered on
 * the way back to user space) and reported in `hits` with tag SNUMAP_EXEC_TAG; user space
 * reads the program and its libraries, attaches their probes and sends SIGCONT. Without the
 * hold, a program a shell starts runs its first regions before its exec is even decoded.
 *
 * Aggregated calls: the very frequent short waits (critical sections: a million a second over
 * eight threads fills any ring a Python drain can empty) carry cookie bit 2, their tag above
 * it as the others, and in the cookie's upper 32 bits the region id user space gave them. A
 * thread's first snumap_agg_exact calls in each snumap_agg_ns window are written exactly (an
 * entry and a return record, both at the return); past them, and whenever the ring cannot
 * take both, its calls' count, their total time and the first entry and last return are
 * summed in `aggs`, and one summary goes to the `sums` ring every snumap_agg_calls calls or
 * snumap_agg_ns after its first. Per region, `walls` keeps how long any thread was inside,
 * exact calls and summed alike (the union over threads, a running total: the number of
 * threads inside, kept with atomics, going 0 -> 1 opens it and 1 -> 0 closes it); each
 * summary carries its value then, and user space reads it at the end. A summary the full
 * ring refuses stays in `aggs` and goes with a later call: nothing is lost; user space reads
 * what is left in `aggs` at the end.
 *
 * Probe budget: a call too frequent to trap (16 M critical sections: every hit is a trap into
 * the kernel, ~1.5 us for an entry and its return here, whatever the program does with it)
 * must not be trapped each time. Each probed function has one counting tag (its entry's, or
 * its return's when it has no entry probe) with a cost in `budget` (ns of a thread's credit a
 * hit spends: the estimated cost of the call's probes divided by the share of a thread's time
 * they may take); a thread earns credit at 1 ns a ns, up to snumap_burst_ns. A hit that finds
 * the thread's credit spent marks the tag in `over` (once) and writes a record with tag
 * SNUMAP_BUDGET_TAG (arg: the tag), which wakes the drain at once, and the drain
 * detaches that function's probes. From that hit on, the tag's hits are counted in `counts` and nothing else (no
 * record, no sum) until the detach takes effect: what was recorded stops at one instant, and
 * is exact up to it; a return whose entry was not seen is not a call.
 *
 * build: -mcpu=v3 (the atomics that return the old value; the kernel has them since 5.12,
 * uprobe_multi needs 6.6)
 */
#include "kernel_types.h"
/* pt_regs as the kernel names its fields (di, not user space's rdi): bpf_tracing.h picks the
 * kernel names when it believes a vmlinux.h was included, which kernel_types.h stands for. */
#define __VMLINUX_H__ 1
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

/* Set by the loader before load: record every process (a system-wide recording). */
const volatile __u32 snumap_system_wide = 0;
/* Set by the loader before load: stop tracked processes at an exec of an unknown program. */
const volatile __u32 snumap_hold_exec = 0;
/* Set by the loader before load: the probes are per process (uprobe_multi links with a pid),
 * so a tracked process without its links yet (`linked`) is held at any exec, known or not. */
const volatile __u32 snumap_scoped = 0;

#define SNUMAP_EXEC_TAG 0xffffffffu
#define SNUMAP_BUDGET_TAG 0xfffffffeu
#define SNUMAP_SIGSTOP 19

/* Wakeups (set by the loader before load; 0: never). The drain thread sleeps in epoll on both
 * rings, as on the scheduling rings (sched.bpf.c): the record that takes a ring's producer
 * position across a multiple of snumap_wake_bytes (hits) or snumap_sum_wake_bytes (sums)
 * wakes it, and so do the records that need user space now (a held exec, a probe past its
 * budget); every other record is written without a wakeup. A drain every 10 ms for the hold
 * and the budget was half the recorder's CPU beside a program using every PU. The producer
 * position is read after the record is reserved; another CPU's record may cross the multiple
 * in between (the ring is shared), and then this wakeup waits for the next multiple or the
 * drain's timeout. */
const volatile __u64 snumap_wake_bytes = 0;
const volatile __u64 snumap_sum_wake_bytes = 0;

#define HIT_BYTES (sizeof(struct snumap_region_hit) + 8)   /* a hit and its ring header */

/* The flags for a record of SIZE bytes (its 8-byte header included) just reserved in RING. */
static __always_inline __u64 wake_at(void *ring, __u64 every, __u64 size)
{
    __u64 prod = bpf_ringbuf_query(ring, BPF_RB_PROD_POS);
    return every && (prod & (every - 1)) < size ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}
#define SNUMAP_NEEDS_LINKS 2    /* `known` value: a program whose processes need their links */

struct snumap_region_hit {
    __u64 t_ns;
    __u64 arg;
    __u32 pid;
    __u32 tid;
    __u32 tag;
    __u32 ret;
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, __u32);
    __type(value, __u32);
} tracked SEC(".maps");

struct snumap_exe {
    __u64 ino;
    __u64 dev;
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, struct snumap_exe);
    __type(value, __u32);
} known SEC(".maps");

/* Processes whose own probe links exist (tgid; with snumap_scoped). */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, __u32);
} linked SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 1 << 22);
} hits SEC(".maps");

/* Records lost: [0] all of them, [1 + tag] those of probe TAG (tags below SNUMAP_LOST_TAGS), so
 * that the recording can say which regions' figures are short. */
#define SNUMAP_LOST_TAGS 4096
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1 + SNUMAP_LOST_TAGS);
    __type(key, __u32);
    __type(value, __u64);
} lost SEC(".maps");

static __always_inline void count_lost(__u32 tag)
{
    __u32 key = 0;
    __u64 *n = bpf_map_lookup_elem(&lost, &key);
    if (n)
        *n += 1;
    if (tag >= SNUMAP_LOST_TAGS)
        return;
    key = 1 + tag;
    n = bpf_map_lookup_elem(&lost, &key);
    if (n)
        *n += 1;
}

#define SNUMAP_AGG_BIT 4

/* Set by the loader before load: the most credit a thread keeps (a burst of calls this long
 * at the budgeted rate passes). */
const volatile __u64 snumap_burst_ns = 200000000;

/* Per tag: the credit (ns) one hit spends, 0 for none (no budget, or not the counting tag). */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, SNUMAP_LOST_TAGS);
    __type(key, __u32);
    __type(value, __u64);
} budget SEC(".maps");

/* Per tag: set once its budget was passed (its record written). */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, SNUMAP_LOST_TAGS);
    __type(key, __u32);
    __type(value, __u32);
} over SEC(".maps");

/* Per tag: the hits of the traced tree. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, SNUMAP_LOST_TAGS);
    __type(key, __u32);
    __type(value, __u64);
} counts SEC(".maps");

struct snumap_rate_key {
    __u32 tid;
    __u32 tag;
};

struct snumap_rate {
    __u64 last;                 /* the thread's last counted hit */
    __s64 credit;               /* ns it may still spend */
};

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, struct snumap_rate_key);
    __type(value, struct snumap_rate);
} rates SEC(".maps");


/* Set by the loader before load: a summary every this many calls, or this long after its
 * first call, whichever comes first. */
const volatile __u32 snumap_agg_calls = 4096;
const volatile __u64 snumap_agg_ns = 100000000;
/* ... and the first this many calls of a thread in each snumap_agg_ns window, while none is
 * being summed, written exactly (an entry and a return record): a program that takes a few
 * critical sections keeps every one drawn in replay; a flood is summed past them. */
const volatile __u32 snumap_agg_exact = 64;

struct snumap_agg_key {
    __u32 tid;
    __u32 rid;
};

struct snumap_agg {
    __u64 t_entry;              /* the call in progress (0: none) */
    __u64 t_first;              /* the first entry of the calls summed */
    __u64 t_last;               /* the last return */
    __u64 sum_ns;
    __u64 win_start;            /* the window of exact calls */
    __u32 pid;
    __u32 count;
    __u32 win_exact;            /* calls written exactly in it */
    __u32 pad;
};

struct snumap_wall {
    __s64 inside;               /* threads inside now */
    __u64 open_ns;              /* when the first of them entered */
    __u64 wall_ns;              /* time with at least one inside, closed stretches */
};

struct snumap_region_sum {
    __u64 t_first;
    __u64 t_last;
    __u64 sum_ns;
    __u64 wall_ns;              /* the region's walls.wall_ns at this summary (running) */
    __u32 pid;
    __u32 tid;
    __u32 rid;
    __u32 count;
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, struct snumap_agg_key);
    __type(value, struct snumap_agg);
} aggs SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, struct snumap_wall);
} walls SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 1 << 18);
} sums SEC(".maps");

/* A record of the current task (ID: bpf_get_current_pid_tgid()) in `hits`, t_ns, pid, tid, tag
 * and ret filled; NULL, counted in `lost`, when the ring is full. */
static __always_inline struct snumap_region_hit *reserve(__u64 id, __u32 tag, __u32 ret)
{
    struct snumap_region_hit *h = bpf_ringbuf_reserve(&hits, sizeof(*h), 0);
    if (!h) {
        count_lost(tag);
        return 0;
    }
    h->t_ns = bpf_ktime_get_ns();
    h->pid = id >> 32;
    h->tid = (__u32)id;
    h->tag = tag;
    h->ret = ret;
    return h;
}

/* Count a hit of TAG and spend its credit; past the budget, say so once (see the top). True
 * when the tag is past it: the hit is not recorded. */
static __always_inline int spend(__u64 id, __u32 tag)
{
    if (tag >= SNUMAP_LOST_TAGS)
        return 0;
    __u64 *n = bpf_map_lookup_elem(&counts, &tag);
    if (n)
        *n += 1;
    __u64 *cost = bpf_map_lookup_elem(&budget, &tag);
    if (!cost || !*cost)
        return 0;
    __u32 *o = bpf_map_lookup_elem(&over, &tag);
    if (!o || *o)
        return 1;
    struct snumap_rate_key k = {.tid = (__u32)id, .tag = tag};
    struct snumap_rate *r = bpf_map_lookup_elem(&rates, &k);
    __u64 t = bpf_ktime_get_ns();
    if (!r) {
        struct snumap_rate z = {.last = t, .credit = (__s64)snumap_burst_ns};
        bpf_map_update_elem(&rates, &k, &z, BPF_ANY);
        return 0;
    }
    __s64 c = r->credit + (__s64)(t - r->last);
    if (c > (__s64)snumap_burst_ns)
        c = (__s64)snumap_burst_ns;
    c -= (__s64)*cost;
    r->credit = c;
    r->last = t;
    if (c >= 0)
        return 0;
    if (__sync_fetch_and_add(o, 1))
        return 1;
    struct snumap_region_hit *h = bpf_ringbuf_reserve(&hits, sizeof(*h), 0);
    if (!h) {
        *o = 0;                 /* said with a later hit */
        return 0;
    }
    h->t_ns = t;
    h->arg = tag;
    h->pid = id >> 32;
    h->tid = (__u32)id;
    h->tag = SNUMAP_BUDGET_TAG;
    h->ret = 0;
    bpf_ringbuf_submit(h, BPF_RB_FORCE_WAKEUP);
    return 1;
}

/* The union over threads (`walls`): the thread that takes `inside` from 0 to 1 opens a
 * stretch at T, the one that takes it from 1 to 0 closes it. Two CPUs race there: a thread
 * that closed the last stretch (inside now 0) reads open_ns a few instructions later, and one
 * that opens the next may write it in between -- the closer then read the opener's time and
 * the whole stretch before it was lost (2 ms of 50 under load, tests/test_regions_flood.py).
 * So open_ns is taken back with a compare-and-swap, and an opener writes it only once it is
 * 0 again (waiting the few instructions the closer needs, boundedly; past the bound its own
 * stretch goes uncounted, never a stretch already closed). */
static __always_inline void wall_open(struct snumap_wall *w, __u64 t)
{
    if (__sync_fetch_and_add(&w->inside, 1) != 0)
        return;
    for (int i = 0; i < 64; i++)
        if (__sync_val_compare_and_swap(&w->open_ns, 0, t) == 0)
            return;
}

static __always_inline void wall_close(struct snumap_wall *w, __u64 t)
{
    if (__sync_fetch_and_add(&w->inside, -1) != 1)
        return;
    __u64 o = w->open_ns;
    if (o && __sync_val_compare_and_swap(&w->open_ns, o, 0) == o && t > o)
        __sync_fetch_and_add(&w->wall_ns, t - o);
}

static __always_inline void agg_entry(__u64 id, __u32 rid, __u32 tag)
{
    struct snumap_agg_key k = {.tid = (__u32)id, .rid = rid};
    struct snumap_agg *a = bpf_map_lookup_elem(&aggs, &k);
    if (!a) {
        struct snumap_agg z = {.pid = id >> 32};
        bpf_map_update_elem(&aggs, &k, &z, BPF_NOEXIST);
        a = bpf_map_lookup_elem(&aggs, &k);
        if (!a) {               /* the map is full: this call is not counted */
            count_lost(tag);
            return;
        }
    }
    struct snumap_wall *w = bpf_map_lookup_elem(&walls, &rid);
    if (!w) {
        struct snumap_wall z = {};
        bpf_map_update_elem(&walls, &rid, &z, BPF_NOEXIST);
        w = bpf_map_lookup_elem(&walls, &rid);
        if (!w) {
            count_lost(tag);
            return;
        }
    }
    __u64 t = bpf_ktime_get_ns();
    if (a->t_entry)             /* an entry without its return (longjmp): not a call */
        wall_close(w, t);
    a->t_entry = t;
    wall_open(w, t);
}

/* One call written exactly: its entry (ret 0) and return (ret 1) records, both under the
 * return probe's TAG; false, and nothing written, when the ring cannot take both. */
static __always_inline int exact_call(__u64 id, __u32 tag, __u64 t0, __u64 t1)
{
    struct snumap_region_hit *b = bpf_ringbuf_reserve(&hits, sizeof(*b), 0);
    if (!b)
        return 0;
    struct snumap_region_hit *e = bpf_ringbuf_reserve(&hits, sizeof(*e), 0);
    if (!e) {
        bpf_ringbuf_discard(b, BPF_RB_NO_WAKEUP);
        return 0;
    }
    b->t_ns = t0;
    e->t_ns = t1;
    b->arg = e->arg = 0;
    b->pid = e->pid = id >> 32;
    b->tid = e->tid = (__u32)id;
    b->tag = e->tag = tag;
    b->ret = 0;
    e->ret = 1;
    bpf_ringbuf_submit(b, BPF_RB_NO_WAKEUP);
    bpf_ringbuf_submit(e, wake_at(&hits, snumap_wake_bytes, HIT_BYTES));
    return 1;
}

static __always_inline void agg_return(__u64 id, __u32 rid, __u32 tag)
{
    struct snumap_agg_key k = {.tid = (__u32)id, .rid = rid};
    struct snumap_agg *a = bpf_map_lookup_elem(&aggs, &k);
    if (!a || !a->t_entry)      /* a return without its entry: not a call (pair()'s rule) */
        return;
    struct snumap_wall *w = bpf_map_lookup_elem(&walls, &rid);
    if (!w)
        return;
    __u64 t = bpf_ktime_get_ns();
    __u64 t0 = a->t_entry;
    a->t_entry = 0;
    wall_close(w, t);
    if (!a->count) {            /* nothing being summed: this call may be written exactly */
        if (t - a->win_start >= snumap_agg_ns) {
            a->win_start = t;
            a->win_exact = 0;
        }
        if (a->win_exact < snumap_agg_exact && exact_call(id, tag, t0, t)) {
            a->win_exact += 1;
            return;
        }
    }
    if (!a->count)
        a->t_first = t0;
    a->count += 1;
    a->sum_ns += t - t0;
    a->t_last = t;
    if (a->count < snumap_agg_calls && t - a->t_first < snumap_agg_ns)
        return;
    struct snumap_region_sum *s = bpf_ringbuf_reserve(&sums, sizeof(*s), 0);
    if (!s)
        return;                 /* kept summing: it goes with a later return */
    s->t_first = a->t_first;
    s->t_last = t;
    s->sum_ns = a->sum_ns;
    s->wall_ns = w->wall_ns;
    s->pid = id >> 32;
    s->tid = (__u32)id;
    s->rid = rid;
    s->count = a->count;
    bpf_ringbuf_submit(s, wake_at(&sums, snumap_sum_wake_bytes, sizeof(*s) + 8));
    a->count = 0;
    a->sum_ns = 0;
}

static __always_inline int hit(struct pt_regs *ctx, __u32 ret)
{
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tgid = id >> 32;
    if (!snumap_system_wide && !bpf_map_lookup_elem(&tracked, &tgid))
        return 0;
    __u64 cookie = bpf_get_attach_cookie(ctx);
    if (spend(id, (__u32)cookie >> 3))
        return 0;
    if (cookie & SNUMAP_AGG_BIT) {
        if (ret)
            agg_return(id, cookie >> 32, (__u32)cookie >> 3);
        else
            agg_entry(id, cookie >> 32, (__u32)cookie >> 3);
        return 0;
    }
    struct snumap_region_hit *h = reserve(id, (__u32)cookie >> 3, ret);
    if (!h)
        return 0;
    /* Both read at fixed offsets first: selecting the register inside the condition let clang
     * compute the ctx offset, which the verifier refuses ("dereference of modified ctx"). */
    __u64 a1 = PT_REGS_PARM1(ctx);
    __u64 a3 = PT_REGS_PARM3(ctx);
    barrier_var(a1);
    barrier_var(a3);
    __u32 capture = cookie & 3;
    h->arg = capture == 1 ? a1 : capture == 3 ? a3 : 0;
    bpf_ringbuf_submit(h, wake_at(&hits, snumap_wake_bytes, HIT_BYTES));
    return 0;
}

SEC("uprobe")
int BPF_KPROBE(region_entry)
{
    return hit(ctx, 0);
}

SEC("uretprobe")
int BPF_KRETPROBE(region_return)
{
    return hit(ctx, 1);
}

/* The traced tree grows in the kernel, before the child can run a single probed call. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(region_fork, struct task_struct *parent, struct task_struct *child)
{
    __u32 ptgid = BPF_CORE_READ(parent, tgid);
    __u32 ctgid = BPF_CORE_READ(child, tgid);
    if (ptgid == ctgid || !bpf_map_lookup_elem(&tracked, &ptgid))
        return 0;
    __u32 one = 1;
    bpf_map_update_elem(&tracked, &ctgid, &one, BPF_ANY);
    return 0;
}

/* A tracked process execs: stop it until user space has probed the program, unless known. The
 * record carries the program's inode (arg) and device (ret), the key user space adds to
 * `known` before it sends SIGCONT. With per-process probes a process not `linked` yet that
 * execs a known program needing links (one with a runtime: SNUMAP_NEEDS_LINKS) is held too,
 * until its links exist. No record, no stop: a full ring never leaves one held. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(region_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
    if (!snumap_hold_exec)
        return 0;
    __u64 id = bpf_get_current_pid_tgid();       /* the task that execs */
    __u32 tgid = id >> 32;
    if (!bpf_map_lookup_elem(&tracked, &tgid))
        return 0;
    struct snumap_exe k = {};
    k.ino = BPF_CORE_READ(bprm, file, f_inode, i_ino);
    k.dev = BPF_CORE_READ(bprm, file, f_inode, i_sb, s_dev);
    __u32 *v = bpf_map_lookup_elem(&known, &k);
    if (v && (*v != SNUMAP_NEEDS_LINKS || !snumap_scoped || bpf_map_lookup_elem(&linked, &tgid)))
        return 0;
    struct snumap_region_hit *h = reserve(id, SNUMAP_EXEC_TAG, (__u32)k.dev);
    if (!h)
        return 0;
    h->arg = k.ino;
    bpf_ringbuf_submit(h, BPF_RB_FORCE_WAKEUP);     /* held until user space reads it */
    bpf_send_signal(SNUMAP_SIGSTOP);
    return 0;
}
