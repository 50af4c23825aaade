/* snumap's scheduler tracer, CO-RE: compiled ahead of time (scripts/build_bpf.py ->
 * sched.bpf.o), loaded through libbpf by snumap_tui/trace/libbpf.py. No kernel headers, no
 * compiler at run time: field accesses are relocated by libbpf against /sys/kernel/btf/vmlinux.
 *
 * The same records, filter and reconstruction rules as bpf/sched.c (bcc's copy, for kernels
 * without BTF); only the attachment differs. Programs are tp_btf ("BTF-enabled raw
 * tracepoints", Linux >= 5.5): the handler gets the tracepoint's C arguments (task_struct
 * pointers) directly, with no copy into a trace record as classic tracepoints make. The
 * arguments follow the kernel's TP_PROTO (include/trace/events/sched.h); the prev_state the
 * classic sched_switch event reports is computed here the way __trace_sched_switch_state() does.
 *
 * The task_struct arguments are BTF pointers the verifier trusts: fields are read directly (one
 * CO-RE-relocated load each, no bpf_probe_read_kernel call); BPF_CORE_READ remains only for the
 * fields of older layouts.
 *
 * Settings are `const volatile` globals set by the loader before load (the verifier sees them
 * as constants and prunes the branch not taken); the ring's size is set on the map.
 */
#include "kernel_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "sched_event.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u32 snumap_system_wide = 0;
/* Every this many bytes written into a CPU's ring (a power of two; the loader sets it, 0:
 * never), the record that crosses the multiple wakes user space (BPF_RB_FORCE_WAKEUP). Every
 * other record is written without a wakeup, as before: the drain thread sleeps in epoll until
 * a ring woke it or its timeout passed, so a quiet machine wakes it a few times a second and
 * a storm once per so many records, never once per record. The producer position is this
 * CPU's own cache line (its ring is written by it alone); the unread bytes would need the
 * consumer's, which the reader on another CPU writes: reading it cost the wakeup program
 * ~80 ns more a call (bpf_stats, a pipe storm on this project's VM). */
const volatile __u64 snumap_wake_bytes = 0;

/* The flags for the record of SIZE bytes (header included) that took the ring's producer
 * position to PROD. */
static __always_inline __u64 wake_flags(__u64 prod, __u64 size)
{
    __u64 at = snumap_wake_bytes;
    return at && (prod & (at - 1)) < size ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/* One ring per CPU (an array of rings, index = the CPU the program runs on): one ring shared
 * by all CPUs takes a spinlock for every record, and with two CPUs switching a million times
 * a second each the programs cost 150-170 ns a call instead of 86-92 ns (bpf_stats, this
 * project's VM); the lock's cache line only bounces more with more CPUs. The loader sets the
 * number of CPUs and creates and inserts each CPU's ring (of its own size) before attaching. */
struct ring {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 1 << 20);
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
    __uint(max_entries, 1);                 /* the loader sets: the possible CPUs */
    __type(key, __u32);
    __array(values, struct ring);
} rings SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, __u32);
    __type(value, __u32);                   /* tid -> tgid (0 = not known yet) */
} tracked SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, __u32);
    __type(value, struct snumap_task_name); /* tid -> comm at fork / exec */
} names SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} lost SEC(".maps");

/* The last switch seen on this CPU (see bpf/sched.c: switches the kernel never traced). */
struct last_switch {
    __u64 t_ns;
    __u32 next;
    __u32 used;
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct last_switch);
} lastsw SEC(".maps");

/* ---- counters per run interval (docs/attribution.md) ---------------------------------------
 * The loader opens each chosen event on each CPU (perf_event_open, pid -1) and puts the fd at
 * index cpu * SNUMAP_MAX_COUNTERS + i of `counters`. At every switch the program reads them
 * with bpf_perf_event_read_value (counter, enabled and running time: multiplexing is kept),
 * and the deltas since the previous switch on this CPU belong to the task switched out. */
const volatile __u32 snumap_ncounters = 0;
/* The first snumap_ntimed events need their enabled/running times (hardware events, which
 * the kernel may multiplex; the loader puts them first); the others are read without them,
 * and their times are not written (a record is 32 + 8 x (n + 2 x ntimed) bytes). */
