/* The OpenMP program of screenshots/replay-regions-critical.svg: parallel regions whose
 * threads enter a critical section thousands of times, thread 1 with less work (it waits at
 * the region's end), and a serial part between them. Built and recorded by
 * scripts/replay_screenshots.sh. */
#include <omp.h>
#include <stdio.h>

static volatile double sink;

static void spin(double ms)
{
    double t0 = omp_get_wtime();
    while ((omp_get_wtime() - t0) * 1e3 < ms)
        sink += 1.0;
}

int main(void)
{
    double total = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        #pragma omp parallel num_threads(2)
        {
            int n = omp_get_thread_num() == 0 ? 2000 : 1200;
            for (int i = 0; i < n; i++) {
                spin(0.1);
                #pragma omp critical
                total += 1.0;
            }
        }
        spin(60);                   /* serial part */
    }
    printf("%.0f\n", total);
    return 0;
}
