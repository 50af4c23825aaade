"""A process for the process view's tests and screenshot (`top`'s p, `top --batch -p`): 64 MiB
touched once by the main thread, then three named threads -- ``spin`` (on-CPU all the time),
``fault`` (maps and touches 8 MiB again and again: page faults) and ``wake`` (sleeps 2 ms at a
time: context switches) -- each printing ``NAME TID`` when it starts. Runs for 120 s."""

import mmap
import sys
import threading
import time

SAY = threading.Lock()        # one whole line at a time (print's parts interleave)


def named(name: str) -> None:
    tid = threading.get_native_id()
    with open(f"/proc/self/task/{tid}/comm", "w") as f:
        f.write(name)
    with SAY:
        sys.stdout.write(f"{name} {tid}\n")
        sys.stdout.flush()


def spin() -> None:
    named("spin")
    x = 0
    while True:
        x += 1


def fault() -> None:
    named("fault")
    while True:
        m = mmap.mmap(-1, 8 << 20)
        for i in range(0, 8 << 20, 4096):
            m[i] = 1
        m.close()
        time.sleep(0.02)


def wake() -> None:
    named("wake")
    while True:
        time.sleep(0.002)


buf = bytearray(64 << 20)
for i in range(0, len(buf), 4096):
    buf[i] = 1
for f in (spin, fault, wake):
    threading.Thread(target=f, daemon=True).start()
time.sleep(120)
