/* emit_comm(), shared by the two builds of the scheduler tracer (bpf/sched.bpf.c for libbpf,
 * bpf/sched.c for bcc). Each defines its own emit_at() (its ring or rings) and includes this
 * header after it. */
#ifndef SNUMAP_SCHED_COMM_H
#define SNUMAP_SCHED_COMM_H

/* A task's name from now on (sched_event.h SNUMAP_COMM; events.py COMM): its 16 bytes in
 * arg (0-7), tid2 (8-11) and pid2 (12-15). */
static __always_inline void emit_comm(__u32 tid, __s32 tgid, const char *comm)
{
    __s64 head;
    __s32 mid, tail;
    __builtin_memcpy(&head, comm, 8);
    __builtin_memcpy(&mid, comm + 8, 4);
    __builtin_memcpy(&tail, comm + 12, 4);
    emit_at(bpf_ktime_get_ns(), SNUMAP_COMM, bpf_get_smp_processor_id(), tid, mid, tgid, tail,
            head);
}

#endif
