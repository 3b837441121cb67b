#!/usr/bin/env python3
"""critical-path.py - where a container start's milliseconds go, from FORKBOX_TRACE files.

With FORKBOX_TRACE=FILE every forkbox process (create, start, run, and the container's init up
to its execve) appends "PID NANOSECONDS LABEL" lines (CLOCK_MONOTONIC) to FILE. This reads
such files, puts the lines of each container run together and prints a histogram of each span:

  create critical path        the create process's "main" to its "create: done"
  request to first instruction
                              the create process's request mark (--request-mark; by default
                              the first of "create: zygote*", "create: cgroups made",
                              "create: clone" it wrote) to init's "init: exec", minus the
                              time init sat blocked on the exec fifo waiting for `start`
                              ("init: ready" to "init: started"): the work on the path, not
                              the wait for the caller. When the exec stub waits for `start`
                              (no "init: started": init execs it once create has recorded
                              it), from "init: ready" to "init: recorded"; the stub's own
                              exec and its wait are not traced. In zygote mode the daemon is asked
                              (take_warm_namespaces) after "create: cgroups made" and before
                              "create: clone", so "create: clone" alone would hide the
                              round trip to the daemon.
  start critical path         the start process's "main" to its "start: released"

usage: critical-path.py [--title T] [--request-mark LABEL] [--steps] TRACE...
  TRACE is a file or a directory of files. Simplest and exact: one file per container run.
  A file with several runs is split by time: each init and start goes with the latest create
  before it that has none yet. That is exact for runs one after another; for concurrent runs
  in one file it is a guess (init writes the pid it has in its own pid namespace, often 1,
  so the pid cannot tell which create cloned it) and a note says so, unless init's lines
  name their creator as "PID/CREATOR_PID" in the first column (then they are matched by it).
  --steps  also prints the median time between consecutive marks of each kind of process.

Labels are taken as they come: a process is "create", "start", "init" or "run" after the
prefix (before ':') of its labels, so marks added or renamed later only change --steps.
"""
import math
import re
import os
import statistics
import sys

CREATE_DONE = "create: done"
START_DONE = "start: released"
INIT_READY = "init: ready"
INIT_STARTED = "init: started"
INIT_RECORDED = "init: recorded"
INIT_EXEC = "init: exec"
REQUEST_MARKS = ("create: zygote", "create: cgroups made", "create: clone")


class Proc:
    """One process's marks, in the order written: [(ns, label)]."""

    def __init__(self, pid, owner=None):
        self.pid = pid
        self.owner = owner  # the forkbox process that cloned it, when the line says so
        self.marks = []
        self.seen = set()

    def role(self):
        kinds = {label.split(":", 1)[0] for _, label in self.marks if ":" in label}
        if "init" in kinds:
            return "init"
        if "create" in kinds:
            return "run" if "start" in kinds else "create"
        if "start" in kinds:
            return "start"
        return "other"

    def first(self, label):
        for ns, lab in self.marks:
            if lab == label:
                return ns
        return None

    def first_prefix(self, prefix):
        for ns, lab in self.marks:
            if lab.startswith(prefix):
                return ns
        return None

    def t0(self):
        return self.marks[0][0]


def read_processes(path):
    """Splits one file into process instances. A pid starts a new instance at "main" or when
    a label it already wrote comes again (init's pid is 1 in every container with a pid
    namespace, and pids are reused)."""
    current = {}
    procs = []
    with open(path, errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 2)
            if len(parts) != 3:
                continue
            # "PID/OWNER": a clone child (init) naming the forkbox process it came from.
            pid_field, _, owner = parts[0].partition("/")
            try:
                pid, ns = int(pid_field), int(parts[1])
                owner = int(owner) if owner else None
            except ValueError:
                continue
            label = parts[2]
            key = (pid, owner)
            p = current.get(key)
            if p is None or label == "main" or label in p.seen:
                p = Proc(pid, owner)
                current[key] = p
                procs.append(p)
            p.marks.append((ns, label))
            p.seen.add(label)
    return procs


class Run:
    def __init__(self, create):
        self.create = create
        self.inits = []  # the intermediate (when there is one) and init: one container
        self.start = None

    def init_first(self, label):
        for p in self.inits:
            t = p.first(label)
            if t is not None:
                return t
        return None


def group_runs(procs):
    """Returns ([Run], overlapping?): each init and start goes with the latest create
    (or run) that came before it and has none yet."""
    creators = sorted((p for p in procs if p.role() in ("create", "run")), key=Proc.t0)
    runs = [Run(c) for c in creators]
    exact = all(p.owner is not None for p in procs if p.role() == "init")
    overlap = not exact and any(creators[i + 1].t0() < (creators[i].first(CREATE_DONE) or creators[i].marks[-1][0])
                  for i in range(len(creators) - 1))
    for p in sorted((p for p in procs if p.role() == "init"), key=Proc.t0):
        owner = None
        for r in runs:
            clone = r.create.first("create: clone") or r.create.t0()
            if clone > p.t0():
                break
            if p.owner is not None and r.create.pid != p.owner:
                continue
            # An intermediate and its init: a second init instance of one run, allowed
            # only while the first has not reached exec.
            if not r.inits or all(q.first(INIT_EXEC) is None for q in r.inits):
                owner = r
        if owner:
            owner.inits.append(p)
    for p in sorted((p for p in procs if p.role() == "start"), key=Proc.t0):
        owner = None
        for r in runs:
            if r.create.role() == "run":
                continue
            done = r.create.first(CREATE_DONE)
            if done is None or done > p.t0():
                continue
            if r.start is None:
                owner = r
        if owner:
            owner.start = p
    return runs, overlap


