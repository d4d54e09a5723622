#!/usr/bin/env python3
"""What an fsync costs when the write grows the file, and by how much it writes (no SQLite).

Per file: 300 times (write N frames of 4,120 bytes, the size of a SQLite WAL frame with 4 KiB
pages, then fsync). Files of the three kinds are measured in turn, 7 each, and the median per
fsync printed:
  grow       each write appends past the file's end (a WAL growing: new blocks, new size)
  written    the file's blocks were written (zeros) and synced beforehand (a WAL rewritten in place)
  fallocate  the blocks were reserved with posix_fallocate (unwritten extents) and synced
Then, on written blocks, 1, 2, 6 and 12 frames per fsync.

Run: python3 benches/wal_growth.py [DIR]   (DIR: on the disk to measure; default target/wal_growth)
"""
import os
import statistics
import sys
import time

D = sys.argv[1] if len(sys.argv) > 1 else "target/wal_growth"
os.makedirs(D, exist_ok=True)
FRAME = 4096 + 24
OPS = 300


def run(mode, frames, i):
    path = f"{D}/{mode}-{frames}-{i}"
    if os.path.exists(path):
        os.remove(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    size = FRAME * frames * OPS
    if mode == "written":
        os.write(fd, b"\0" * size)
        os.fsync(fd)
    elif mode == "fallocate":
        os.posix_fallocate(fd, 0, size)
        os.fsync(fd)
    buf = b"x" * (FRAME * frames)
    start = time.perf_counter()
    for k in range(OPS):
        os.pwrite(fd, buf, k * FRAME * frames)
        os.fsync(fd)
    per = (time.perf_counter() - start) / OPS
    os.close(fd)
    os.remove(path)
    return per


def report(label, times):
    print(f"{label}: median {statistics.median(times) * 1e6:.1f} µs per fsync "
          f"({' '.join(f'{t * 1e6:.0f}' for t in times)})")


kinds = {m: [] for m in ["grow", "written", "fallocate"]}
for i in range(7):
    for m in kinds:
        kinds[m].append(run(m, 5, i))
for m, times in kinds.items():
    report(f"5 frames, {m}", times)
sizes = {n: [] for n in [1, 2, 6, 12]}
for i in range(5):
    for n in sizes:
        sizes[n].append(run("written", n, i))
for n, times in sizes.items():
    report(f"{n} frames, written", times)