const volatile __u32 snumap_ntimed = 0;

struct {
    __uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
    __uint(key_size, sizeof(__u32));
    __uint(value_size, sizeof(__u32));
    __uint(max_entries, 1);                 /* the loader sets: possible CPUs x MAX_COUNTERS */
} counters SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
    __uint(max_entries, 1);                 /* the loader sets: the possible CPUs */
    __type(key, __u32);
    __array(values, struct ring);
} crings SEC(".maps");

/* Where a thread's own counts start and end (docs/attribution.md "Which counts are a
 * thread's"): its interval ends at the sched_switch that switches it out, before the kernel's
 * switch path (prepare_task_switch, switch_to, finish_task_switch); it starts where the switch
 * that brought it in has completed, at sched_exit_tp (Linux >= 6.16, the end of __schedule in
 * the switched-in task), the points between which perf's per-thread counts run. The switch
 * path in between is no thread's own time; of what it counts, a context switch belongs to the
 * task switched out (one per switch-out, snumap_switch_slot: not read from the counter, whose
 * increment comes after the switch-out's read) and a migration (snumap_next_mask: counted at
 * perf's sched-in) to the task switched in. Without sched_exit_tp (older kernels, and the
 * first run of a new task, which starts in ret_from_fork) an interval starts at the
 * sched_switch that switched it in. */
const volatile __u32 snumap_switch_slot = 0xff;  /* the context-switches event, 0xff: none */
const volatile __u32 snumap_next_mask = 0;        /* events the task switched in gets */
const volatile __u32 snumap_has_exit = 0;         /* the loader attaches sched_exit_tp */

#define NV (3 * SNUMAP_MAX_COUNTERS)
struct counter_state {
    __u64 t_ns;                             /* the last reading on this CPU (0: none yet) */
    __u64 others_t;                         /* start of the untraced time summed below */
    __u64 carry[SNUMAP_MAX_COUNTERS];       /* switch-path counts of the task switched in */
    __u32 opened;                           /* sched_exit_tp read since the last switch */
    __u32 pad;
    __u64 last[NV];                         /* the last readings: counter, enabled, running */
    __u64 others[NV];                       /* untraced tasks' deltas since others_t */
    struct snumap_counter_head head;        /* the record being built, then its deltas */
    __u64 rec[NV];
    /* A traced task's record, built at its switch-out and written at the end of the switch
     * (sched_exit_tp), so that writing it is not inside the task's own counts. */
    struct snumap_counter_head held_head;
    __u64 held_rec[NV];
    __u32 holding;
    __u32 pad2;
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct counter_state);
} cstate SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} clost SEC(".maps");

/* HEAD and the deltas that follow it into this CPU's counter ring. */
static __always_inline void counter_output(struct snumap_counter_head *head, __u32 cpu)
{
    __u32 n = snumap_ncounters, m = snumap_ntimed;
    void *ring = bpf_map_lookup_elem(&crings, &cpu);
    /* The size is a constant to the verifier: snumap_ncounters is read-only after load. */
    __u64 size = SNUMAP_COUNTER_HEAD_SIZE + 8 * (n + 2 * m);
    if (n > SNUMAP_MAX_COUNTERS || m > n || !ring ||
        bpf_ringbuf_output(ring, head, size,
                           wake_flags(bpf_ringbuf_query(ring, BPF_RB_PROD_POS) + size + 8,
                                      size + 8))) {
        __u32 zero = 0;
        __u64 *l = bpf_map_lookup_elem(&clost, &zero);
        if (l)
            *l += 1;
    }
}

static __always_inline void counter_emit(struct counter_state *st, __u32 cpu)
{
    counter_output(&st->head, cpu);
}

/* The record held back at the last switch-out, written now. */
static __always_inline void counter_release(struct counter_state *st, __u32 cpu)
{
    if (st->holding) {
        st->holding = 0;
        counter_output(&st->held_head, cpu);
    }
}

/* The untraced tasks' sums since others_t, as one record ending at END (tid SNUMAP_OUTSIDE),
 * and the sums cleared. */
