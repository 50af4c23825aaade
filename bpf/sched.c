/* snumap's scheduler tracer (compiled by bcc at run time, loaded by snumap_tui/trace/bcc.py).
 *
 * Tracepoints (include/trace/events/sched.h; the argument layouts bcc generates from tracefs
 * events/sched/NAME/format): sched_switch, sched_wakeup, sched_wakeup_new, sched_migrate_task,
 * sched_process_fork, sched_process_exec, sched_process_exit.
 *
 * Filtering happens here, so that tasks outside the traced tree cost one hash lookup and no
 * copy: `tracked` holds the tids to follow (seeded by user space with the root's threads, grown
 * at every fork of a tracked thread). In system-wide mode (SNUMAP_SYSTEM_WIDE) everything passes.
 *
 * Records go through one BPF ring buffer (Documentation/bpf/ringbuf.rst) that user space maps
 * and decodes in bulk; a failed reserve (ring full) counts one lost event on this CPU.
 * SNUMAP_RING_PAGES is given by the loader (-D), a power of two.
 */
#include <uapi/linux/ptrace.h>
#include "sched_event.h"

/* What every probe returns. A tracepoint program's return value decides whether the kernel
 * goes on to deliver the event to the perf events open on that tracepoint -- all of them, not
 * only ours (kernel/trace/trace_event_perf.c, perf_trace_run_bpf_submit). Returning 0 would
 * silently blind `perf sched record` or any other tracer running at the same time. */
#define PASS 1

BPF_RINGBUF_OUTPUT(events, SNUMAP_RING_PAGES);
BPF_HASH(tracked, __u32, __u32, 65536);                /* tid -> tgid (0 = not known yet) */
BPF_HASH(names, __u32, struct snumap_task_name, 65536); /* tid -> comm at fork / exec */
BPF_PERCPU_ARRAY(lost, __u64, 1);

/* The last switch seen on this CPU, whatever the tasks: some switches are never traced by the
 * kernel (seen on 6.18 in a VM: out of the idle task), so a task can be switched out without
 * having been switched in. Such a switch-in is emitted at the last traced switch on the CPU
 * (the earliest it can have happened; only here is every switch seen, also those the filter
 * drops) and flagged with arg = -1; user space then moves it to the latest event proving the
 * task was not running yet (snumap_tui/trace/reconstruct.py, the perf backend's rule). */
struct last_switch {
    __u64 t_ns;
    __u32 next;
    __u32 used;      /* the traced tree has run on this CPU (its idle switches are kept) */
};
BPF_PERCPU_ARRAY(lastsw, struct last_switch, 1);

/* System-wide or one process tree is known when the program is compiled (the loader passes
 * -DSNUMAP_SYSTEM_WIDE=0/1), so it is a constant: the unused branch is compiled out and no
 * event pays a map lookup to ask. */
#ifndef SNUMAP_SYSTEM_WIDE
#define SNUMAP_SYSTEM_WIDE 0
#endif
static __always_inline int system_wide(void)
{
    return SNUMAP_SYSTEM_WIDE;
}

/* A record in the ring, or 0 with one more lost event counted on this CPU. */
static __always_inline struct snumap_sched_event *reserve_event(void)
{
    struct snumap_sched_event *e = events.ringbuf_reserve(sizeof(struct snumap_sched_event));
    if (!e) {
        int zero = 0;
        __u64 *n = lost.lookup(&zero);
        if (n)
            *n += 1;
    }
    return e;
}

