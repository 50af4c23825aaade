/* The kernel types snumap's CO-RE programs use: a hand-written subset instead of a full
 * vmlinux.h (bpftool btf dump file /sys/kernel/btf/vmlinux format c, ~135k lines that depend on
 * the machine they were dumped on).
 *
 * Every struct carries preserve_access_index: clang then records each field access as a CO-RE
 * relocation (the field's name and type, not its offset), and libbpf resolves it at load time
 * against the running kernel's BTF (/sys/kernel/btf/vmlinux). So only the fields used need to
 * be declared, in any order, and the object runs on any kernel with BTF whose fields have these
 * names. Field names are those of include/linux/sched.h, arch/x86/include/asm/ptrace.h and
 * include/uapi/linux/bpf.h; a `___suffix` flavour names an older layout of the same struct
 * (libbpf ignores the suffix when matching, see bpf_core_read.h).
 *
 * Adding a program: declare the fields it reads here (with preserve_access_index), then
 * `python3 scripts/build_bpf.py` (docs/bpf.md).
 */
#ifndef SNUMAP_KERNEL_TYPES_H
#define SNUMAP_KERNEL_TYPES_H

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
typedef int pid_t;
enum { false = 0, true = 1 };

/* include/uapi/linux/bpf.h */
enum bpf_map_type {
    BPF_MAP_TYPE_HASH = 1,
    BPF_MAP_TYPE_ARRAY = 2,
    BPF_MAP_TYPE_PERF_EVENT_ARRAY = 4,
    BPF_MAP_TYPE_PERCPU_HASH = 5,
    BPF_MAP_TYPE_PERCPU_ARRAY = 6,
    BPF_MAP_TYPE_LRU_HASH = 9,
    BPF_MAP_TYPE_LRU_PERCPU_HASH = 10,
    BPF_MAP_TYPE_ARRAY_OF_MAPS = 12,
    BPF_MAP_TYPE_RINGBUF = 27,
};
enum { BPF_ANY = 0, BPF_NOEXIST = 1, BPF_EXIST = 2 };
enum { BPF_RB_NO_WAKEUP = 1, BPF_RB_FORCE_WAKEUP = 2 };
enum { BPF_RB_AVAIL_DATA = 0, BPF_RB_PROD_POS = 3 };   /* bpf_ringbuf_query's flags */
/* what bpf_perf_event_read_value fills (include/uapi/linux/bpf.h) */
struct bpf_perf_event_value {
    __u64 counter;
    __u64 enabled;
    __u64 running;
};

/* include/linux/sched.h: thread_info holds `cpu` with CONFIG_THREAD_INFO_IN_TASK since 5.16;
 * 5.3-5.15 kept it in task_struct (the ___cpu flavour below). */
struct thread_info {
    __u32 cpu;
} __attribute__((preserve_access_index));

struct task_struct {
    struct thread_info thread_info;
    unsigned int __state;       /* 5.14+; `long state` before (task_struct___pre514) */
    int exit_state;
    pid_t pid;
    pid_t tgid;
    char comm[16];
} __attribute__((preserve_access_index));

struct task_struct___pre514 {
    long state;
} __attribute__((preserve_access_index));

struct task_struct___cpu {
    unsigned int cpu;
} __attribute__((preserve_access_index));

/* include/linux/binfmts.h, fs.h: the file an exec runs (the interpreter's, for a script), as
 * the inode number and device that stat(2) reports for it (s_dev in the kernel's encoding:
 * major << 20 | minor). */
struct super_block {
    __u32 s_dev;
} __attribute__((preserve_access_index));

struct inode {
    unsigned long i_ino;
    struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
    struct inode *f_inode;
} __attribute__((preserve_access_index));

struct linux_binprm {
    struct file *file;
} __attribute__((preserve_access_index));

/* arch/x86/include/asm/ptrace.h (x86_64), for uprobe/kprobe arguments via bpf_tracing.h
 * (PT_REGS_PARM1(ctx) etc. with -D__TARGET_ARCH_x86). */
struct pt_regs {
    unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
    unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
} __attribute__((preserve_access_index));

/* arch/arm64/include/uapi/asm/ptrace.h, for -D__TARGET_ARCH_arm64 builds. */
struct user_pt_regs {
    __u64 regs[31];
    __u64 sp;
    __u64 pc;
    __u64 pstate;
} __attribute__((preserve_access_index));

#endif