static __always_inline void others_emit(struct counter_state *st, __u32 cpu, __u64 end)
{
    __u32 n = snumap_ncounters, m = snumap_ntimed;
    st->head.t_start = st->others_t;
    st->head.t_end = end;
    st->head.tid = SNUMAP_OUTSIDE;
    st->head.pid = SNUMAP_OUTSIDE;
    st->head.cpu = cpu;
    st->head.n = n;
    for (__u32 i = 0; i < SNUMAP_MAX_COUNTERS; i++) {
        if (i >= n)
            break;
        st->rec[i] = st->others[i];
        if (i < m) {
            st->rec[n + i < NV ? n + i : 0] = st->others[SNUMAP_MAX_COUNTERS + i];
            st->rec[n + m + i < NV ? n + m + i : 0] = st->others[2 * SNUMAP_MAX_COUNTERS + i];
        }
        st->others[i] = 0;
        st->others[SNUMAP_MAX_COUNTERS + i] = 0;
        st->others[2 * SNUMAP_MAX_COUNTERS + i] = 0;
    }
    st->others_t = 0;
    counter_emit(st, cpu);
}

/* Counter I of this CPU now: 0 and V filled, or -1. */
static __always_inline int read_counter(__u32 cpu, __u32 i, __u64 now,
                                        struct bpf_perf_event_value *v)
{
    if (i < snumap_ntimed)
        return bpf_perf_event_read_value(&counters, cpu * SNUMAP_MAX_COUNTERS + i, v,
                                         sizeof(*v));
    /* A software event is never multiplexed (it counts whenever it is enabled): its value
     * alone, without the two clock reads the times cost (~200 ns a switch for three events
     * on this project's VM); enabled = running = the interval. */
    __u64 c = bpf_perf_event_read(&counters, cpu * SNUMAP_MAX_COUNTERS + i);
    if ((__s64)c < 0 && (__s64)c > -4096)
        return -1;
    v->counter = c;
    v->enabled = now;
    v->running = now;
    return 0;
}

/* At sched_exit_tp: the switch that brought the current task in has completed. What the
 * counters advanced since that switch's sched_switch is the switch path: the events of
 * snumap_next_mask are kept for the task switched in (added to its record), the rest is no
 * thread's. The readings become the start of the task's own interval. */
static __always_inline void count_switched_in(__u32 cpu, __u64 now, int gone)
{
    __u32 zero = 0, n = snumap_ncounters;
    struct counter_state *st = bpf_map_lookup_elem(&cstate, &zero);
    if (!st || n == 0)
        return;
    if (!st->t_ns || st->opened) {
        counter_release(st, cpu);
        return;
    }
    for (__u32 i = 0; i < SNUMAP_MAX_COUNTERS; i++) {
        if (i >= n)
            break;
        struct bpf_perf_event_value v = {};
        if (read_counter(cpu, i, now, &v))
            continue;
        /* GONE: the task switched in is past exit_notify(), its perf counters detached and
         * its /proc figures final: a migration counted now is nobody's, as its context
         * switches then are (count_interval's DEAD). */
        if ((snumap_next_mask & (1u << i)) && !gone)
            st->carry[i] += v.counter - st->last[i];
        st->last[i] = v.counter;
        st->last[SNUMAP_MAX_COUNTERS + i] = v.enabled;
        st->last[2 * SNUMAP_MAX_COUNTERS + i] = v.running;
    }
    st->t_ns = now;
    st->opened = 1;
    counter_release(st, cpu);
}

/* The deltas of this CPU's counters since PREV's interval began (the last reading), for PREV
 * (tid, tgid): a record when it is traced (or everything is), else added to the CPU's
 * untraced sums, which become one record (tid SNUMAP_OUTSIDE) when a traced task comes in.
 * DEAD: PREV is switched out for the last time (its context switch is counted by nobody:
 * perf's per-thread counters are detached at exit, /proc no longer shows it). */
