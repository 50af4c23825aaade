/* The one record the eBPF scheduler tracer (bpf/sched.c) hands to user space.
 *
 * This header is the single description of the layout: snumap_tui/trace/bpf_layout.py parses
 * the struct below (field types and names, in order, natural alignment) to build the numpy
 * dtype it decodes the ring buffer with, and checks the size against SNUMAP_EVENT_SIZE.
 * Keep to the types __u64 __s64 __u32 __s32 __u8 and one field per line.
 *
 * Field meanings follow snumap_tui/trace/events.py (the EVENT_DTYPE contract); the kind
 * numbers below must equal the constants there (a test checks it).
 */
#ifndef SNUMAP_SCHED_EVENT_H
#define SNUMAP_SCHED_EVENT_H

#define SNUMAP_SWITCH 1
#define SNUMAP_WAKEUP 2
#define SNUMAP_WAKEUP_NEW 3
#define SNUMAP_MIGRATE 4
#define SNUMAP_FORK 5
#define SNUMAP_EXEC 6
#define SNUMAP_EXIT 7
/* A task's name from this moment on (task_rename: prctl, pthread_setname_np, the comm file,
 * exec; and a forked child's inherited name). Only in the ring: user space turns it into a
 * TaskInfo with this time and drops the record. tid/pid: the task and its tgid; the 16 bytes
 * of the name (NUL-padded) are carried in arg (bytes 0-7), tid2 (8-11) and pid2 (12-15). */
#define SNUMAP_COMM 9

#define SNUMAP_OUTSIDE (-2)   /* pid/pid2 of a switch partner outside the traced tree */

#define SNUMAP_EVENT_SIZE 40

struct snumap_sched_event {
    __u64 t_ns;     /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
    __s64 arg;      /* switch: prev_state; migrate: orig cpu */
    __u32 cpu;      /* the CPU it happened on; wakeup: target cpu; migrate: dest cpu */
    __s32 tid;
    __s32 tid2;
    __s32 pid;
    __s32 pid2;
    __u8 kind;
    __u8 pad[3];
};

/* What user space learns about a task's name without a Python call per event: filled at
 * fork (the parent's comm, which the child inherits) and exec (the new comm). */
struct snumap_task_name {
    __u32 tgid;     /* 0 = not known yet */
    __u32 ppid;     /* the forking thread's tid, 0 if not known */
    char comm[16];
};

/* Counters per run interval (docs/format.md "Thread counters"): a second array of rings
 * carries, for each interval a traced task ran on a CPU, the deltas of the events the loader
 * opened on that CPU (perf_event_open, in the `counters` perf event array). The head below is
 * followed by N u64 counter deltas, then the enabled-time and the running-time deltas (ns;
 * running < enabled: the kernel multiplexed the event) of the first M events (the hardware
 * ones; software events are never multiplexed). tid = SNUMAP_OUTSIDE: the deltas of
 * untraced tasks on the CPU since the last such record, summed. */
#define SNUMAP_MAX_COUNTERS 8
#define SNUMAP_COUNTER_HEAD_SIZE 32

struct snumap_counter_head {
    __u64 t_start;  /* the interval: switch-in .. switch-out, bpf_ktime_get_ns() */
    __u64 t_end;
    __s32 tid;
    __s32 pid;
    __u32 cpu;
    __u32 n;        /* events that follow (the loader's snumap_ncounters) */
};

#endif
