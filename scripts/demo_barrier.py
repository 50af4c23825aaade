"""A small parallel program for the replay screenshots: three processes spin for 120 ms, then
meet at a barrier, six times -- the synchronisation gaps show in the core-vs-time view."""

from __future__ import annotations

import multiprocessing as mp
import time


def worker(barrier: mp.synchronize.Barrier, rounds: int) -> None:
    for _ in range(rounds):
        end = time.process_time() + 0.12
        while time.process_time() < end:
            pass
        barrier.wait()


if __name__ == "__main__":
    n, rounds = 3, 6
    barrier = mp.Barrier(n)
    procs = [mp.Process(target=worker, args=(barrier, rounds)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