static __always_inline void count_interval(__u32 cpu, __u64 now, __u32 prev, __s32 pid,
                                           int prev_traced, int next_traced, int dead,
                                           int unseen)
{
    __u32 zero = 0, n = snumap_ncounters, m = snumap_ntimed;
    struct counter_state *st = bpf_map_lookup_elem(&cstate, &zero);
    if (!st || n == 0)
        return;
    /* No sched_exit_tp since the last switch (a new task's first run starts in
     * ret_from_fork): the record held there goes now, before head and rec are reused. */
    counter_release(st, cpu);
    __u64 t0 = st->t_ns;
    st->t_ns = now;
    st->opened = 0;
    /* A traced task switched out whose switch-in the kernel did not trace (see lastsw):
     * the untraced time summed so far ended where its interval began. */
    if (prev_traced && st->others_t)
        others_emit(st, cpu, t0);
    for (__u32 i = 0; i < SNUMAP_MAX_COUNTERS; i++) {
        if (i >= n)
            break;
        struct bpf_perf_event_value v = {};
        __u64 d0 = 0, d1 = 0, d2 = 0;
        int got = read_counter(cpu, i, now, &v);
        if (got == 0 && unseen && (snumap_next_mask & (1u << i))) {
            /* PREV's switch-out was not traced (sched_exit_tp closes its interval): what
             * such an event counted since PREV's own start was at the sched-in of the task
             * switched in now (a running task does not migrate). */
            d0 = st->carry[i];
            st->carry[i] = v.counter - st->last[i];
            st->last[i] = v.counter;
            st->last[SNUMAP_MAX_COUNTERS + i] = v.enabled;
            st->last[2 * SNUMAP_MAX_COUNTERS + i] = v.running;
            st->rec[i] = d0;
            if (!prev_traced && t0)
                st->others[i] += d0;
            continue;
        }
        if (got == 0) {
            d0 = v.counter - st->last[i] + st->carry[i];
            d1 = v.enabled - st->last[SNUMAP_MAX_COUNTERS + i];
            d2 = v.running - st->last[2 * SNUMAP_MAX_COUNTERS + i];
            st->last[i] = v.counter;
            st->last[SNUMAP_MAX_COUNTERS + i] = v.enabled;
            st->last[2 * SNUMAP_MAX_COUNTERS + i] = v.running;
        }
        st->carry[i] = 0;
        if (i == snumap_switch_slot)
            d0 = !dead;                     /* this switch-out, whatever the counter says */
        /* The record's layout: n counters, then enabled and running of the timed ones. */
        st->rec[i] = d0;
        if (i < snumap_ntimed) {
            st->rec[n + i < NV ? n + i : 0] = d1;
            st->rec[n + m + i < NV ? n + m + i : 0] = d2;
        }
        if (!prev_traced && t0) {
            st->others[i] += d0;
            st->others[SNUMAP_MAX_COUNTERS + i] += d1;
            st->others[2 * SNUMAP_MAX_COUNTERS + i] += d2;
        }
    }
    if (!t0)                                /* the first reading: a baseline, no interval */
        return;
    if (prev_traced) {
        st->head.t_start = t0;
        st->head.t_end = now;
        st->head.tid = prev;
        st->head.pid = pid;
        st->head.cpu = cpu;
        st->head.n = n;
        __builtin_memcpy(&st->held_head, &st->head, sizeof(st->head));
        __builtin_memcpy(st->held_rec, st->rec, sizeof(st->rec));
        st->holding = 1;
        if (!snumap_has_exit)
            counter_release(st, cpu);
    } else if (!st->others_t) {
        st->others_t = t0;
    }
    if (next_traced && st->others_t)
        others_emit(st, cpu, now);
}

/* A record in the ring of this CPU (*RINGP), or 0 with one more lost event counted. */
static __always_inline struct snumap_sched_event *reserve_event(void **ringp)
{
    __u32 me = bpf_get_smp_processor_id();
    void *ring = bpf_map_lookup_elem(&rings, &me);
    *ringp = ring;
    struct snumap_sched_event *e = ring ? bpf_ringbuf_reserve(ring, sizeof(*e), 0) : 0;
    if (!e) {
        __u32 zero = 0;
        __u64 *n = bpf_map_lookup_elem(&lost, &zero);
        if (n)
            *n += 1;
    }
    return e;
}

