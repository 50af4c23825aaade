/* A parallel region that computes, then one whose threads take `#pragma omp critical` N times
 * in all (16 M at the default N) around a tiny update: the flood of very short calls that
 * region probes must not trap one by one (tests/test_regions_budget.py,
 * bench/observer_critical.py). Prints each phase's wall time, timed by the program itself. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
static double compute(long n) {
    double s = 0;
    #pragma omp parallel for reduction(+:s) schedule(static)
    for (long i = 0; i < n; i++) { double x = i * 1e-9; for (int k = 0; k < 40; k++) x = x * 0.999 + 1e-7; s += x; }
    return s;
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
    long work = argc > 2 ? atol(argv[2]) : 4000000;
    double t0 = omp_get_wtime();
    double a = compute(work);
    double t1 = omp_get_wtime();
    double b = critical(n);
    double t2 = omp_get_wtime();
    printf("threads %d compute %.6f critical %.6f wall %.6f sum %.0f\n", omp_get_max_threads(),
           t1 - t0, t2 - t1, t2 - t0, a * 0 + b);
    return 0;
}
