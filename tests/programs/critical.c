/* A parallel region that computes, then one whose threads take `#pragma omp critical` N times
 * in all (16 M at the default N) around a tiny update: the flood of very short calls that
 * region probes must not trap one by one (tests/test_regions_budget.py,
 * bench/observer_critical.py). Prints each phase's wall time, timed by the program itself. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
static double compute(long n) {
    double total = 0;
    #pragma omp parallel for reduction(+:total) schedule(static)
    for (long i = 0; i < n; i++) {
        double v = 1.0 + i % 97;
        for (int k = 0; k < 32; k++)
            v = v * 0.5 + 1.0 / v;      /* converges to sqrt(2): work that scales */
        total += v;
    }
    return total;
}
static double critical(long n) {
    double s = 0;
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        #pragma omp critical
        s += 1.0;
    }
    return s;
}
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 16000000;
    long work = argc > 2 ? atol(argv[2]) : 1500000;
    double t0 = omp_get_wtime();
    double a = compute(work);
    double t1 = omp_get_wtime();
    double b = critical(n);
    double t2 = omp_get_wtime();
    printf("threads %d compute %.6f critical %.6f wall %.6f sum %.0f\n", omp_get_max_threads(),
           t1 - t0, t2 - t1, t2 - t0, a * 0 + b);
    return 0;
}
