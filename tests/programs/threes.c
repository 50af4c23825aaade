/* Three threads that name themselves (pthread_setname_np) and do one kind of work each, for
 * comparing snumap's per-thread figures with perf stat --per-thread and with the kernel's own
 * per-thread counters on the same run (tests/test_fidelity.py):
 *
 *   t-spin   burns SPIN_MS of its own CPU time
 *   t-fault  touches FAULT_MB of fresh anonymous pages (one minor fault per 4 KiB page)
 *   t-sleep  sleeps SLEEPS x 2 ms (nanosleep)
 *
 * usage: threes PIDFILE GATEFILE
 * The threads are created and named, then wait at a barrier until GATEFILE exists (so that
 * perf stat -p can attach to all of them first). Each thread snapshots its counters from
 * /proc/thread-self (schedstat: run time; status: voluntary and nonvoluntary context
 * switches; stat: minor and major faults) right after the barrier and again when its work
 * is done, and main prints the differences, one line per thread, with the CLOCK_MONOTONIC
 * times before and after each snapshot (the window the /proc figures cover lies between):
 *   NAME TID RUN_NS CTXSW MINFLT MAJFLT BEGIN_T0 BEGIN_T1 END_T0 END_T1
 * and "gate T_NS" (CLOCK_MONOTONIC when the barrier opened). Every buffer is touched before
 * the barrier, so reading /proc after it faults no page in.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPIN_MS 300L
#define FAULT_MB 64L
#define SLEEPS 400

struct figures { long long run_ns, vcsw, nvcsw, minflt, majflt, t0, t1; };
struct worker {
    const char *name;
    pid_t tid;
    struct figures begin, end;
    char buf[4096];
};

static pthread_barrier_t gate;
static struct worker workers[3] = {{"t-spin"}, {"t-fault"}, {"t-sleep"}};

static long long now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long slurp(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    long n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0) n = 0;
    buf[n] = 0;
    return n;
}

static long long field_after(const char *text, const char *key) {
    const char *p = strstr(text, key);
    return p ? atoll(p + strlen(key)) : -1;
}

/* proc(5): /proc/thread-self/schedstat "run_ns wait_ns slices"; status
 * voluntary_ctxt_switches / nonvoluntary_ctxt_switches; stat fields 10 (minflt) and 12
 * (majflt), counted after the ")" that ends the name. */
static void snapshot(struct worker *w, struct figures *f) {
    f->t0 = now_ns(CLOCK_MONOTONIC);
    slurp("/proc/thread-self/schedstat", w->buf, sizeof w->buf);
    f->run_ns = atoll(w->buf);
    slurp("/proc/thread-self/status", w->buf, sizeof w->buf);
    f->vcsw = field_after(w->buf, "\nvoluntary_ctxt_switches:");
    f->nvcsw = field_after(w->buf, "\nnonvoluntary_ctxt_switches:");
    slurp("/proc/thread-self/stat", w->buf, sizeof w->buf);
    char *p = strrchr(w->buf, ')');
    long long v[12] = {0};
    for (int i = 0; p && i < 10; i++) {           /* fields 3..12 */
        p = strchr(p + 1, ' ');
        if (p) v[i] = atoll(p + 1);
    }
    f->minflt = v[7];
    f->majflt = v[9];
    f->t1 = now_ns(CLOCK_MONOTONIC);
}

static void *work(void *arg) {
    struct worker *w = arg;
    w->tid = (pid_t)syscall(SYS_gettid);
    pthread_setname_np(pthread_self(), w->name);
    snapshot(w, &w->begin);                       /* touches the buffers and the stack */
    pthread_barrier_wait(&gate);
    snapshot(w, &w->begin);
    if (w == &workers[0]) {
        long long until = now_ns(CLOCK_THREAD_CPUTIME_ID) + SPIN_MS * 1000000LL;
        volatile double sink = 0;
        while (now_ns(CLOCK_THREAD_CPUTIME_ID) < until) sink += 1.0;
    } else if (w == &workers[1]) {
        long pages = FAULT_MB * 256;
        char *m = mmap(NULL, pages * 4096, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        for (long i = 0; i < pages; i++) m[i * 4096] = 1;
    } else {
        struct timespec two = {0, 2000000};
        for (int i = 0; i < SLEEPS; i++) nanosleep(&two, NULL);
    }
    snapshot(w, &w->end);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: threes PIDFILE GATEFILE\n");
        return 2;
    }
    pthread_t th[3];
    pthread_barrier_init(&gate, NULL, 4);
    for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, work, &workers[i]);
    FILE *pf = fopen(argv[1], "w");
    if (!pf) return 1;
    fprintf(pf, "%d\n", (int)getpid());
    fclose(pf);
    struct timespec ms = {0, 1000000};
    while (access(argv[2], F_OK) != 0) nanosleep(&ms, NULL);
    long long t_gate = now_ns(CLOCK_MONOTONIC);
    pthread_barrier_wait(&gate);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    printf("gate %lld\n", t_gate);
    for (int i = 0; i < 3; i++) {
        struct worker *w = &workers[i];
        printf("%s %d %lld %lld %lld %lld %lld %lld %lld %lld\n", w->name, (int)w->tid,
               w->end.run_ns - w->begin.run_ns,
               (w->end.vcsw + w->end.nvcsw) - (w->begin.vcsw + w->begin.nvcsw),
               w->end.minflt - w->begin.minflt, w->end.majflt - w->begin.majflt,
               w->begin.t0, w->begin.t1, w->end.t0, w->end.t1);
    }
    return 0;
}
