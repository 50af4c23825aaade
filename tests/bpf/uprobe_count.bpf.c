/* A test program for the libbpf binding (tests/test_libbpf_binding.py): counts calls of the
 * probed function per tgid, entry and return separately, and sends one record per call through
 * a ring buffer. Compiled by the test with scripts/build_bpf.py's command. */
#include "kernel_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

const volatile __u64 snumap_test_tag = 0;

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, __u64);
} calls SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, __u64);
} returns SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 1 << 16);
} records SEC(".maps");

struct record {
    __u64 tag;
    __u32 tgid;
    __u32 is_return;
};

static __always_inline void count(void *map, int is_return)
{
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    __u64 one = 1, *n = bpf_map_lookup_elem(map, &tgid);
    if (n)
        __sync_fetch_and_add(n, 1);
    else
        bpf_map_update_elem(map, &tgid, &one, BPF_NOEXIST);
    struct record *r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
    if (!r)
        return;
    r->tag = snumap_test_tag;
    r->tgid = tgid;
    r->is_return = is_return;
    bpf_ringbuf_submit(r, 0);
}

SEC("uprobe")
int BPF_KPROBE(on_entry)
{
    count(&calls, 0);
    return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(on_return)
{
    count(&returns, 1);
    return 0;
}