static __always_inline void emit_at(__u64 t_ns, __u8 kind, __u32 cpu, __s32 tid, __s32 tid2,
                                    __s32 pid, __s32 pid2, __s64 arg)
{
    void *ring;
    struct snumap_sched_event *e = reserve_event(&ring);
    if (!e)
        return;
    e->t_ns = t_ns;
    e->arg = arg;
    e->cpu = cpu;
    e->tid = tid;
    e->tid2 = tid2;
    e->pid = pid;
    e->pid2 = pid2;
    e->kind = kind;
    e->pad[0] = 0;
    e->pad[1] = 0;
    e->pad[2] = 0;
    /* A wakeup only for the record that crosses a multiple of snumap_wake_bytes (the
     * producer position counts the reserved record already, its 8-byte header too). */
    bpf_ringbuf_submit(e, wake_flags(bpf_ringbuf_query(ring, BPF_RB_PROD_POS),
                                     sizeof(*e) + 8));
}

/* task_cpu(p): thread_info.cpu since 5.16, task_struct.cpu before. */
static __always_inline __u32 task_cpu(struct task_struct *p)
{
    if (bpf_core_field_exists(p->thread_info.cpu))
        return p->thread_info.cpu;
    struct task_struct___cpu *old = (void *)p;
    return BPF_CORE_READ(old, cpu);
}

/* What the classic sched_switch event reports as prev_state (include/trace/events/sched.h,
 * __trace_sched_switch_state, and __task_state_index in include/linux/sched.h): a preemption
 * is TASK_REPORT_MAX (0x100); otherwise the highest TASK_REPORT bit of state | exit_state, with
 * TASK_IDLE (0x402) reported as TASK_REPORT_IDLE (0x80) and TASK_RTLOCK_WAIT (0x1000) as
 * TASK_UNINTERRUPTIBLE. */
static __always_inline __s64 report_state(bool preempt, __u32 st, struct task_struct *p)
{
    if (preempt)
        return 0x100;
    __u32 s = (st | (__u32)p->exit_state) & 0x7f;
    if ((st & 0x402) == 0x402)
        s = 0x80;
    if (st & 0x1000)
        s = 2;
    s |= s >> 1;
    s |= s >> 2;
    s |= s >> 4;
    return s - (s >> 1);
}

static __always_inline int on_switch(bool preempt, struct task_struct *prev_task,
                                     struct task_struct *next_task, __u32 raw_state)
{
    __u32 prev = prev_task->pid, next = next_task->pid;
    __u32 tgid = prev_task->tgid;
    __u32 cpu = bpf_get_smp_processor_id();
    __u64 now = bpf_ktime_get_ns();
    __s32 next_tgid = next ? next_task->tgid : 0;
    __u64 missed_t = 0;
    __u32 missed_from = 0;
    __u32 zero = 0;
    /* TASK_DEAD (0x80) or an exit state: the task's last switch-outs, after its counters and
     * its /proc figures were final. */
    int dead = (raw_state & 0x80) || prev_task->exit_state;
    int prev_tracked = 1, next_tracked = 1;
    struct last_switch *ls = bpf_map_lookup_elem(&lastsw, &zero);
    if (ls) {
        if (ls->t_ns && ls->next != prev && prev != 0) {
            missed_t = ls->t_ns;
            missed_from = ls->next;
        }
        ls->t_ns = now;
        ls->next = next;
    }
    __s32 prev_pid = prev ? (__s32)tgid : 0;
    if (!snumap_system_wide) {
        __u32 *pv = bpf_map_lookup_elem(&tracked, &prev);
        prev_tracked = pv != 0;
        if (pv && *pv == 0 && prev != 0)
            *pv = tgid;
        next_tracked = bpf_map_lookup_elem(&tracked, &next) != 0;
        /* Plain ints from here: clang would otherwise OR the two pointers, which the
         * verifier refuses. */
        asm volatile("" : "+r"(prev_tracked), "+r"(next_tracked));
        if (!prev_tracked) {
            missed_t = 0;
            if (prev)
                prev_pid = SNUMAP_OUTSIDE;
        }
        if (!next_tracked && next)
            next_tgid = SNUMAP_OUTSIDE;
    }
    int keep = prev_tracked || next_tracked;
    /* Neither side traced: kept only as an idle edge on a CPU the tree used. */
    if (!keep && ls && ls->used && (prev != 0) != (next != 0))
        keep = 1;
    if (keep) {
        if (ls && (prev_tracked || next_tracked))
            ls->used = 1;
        if (missed_t) {
            __s32 from_pid = missed_from ? -1 : 0;
            if (missed_from && !snumap_system_wide &&
                !bpf_map_lookup_elem(&tracked, &missed_from))
                from_pid = SNUMAP_OUTSIDE;
            emit_at(missed_t, SNUMAP_SWITCH, cpu, missed_from, prev, from_pid, prev_pid, -1);
        }
        emit_at(now, SNUMAP_SWITCH, cpu, prev, next, prev_pid, next_tgid,
                report_state(preempt, raw_state, prev_task));
    }
    /* Last, so that prev's interval ends as close to the switch path as the program can. */
    if (snumap_ncounters)
        count_interval(cpu, bpf_ktime_get_ns(), prev, prev_pid, prev_tracked, next_tracked,
                       dead, 0);
    return 0;
}