static __always_inline void emit_at(__u64 t_ns, __u8 kind, __u32 cpu, __s32 tid, __s32 tid2,
                                    __s32 pid, __s32 pid2, __s64 arg)
{
    struct snumap_sched_event *e = reserve_event();
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
    /* No wakeup: user space never sleeps on this ring (a drain thread reads it every 10 ms),
     * and a notification is an irq_work -- a self-IPI, a VM exit on a guest -- for nothing
     * (Documentation/bpf/ringbuf.rst, BPF_RB_NO_WAKEUP). */
    events.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

static __always_inline void emit(__u8 kind, __u32 cpu, __s32 tid, __s32 tid2, __s32 pid,
                                 __s32 pid2, __s64 arg)
{
    emit_at(bpf_ktime_get_ns(), kind, cpu, tid, tid2, pid, pid2, arg);
}

static __always_inline __s32 known_tgid(__u32 *v)
{
    return (v && *v) ? (__s32)*v : -1;
}

TRACEPOINT_PROBE(sched, sched_switch)
{
    __u32 prev = args->prev_pid, next = args->next_pid;
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;   /* this runs in the context of prev */
    __u32 cpu = bpf_get_smp_processor_id();
    __u64 now = bpf_ktime_get_ns();
    __s32 next_tgid = -1;
    __u64 missed_t = 0;
    __u32 missed_from = 0;
    int zero = 0;
    struct last_switch *ls = lastsw.lookup(&zero);
    if (ls) {
        if (ls->t_ns && ls->next != prev && prev != 0) {
            missed_t = ls->t_ns;
            missed_from = ls->next;
        }
        ls->t_ns = now;
        ls->next = next;
    }
    __s32 prev_pid = prev ? (__s32)tgid : 0;
    if (!system_wide()) {
        /* Branches, not (!pv && !nv): clang would OR the two pointers, which the verifier
         * refuses. A partner outside the tree is marked SNUMAP_OUTSIDE (its run time is
         * "other", not a task's); on a CPU the tree has used, switches into and out of idle
         * are kept too, so that other work there ends where the CPU goes idle. */
        int prev_tracked = 0;
        __u32 *pv = tracked.lookup(&prev);
        if (pv) {
            prev_tracked = 1;
            if (*pv == 0 && prev != 0)
                *pv = tgid;
        }
        __u32 *nv = tracked.lookup(&next);
        int next_tracked = 0;
        if (!prev_tracked) {
            missed_t = 0;
            if (prev)
                prev_pid = SNUMAP_OUTSIDE;
        }
        if (nv) {
            next_tracked = 1;
            next_tgid = known_tgid(nv);
        } else {
            if (next)
                next_tgid = SNUMAP_OUTSIDE;
            if (!prev_tracked) {
                /* Neither side traced: keep it only as an idle edge on a CPU the tree used. */
                if (!ls || !ls->used || (prev != 0) == (next != 0))
                    return PASS;
            }
        }
        if (ls && (prev_tracked || next_tracked))
            ls->used = 1;
    }
    if (missed_t) {
        __s32 from_pid = missed_from ? -1 : 0;
        if (missed_from && !system_wide() && !tracked.lookup(&missed_from))
            from_pid = SNUMAP_OUTSIDE;
        emit_at(missed_t, SNUMAP_SWITCH, cpu, missed_from, prev, from_pid, prev_pid, -1);
    }
    emit_at(now, SNUMAP_SWITCH, cpu, prev, next, prev_pid, next ? next_tgid : 0,
            args->prev_state);
    return PASS;
}

#include "sched_comm.h"

/* Whether TID is traced (everything is system-wide), with its tgid in *TGID when known. */
static __always_inline int traced(__u32 tid, __s32 *tgid)
{
    *tgid = -1;
    if (system_wide())
        return 1;
    __u32 *v = tracked.lookup(&tid);
    if (!v)
        return 0;
    *tgid = known_tgid(v);
    return 1;
}

/* An event about one task (woken, migrated): kept when the task is traced, with its tgid. */
static __always_inline int task_event(__u8 kind, __u32 cpu, __u32 tid, __s64 arg)
{
    __s32 tgid;
    if (traced(tid, &tgid))
        emit(kind, cpu, tid, 0, tgid, -1, arg);
    return PASS;
}

/* __set_task_comm(): prctl(PR_SET_NAME), pthread_setname_np, exec; the task renamed need not
 * be the current one. */
TRACEPOINT_PROBE(task, task_rename)
{
    __u32 tid = args->pid;
    __s32 tgid;
    if (!traced(tid, &tgid))
        return PASS;
    char name[16] = {};
    bpf_probe_read_kernel(name, sizeof(name), args->newcomm);
    emit_comm(tid, tgid, name);
    return PASS;
}

TRACEPOINT_PROBE(sched, sched_wakeup)
{
    return task_event(SNUMAP_WAKEUP, args->target_cpu, args->pid, 0);
}

TRACEPOINT_PROBE(sched, sched_wakeup_new)
{
    return task_event(SNUMAP_WAKEUP_NEW, args->target_cpu, args->pid, 0);
}

TRACEPOINT_PROBE(sched, sched_migrate_task)
{
    return task_event(SNUMAP_MIGRATE, args->dest_cpu, args->pid, args->orig_cpu);
}

TRACEPOINT_PROBE(sched, sched_process_fork)
{
    __u32 parent = args->parent_pid, child = args->child_pid;
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;   /* runs in the forking thread */
    if (!system_wide()) {
        if (!tracked.lookup(&parent))
            return PASS;
        __u32 unknown = 0;
        tracked.update(&child, &unknown);
    }
    struct snumap_task_name n = {};
    n.ppid = tgid;
    bpf_get_current_comm(&n.comm, sizeof(n.comm));
    names.update(&child, &n);
    emit(SNUMAP_FORK, bpf_get_smp_processor_id(), parent, child, tgid, -1, 0);
    emit_comm(child, -1, n.comm);           /* the child starts with its parent's name */
    return PASS;
}

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tid = (__u32)id, tgid = id >> 32;
    if (!system_wide() && !tracked.lookup(&tid))
        return PASS;
    struct snumap_task_name n = {};
    n.tgid = tgid;
    bpf_get_current_comm(&n.comm, sizeof(n.comm));
    names.update(&tid, &n);
    emit(SNUMAP_EXEC, bpf_get_smp_processor_id(), tid, 0, tgid, -1, 0);
    return PASS;
}

TRACEPOINT_PROBE(sched, sched_process_exit)
{
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tid = (__u32)id, tgid = id >> 32;
    /* The tid stays tracked: its last sched_switch comes after this; user space removes it
     * one read later. */
    if (!system_wide() && !tracked.lookup(&tid))
        return PASS;
    emit(SNUMAP_EXIT, bpf_get_smp_processor_id(), tid, 0, tgid, -1, 0);
    return PASS;
}
