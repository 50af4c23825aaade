/* Ten short peaks of resident memory: each maps PEAK_MB of fresh pages, touches them all and
 * unmaps them again within a few tens of ms -- shorter than snumap's sample interval, so
 * samples of the RSS mostly miss them, while the kernel's own high-water mark (VmHWM) keeps
 * the true peak (tests/test_fidelity.py). Then it waits a little (so that a sample is taken
 * after the last peak) and prints its VmHWM in bytes as the kernel gives it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PEAK_MB 64L
#define PEAKS 10

int main(void) {
    struct timespec gap = {0, 150000000};
    for (int k = 0; k < PEAKS; k++) {
        size_t size = PEAK_MB << 20;
        char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return 1;
        for (size_t i = 0; i < size; i += 4096) m[i] = 1;
        munmap(m, size);
        nanosleep(&gap, NULL);
    }
    struct timespec rest = {0, 400000000};
    nanosleep(&rest, NULL);
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) printf("vmhwm %lld\n", atoll(line + 6) * 1024LL);
    if (f) fclose(f);
    return 0;
}
