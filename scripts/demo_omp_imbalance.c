/* The OpenMP program of screenshots/replay-regions.svg: per iteration a balanced parallel
 * region and an imbalanced one (thread 0 works 12x longer), then a region with an explicit
 * barrier. Built and recorded by scripts/replay_screenshots.sh. */
#include <omp.h>
#include <unistd.h>

static volatile double sink;

static void spin(double ms)
{
    double t0 = omp_get_wtime();
    while ((omp_get_wtime() - t0) * 1e3 < ms)
        sink += 1.0;
}

int main(void)
{
    for (int i = 0; i < 6; i++) {
        #pragma omp parallel num_threads(2)
        spin(15);
        #pragma omp parallel num_threads(2)
        spin(omp_get_thread_num() == 0 ? 60 : 5);
        usleep(10000);              /* serial part */
    }
    #pragma omp parallel num_threads(2)
    {
        spin(omp_get_thread_num() == 0 ? 30 : 5);
        #pragma omp barrier
        spin(10);
    }
    return 0;
}
