/* Two parallel regions: a compute loop that scales, and one serialised by a critical section
 * taken once per iteration (N/4 times in all: a million at the default N), the flood of short
 * calls that region probes must sum in the kernel (tests/test_regions_flood.py, bench). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
static double compute(long n) {
    double s = 0;
    #pragma omp parallel for reduction(+:s) schedule(static)
    for (long i = 0; i < n; i++) { double x = i * 1e-9; for (int k = 0; k < 40; k++) x = x * 0.999 + 1e-7; s += x; }
    return s;
}
static double serialised(long n) {
    double s = 0;
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (long i = 0; i < n; i++) {
            #pragma omp critical
            { double x = i * 1e-9; for (int k = 0; k < 40; k++) x = x * 0.999 + 1e-7; s += x; }
        }
    }
    return s;
}
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 4000000;
    double t0 = omp_get_wtime();
    double a = compute(n * 8), b = serialised(n / 4);
    printf("threads %d wall %.3f sum %.3f\n", omp_get_max_threads(), omp_get_wtime() - t0, a + b);
    return 0;
}
