#!/usr/bin/python3
"""sandbox-critical-path.py - where one Forkbox.run() spends its time, step by step.

The daemon must run with FORKBOX_TRACE=TRACE (its service and every sandbox's init append
"PID NANOSECONDS LABEL" lines, CLOCK_MONOTONIC); this client adds its own marks around each
call to the same file and prints, per mark, the median time since the call began:

    FORKBOX_TRACE=/dev/shm/t forkbox daemon --socket /dev/shm/s &
    bench/sandbox-critical-path.py [--session] /dev/shm/s /dev/shm/t [RUNS] [CMD]

RUNS (default 100) calls of run(CMD) (default "true"), PAUSE_S (environment, default 0.2)
apart so the pool is refilled and the daemon idle, as an agent waiting for its model leaves
it. With --session, the runs are a session's (Forkbox.create(), then sb.run(CMD)). Use Debian's /usr/bin/python3; the SDK is imported from python/ beside this file.
"""
import collections
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from forkbox import Forkbox  # noqa: E402


def main() -> None:
    args = sys.argv[1:]
    session = "--session" in args
    args = [a for a in args if a != "--session"]
    if len(args) < 2:
        sys.exit(__doc__)
    sock, trace = args[0], args[1]
    runs = int(args[2]) if len(args) > 2 else 100
    cmd = args[3] if len(args) > 3 else "true"
    pause = float(os.environ.get("PAUSE_S", "0.2"))
    client = Forkbox(socket=sock)
    if session:
        client = client.create()
    fd = os.open(trace, os.O_WRONLY | os.O_APPEND)

    def mark(label: str) -> None:
        os.write(fd, b"%d %d %s\n" % (os.getpid(), time.clock_gettime_ns(time.CLOCK_MONOTONIC), label.encode()))

    for _ in range(10):  # the pool of this kind made, the daemon's pages touched
        client.run(cmd)
        time.sleep(pause)
    os.ftruncate(fd, 0)
    for _ in range(runs):
        time.sleep(pause)
        mark("client: call")
        client.run(cmd)
        mark("client: returned")
    os.close(fd)
    if session:
        client.close()

    lines = sorted((int(t), label) for _, t, label in (line.split(None, 2) for line in open(trace).read().splitlines()))
    calls, current = [], None
    for t, label in lines:
        if label == "client: call":
            current = [(t, label)]
            calls.append(current)
        elif current is not None:
            current.append((t, label))
    since_call = collections.defaultdict(list)
    for call in calls:
        start, seen = call[0][0], collections.Counter()
        for t, label in call:
            seen[label] += 1
            key = label if seen[label] == 1 else "%s #%d" % (label, seen[label])
            since_call[key].append((t - start) / 1000)
    print("%-34s %5s %10s" % ("mark", "runs", "median us"))
    for key in sorted(since_call, key=lambda k: statistics.median(since_call[k])):
        print("%-34s %5d %10.0f" % (key, len(since_call[key]), statistics.median(since_call[key])))


if __name__ == "__main__":
    main()