/* Linux >= 5.18 passes the state prev is switched out in (re-reading prev->__state could see
 * a concurrent wakeup's TASK_RUNNING). */
SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
             unsigned int prev_state)
{
    return on_switch(preempt, prev, next, prev_state);
}

/* Linux 5.8-5.17 (the loader picks one of the two): the state from the task itself. */
SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_pre518, bool preempt, struct task_struct *prev,
             struct task_struct *next)
{
    __u32 st;
    if (bpf_core_field_exists(prev->__state)) {
        st = prev->__state;
    } else {
        struct task_struct___pre514 *old = (void *)prev;
        st = (__u32)BPF_CORE_READ(old, state);
    }
    return on_switch(preempt, prev, next, st);
}

/* The end of __schedule() in the task switched in (Linux >= 6.16; the loader leaves it out
 * where the kernel lacks it), once the switch has completed: the start of the task's own
 * counts (count_switched_in), and the switch-in itself when the kernel traced no
 * sched_switch for it. That happens (Linux 6.18 in a KVM guest, on some CPUs) for the switch
 * out of the idle task: the previous traced switch on the CPU then names another task than
 * the one running now. The switch-in is emitted here, at the time it completed, with
 * arg = -2 (events.py): not reconstructed from evidence, seen. */
SEC("tp_btf/sched_exit_tp")
int BPF_PROG(sched_exit_tp, bool is_switch)
{
    if (!is_switch)
        return 0;
    __u32 cpu = bpf_get_smp_processor_id();
    struct task_struct *cur = bpf_get_current_task_btf();
    __u32 tid = cur->pid;
    __u32 zero = 0;
    struct last_switch *ls = bpf_map_lookup_elem(&lastsw, &zero);
    if (!ls || !ls->t_ns || ls->next == tid) {
        /* The common case, first, so that the task's own counts start as close to the
         * switch as they can. */
        if (snumap_ncounters)
            count_switched_in(cpu, bpf_ktime_get_ns(), cur->exit_state != 0);
        return 0;
    }
    __u64 now = bpf_ktime_get_ns();
    __u32 from = ls->next;
    __s32 from_pid = from ? -1 : 0, pid = tid ? (__s32)cur->tgid : 0;
    int from_tracked = 1, tracked_now = 1;
    if (!snumap_system_wide) {
        from_tracked = bpf_map_lookup_elem(&tracked, &from) != 0;
        tracked_now = bpf_map_lookup_elem(&tracked, &tid) != 0;
        asm volatile("" : "+r"(from_tracked), "+r"(tracked_now));
        if (!from_tracked && from)
            from_pid = SNUMAP_OUTSIDE;
        if (!tracked_now && tid)
            pid = SNUMAP_OUTSIDE;
    }
    if (from_tracked || tracked_now || (ls->used && (from != 0) != (tid != 0))) {
        if (from_tracked || tracked_now)
            ls->used = 1;
        emit_at(now, SNUMAP_SWITCH, cpu, from, tid, from_pid, pid, -2);
    }
    ls->t_ns = now;
    ls->next = tid;
    /* The task switched out without a sched_switch ran until now: its interval ends here
     * (with the switch path, which has no reading of its own). */
    if (snumap_ncounters) {
        count_interval(cpu, now, from, from_pid, from_tracked, tracked_now, 0, 1);
        count_switched_in(cpu, bpf_ktime_get_ns(), cur->exit_state != 0);
    }
    return 0;
}