def request_mark(create, wanted=None):
    if wanted:
        return create.first(wanted)
    for prefix in REQUEST_MARKS:
        t = create.first_prefix(prefix)
        if t is not None:
            return t
    return None


def spans(runs, wanted_request=None):
    """{span name: [microseconds]} over the runs that have the marks of that span."""
    out = {"create critical path": [], "request to first instruction": [], "start critical path": []}
    for r in runs:
        c = r.create
        main, done = c.first("main"), c.first(CREATE_DONE)
        if main is not None and done is not None:
            out["create critical path"].append((done - main) / 1e3)
        req = request_mark(c, wanted_request)
        exec_t = r.init_first(INIT_EXEC)
        ready, started = r.init_first(INIT_READY), r.init_first(INIT_STARTED)
        if started is None:
            started = r.init_first(INIT_RECORDED)
        if req is not None and exec_t is not None and ready is not None and started is not None:
            out["request to first instruction"].append((exec_t - req - (started - ready)) / 1e3)
        if r.start:
            main, released = r.start.first("main"), r.start.first(START_DONE)
            if main is not None and released is not None:
                out["start critical path"].append((released - main) / 1e3)
    return out


def load(paths, wanted_request=None):
    """Reads files and directories; returns (spans, steps source processes, notes)."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            files += sorted(os.path.join(path, n) for n in os.listdir(path)
                            if os.path.isfile(os.path.join(path, n)))
        else:
            files.append(path)
    runs, procs, notes = [], [], []
    for f in files:
        ps = read_processes(f)
        rs, overlap = group_runs(ps)
        if overlap:
            notes.append("%s: creates overlap in time; inits and starts matched to them by time" % f)
        runs += rs
        procs += ps
    return spans(runs, wanted_request), procs, runs, notes


def percentile(sorted_values, q):
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


# Bucket upper edges in microseconds: 1, 1.5, 2, 3, 5, 7 per decade.
def _edges():
    edges = []
    for decade in range(0, 8):
        for m in (1, 1.5, 2, 3, 5, 7):
            edges.append(m * 10 ** decade)
    return edges


EDGES = _edges()


def histogram(name, values, width=40):
    """Text lines: one per bucket from the first to the last one with samples."""
    if not values:
        return ["%s: no samples" % name]
    s = sorted(values)
    lines = ["%s: n=%d  median %.0f us  p90 %.0f us  p99 %.0f us  min %.0f  max %.0f" % (
        name, len(s), statistics.median(s), percentile(s, 0.9), percentile(s, 0.99), s[0], s[-1])]
    counts = [0] * (len(EDGES) + 1)
    for v in s:
        i = 0
        while i < len(EDGES) and v >= EDGES[i]:
            i += 1
        counts[i] += 1
    used = [i for i, n in enumerate(counts) if n]
    top = max(counts)
    for i in range(used[0], used[-1] + 1):
        lo = EDGES[i - 1] if i > 0 else 0
        hi = "%g" % EDGES[i] if i < len(EDGES) else "inf"
        bar = "#" * (math.ceil(width * counts[i] / top) if counts[i] else 0)
        lines.append("  %8g-%-8s %6d %s" % (lo, hi, counts[i], bar))
    return lines


def steps_label_figures():
    return re.compile(r"\s*\([^)]*\d[^)]*\)")


STEADY = steps_label_figures()


def steady_label(label):
    """A label without the figures some marks carry ("prefault: bulk (fault 6, ...)"), so
    that the same step of every run falls under one key."""
    return STEADY.sub("", label)


def steps(procs):
    """Median microseconds between consecutive marks, per kind of process."""
    deltas = {}
    order = {}
    for p in procs:
        role = p.role()
        for (t1, l1), (t2, l2) in zip(p.marks, p.marks[1:]):
            key = (role, steady_label(l1), steady_label(l2))
            deltas.setdefault(key, []).append((t2 - t1) / 1e3)
            order.setdefault(key, len(order))
    lines = []
    for key in sorted(deltas, key=lambda k: (k[0], order[k])):
        v = deltas[key]
        lines.append("  %-6s %-24s -> %-24s %8.0f us  (n=%d)" % (key[0], key[1], key[2], statistics.median(v), len(v)))
    return lines


def report(paths, title=None, wanted_request=None, with_steps=False, out=sys.stdout):
    sp, procs, runs, notes = load(paths, wanted_request)
    if title:
        print("== %s (%d runs) ==" % (title, len(runs)), file=out)
    for name, values in sp.items():
        for line in histogram(name, values):
            print(line, file=out)
    if with_steps:
        print("median between consecutive marks:", file=out)
        for line in steps(procs):
            print(line, file=out)
    for n in notes:
        print("note: " + n, file=out)
    return sp


def main(argv):
    title, wanted, with_steps, paths = None, None, False, []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(__doc__)
            return 0
        if a == "--title" and i + 1 < len(argv):
            title = argv[i + 1]
            i += 2
        elif a == "--request-mark" and i + 1 < len(argv):
            wanted = argv[i + 1]
            i += 2
        elif a == "--steps":
            with_steps = True
            i += 1
        elif a.startswith("-"):
            print("critical-path.py: unknown argument %s" % a, file=sys.stderr)
            return 2
        else:
            paths.append(a)
            i += 1
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    report(paths, title, wanted, with_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