#include "sched_comm.h"

/* __set_task_comm(): prctl(PR_SET_NAME), pthread_setname_np (the comm file of /proc), and
 * exec (before sched_process_exec). The task renamed need not be the current one. */
SEC("tp_btf/task_rename")
int BPF_PROG(task_rename, struct task_struct *task, const char *comm)
{
    __u32 tid = task->pid;
    if (!snumap_system_wide && !bpf_map_lookup_elem(&tracked, &tid))
        return 0;
    char name[16] = {};
    bpf_probe_read_kernel_str(name, sizeof(name), comm);
    emit_comm(tid, task->tgid, name);
    return 0;
}

/* An event about one task (woken, migrated): kept when the task is traced. */
static __always_inline int task_event(__u8 kind, __u32 cpu, struct task_struct *p, __s64 arg)
{
    __u32 tid = p->pid;
    __s32 tgid = p->tgid;
    if (!snumap_system_wide) {
        __u32 *v = bpf_map_lookup_elem(&tracked, &tid);
        if (!v)
            return 0;
    }
    emit_at(bpf_ktime_get_ns(), kind, cpu, tid, 0, tgid, -1, arg);
    return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup, struct task_struct *p)
{
    return task_event(SNUMAP_WAKEUP, task_cpu(p), p, 0);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new, struct task_struct *p)
{
    return task_event(SNUMAP_WAKEUP_NEW, task_cpu(p), p, 0);
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(sched_migrate_task, struct task_struct *p, int dest_cpu)
{
    return task_event(SNUMAP_MIGRATE, dest_cpu, p, task_cpu(p));
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sched_process_fork, struct task_struct *parent, struct task_struct *child)
{
    __u32 ptid = parent->pid, ctid = child->pid;
    __u32 ptgid = parent->tgid, ctgid = child->tgid;
    if (!snumap_system_wide) {
        if (!bpf_map_lookup_elem(&tracked, &ptid))
            return 0;
        bpf_map_update_elem(&tracked, &ctid, &ctgid, BPF_ANY);
    }
    struct snumap_task_name n = {};
    n.tgid = ctgid;
    n.ppid = ptgid;
    bpf_get_current_comm(&n.comm, sizeof(n.comm));
    bpf_map_update_elem(&names, &ctid, &n, BPF_ANY);
    emit_at(bpf_ktime_get_ns(), SNUMAP_FORK, bpf_get_smp_processor_id(), ptid, ctid, ptgid, -1,
            0);
    emit_comm(ctid, ctgid, n.comm);         /* the child starts with its parent's name */
    return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(sched_process_exec, struct task_struct *p)
{
    __u32 tid = p->pid, tgid = p->tgid;
    if (!snumap_system_wide && !bpf_map_lookup_elem(&tracked, &tid))
        return 0;
    struct snumap_task_name n = {};
    n.tgid = tgid;
    bpf_get_current_comm(&n.comm, sizeof(n.comm));
    bpf_map_update_elem(&names, &tid, &n, BPF_ANY);
    emit_at(bpf_ktime_get_ns(), SNUMAP_EXEC, bpf_get_smp_processor_id(), tid, 0, tgid, -1, 0);
    return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit, struct task_struct *p)
{
    __u32 tid = p->pid, tgid = p->tgid;
    /* The tid stays tracked: its last sched_switch comes after this (user space removes it). */
    if (!snumap_system_wide && !bpf_map_lookup_elem(&tracked, &tid))
        return 0;
    emit_at(bpf_ktime_get_ns(), SNUMAP_EXIT, bpf_get_smp_processor_id(), tid, 0, tgid, -1, 0);
    return 0;
}
