"""sandbox_bench.py - the timing loop of bench/sandbox.sh (run it through that script).

Sections (--sections, comma-separated):
  latency     one loop, subjects in a new random order every iteration (so drift, and whatever
              one subject leaves behind, hits all alike), each started on an idle daemon with
              its pool full (--no-settle: not waited for): forkbox sandboxes from Python (the SDK, and the protocol inline),
              from the C client and the CLI as processes, the same commands bare
              (posix_spawn + waitpid: the floor), under bwrap, under firejail, as `forkbox run`
              of an OCI bundle; then the python snippet through the SDK, bare and under bwrap;
              then the C client's own loop of back-to-back requests (in-process latency).
  watchdog    runs of a busy loop with timeout_ms: the overshoot past the deadline.
  throughput  2 concurrent clients for T seconds: sandboxes/s, and the daemon's CPU.
  sessions    alternating: run("true") in a session against one in a fresh sandbox; the warm
              Python's run of the snippet against bare python3 -c and python3 -c in a fresh
              sandbox; then fork(1) and fork(8) of sessions that wrote 1 KiB, 1 MiB, 64 MiB.
Everything is reported against the issue's targets; nothing is asserted (exit 0).
"""

import argparse
import json
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time

SNIPPET = "import math; print(math.factorial(20))"
SNIPPET_OUT = b"2432902008176640000\n"
# The sandbox's default environment (docs/sandbox-protocol.md); bare and wrapped commands get
# the same, so PATH finds the same programs (Debian's /usr/bin/python3).
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
       "TERM": "xterm", "LANG": "C.UTF-8"}
BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--tmpfs", "/tmp",
         "--proc", "/proc", "--dev", "/dev"]
FIREJAIL = ["firejail", "--quiet", "--noprofile", "--net=none"]
RECV_BUFFER = 128 * 1024

ap = argparse.ArgumentParser()
ap.add_argument("--socket", required=True)
ap.add_argument("--client", required=True, help="the C client (sandbox-client)")
ap.add_argument("--forkbox", required=True)
ap.add_argument("--bundle", help="busybox true bundle for `forkbox run` (none: no such subject)")
ap.add_argument("--state-root", help="forkbox --root of the `forkbox run` subject")
ap.add_argument("-n", type=int, default=200, help="timed iterations of the latency loop")
ap.add_argument("--firejail-n", type=int, default=50, help="timed firejail runs (spread over the loop)")
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--watchdog", type=int, default=200, help="watchdog runs")
ap.add_argument("--timeout-ms", type=int, default=500)
ap.add_argument("--seconds", type=float, default=10, help="throughput window per client kind")
ap.add_argument("--sections", default="latency,watchdog,throughput,sessions")
ap.add_argument("--fork-n", type=int, default=20, help="timed forks per size and count")
ap.add_argument("--label", default="root")
ap.add_argument("--no-settle", dest="settle", action="store_false",
                help="no wait for an idle daemon with a full pool before each timed run")
ap.add_argument("--pause-ms", type=float, default=0,
                help="then an idle pause (sleep) before each timed run, as an agent waiting for its model "
                     "leaves the machine: caches cool, CPUs idle; 0: none (the settle's polling keeps them warm)")
args = ap.parse_args()
sections = set(args.sections.split(","))

# --- the forkbox client: the SDK when importable, else the protocol inline ----------------

try:
    from forkbox import Forkbox  # PYTHONPATH: the tree's python/ (a copy of it)
    SDK = Forkbox(socket=args.socket, autostart=False)
    # The same calls without kept connections (the keep verb): a connect per call.
    SDK_PER_CALL = Forkbox(socket=args.socket, autostart=False, keep_connections=False)
    client_kind = "SDK (forkbox %s from %s)" % (
        getattr(sys.modules["forkbox"], "__version__", "?"), os.path.dirname(sys.modules["forkbox"].__file__))
except Exception as e:  # noqa: BLE001 - any failure to import means "not ready"
    SDK = SDK_PER_CALL = None
    client_kind = "inline protocol client (the SDK is not importable: %s: %s)" % (type(e).__name__, e)


def raw_exchange(verb, body, stdin=None):
    """One request by hand: connect, send (and stdin's frames), receive until the final message."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(args.socket)
        s.send(b"sandbox/1 " + verb.encode() + b"\n" + json.dumps(body).encode())
        if stdin is not None:
            for off in range(0, len(stdin), 65536):
                s.send(b"I" + stdin[off:off + 65536])
            s.send(b"E")
        out = []
        while True:
            m = s.recv(RECV_BUFFER)
            if not m:
                raise RuntimeError("the daemon closed the connection before the final message")
            tag = m[:1]
            if tag == b"1":
                out.append(m[1:])
            elif tag == b"X":
                res = json.loads(m[1:])
                res["stdout"] = b"".join(out)
                return res
            elif tag == b"!":
                raise RuntimeError("daemon error: " + m[1:].decode(errors="replace"))
    finally:
        s.close()


def raw_run(cmd=None, argv=None, timeout_ms=None):
    body = {"argv": ["/bin/sh", "-c", cmd] if cmd is not None else list(argv)}
    if timeout_ms is not None:
        body["timeout_ms"] = timeout_ms
    r = raw_exchange("run", body)
    return r["exit_code"], r["stdout"], r["duration_ms"], r["timed_out"], r.get("cpu_ms")


def fb_run(cmd=None, argv=None, timeout_ms=None, client=None, **options):
    """(exit_code, stdout bytes, daemon's duration_ms, timed_out, cpu_ms) of one sandbox."""
    client = client or SDK
    if client is None:
        return raw_run(cmd, argv, timeout_ms)
    r = client.run(cmd, argv=argv, timeout_ms=timeout_ms, **options)
    return r.exit_code, r.stdout_bytes, r.duration_ms, r.timed_out, getattr(r, "cpu_ms", None)


def info():
    return SDK.info() if SDK is not None else raw_exchange("info", {})


# --- subjects -------------------------------------------------------------------------------

perf = time.perf_counter_ns
devnull_actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)]


def which(name):
    for d in ENV["PATH"].split(":"):
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return None


def spawn(argv, expect=None):
    """posix_spawn + waitpid, the time from before the spawn to after the wait; stdout to
    /dev/null, or (expect: the bytes it must print) to a pipe read to its end."""
    path = argv[0] if "/" in argv[0] else which(argv[0])
    t0 = perf()
    if expect is None:
        pid = os.posix_spawn(path, argv, ENV, file_actions=devnull_actions)
        _, status = os.waitpid(pid, 0)
        t1 = perf()
        out = None
    else:
        r, w = os.pipe()
        pid = os.posix_spawn(path, argv, ENV, file_actions=[devnull_actions[0], (os.POSIX_SPAWN_DUP2, w, 1),
                                                              devnull_actions[2]])
        os.close(w)
        chunks = []
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        t1 = perf()
        out = b"".join(chunks)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError("exit %d" % code)
    if expect is not None and out != expect:
        raise RuntimeError("printed %r, not %r" % (out, expect))
    return t1 - t0


def diagnose(argv):
    """A failing spawned subject's own words (run once more, stderr captured)."""
    try:
        p = subprocess.run(argv, env=ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=30)
        return "exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace").strip()[-300:])
    except Exception as e:  # noqa: BLE001
        return str(e)


class Subject:
    def __init__(self, name, group, fn, argv=None, sparse=False):
        self.name, self.group, self.fn, self.argv, self.sparse = name, group, fn, argv, sparse
        self.samples, self.failures, self.error = [], 0, None


true_durations = []  # the daemon's duration_ms of run("true"): release to exit of a no-op


def sdk_subject(cmd=None, argv=None, expect=b"", durations=None, client=None, **options):
    def fn():
        t0 = perf()
        code, out, duration_ms, _, _ = fb_run(cmd, argv, client=client, **options)
        t1 = perf()
        if durations is not None:
            durations.append(duration_ms)
        if code != 0:
            raise RuntimeError("exit %d" % code)
        if out != expect:
            raise RuntimeError("printed %r, not %r" % (out, expect))
        return t1 - t0
    return fn


def raw_subject(cmd):
    def fn():
        t0 = perf()
        code, out, _, _, _ = raw_run(cmd)
        t1 = perf()
        if code != 0 or out != b"":
            raise RuntimeError("exit %d, printed %r" % (code, out))
        return t1 - t0
    return fn


seq = [0]


def forkbox_run_argv():
    seq[0] += 1
    return [args.forkbox, "--root", args.state_root, "run", "--bundle", args.bundle,
            "sbx-%d-%d" % (os.getpid(), seq[0])]


def spawn_subject(argv_fn, expect=None):
    return lambda: spawn(argv_fn(), expect)


notes = []
tools = {t: which(t) for t in ("bwrap", "firejail")}
SH_TRUE = ["/bin/sh", "-c", "true"]
PY_SH = ["/bin/sh", "-c", "python3 -c '%s'" % SNIPPET]

subjects = [
    Subject('SDK run("true")' if SDK else 'py run("true")', "true", sdk_subject("true", durations=true_durations)),
    Subject('SDK run(argv=["true"])' if SDK else 'py run(argv=["true"])', "true", sdk_subject(argv=["true"])),
]
if SDK is not None:
    # Stdin keeps a line from the warm shell (README, "The warm shell"): its /bin/sh starts
    # for it, as every line's did before.
    subjects.append(Subject('SDK run("true", stdin=b""): no warm shell', "true", sdk_subject("true", stdin=b"")))
    subjects.append(Subject('SDK run("true"), a connect per call', "true", sdk_subject("true", client=SDK_PER_CALL)))
    subjects.append(Subject("py inline protocol, sh -c true", "true", raw_subject("true")))
subjects += [
    Subject("C client process, sh -c true", "true", spawn_subject(lambda: [args.client, args.socket, "1"] + SH_TRUE),
            [args.client, args.socket, "1"] + SH_TRUE),
    Subject("forkbox sandbox CLI, sh -c true", "true",
            spawn_subject(lambda: [args.forkbox, "sandbox", "--socket", args.socket, "--"] + SH_TRUE),
            [args.forkbox, "sandbox", "--socket", args.socket, "--"] + SH_TRUE),
    Subject("bare /bin/true", "true", spawn_subject(lambda: ["/bin/true"]), ["/bin/true"]),
    Subject("bare sh -c true", "true", spawn_subject(lambda: SH_TRUE), SH_TRUE),
]
if tools["bwrap"]:
    subjects.append(Subject("bwrap /bin/true", "true", spawn_subject(lambda: BWRAP + ["/bin/true"]), BWRAP + ["/bin/true"]))
else:
    notes.append("bwrap: not installed (apt-get install bubblewrap): skipped")
if tools["firejail"]:
    subjects.append(Subject("firejail /bin/true", "true", spawn_subject(lambda: FIREJAIL + ["/bin/true"]),
                            FIREJAIL + ["/bin/true"], sparse=True))
else:
    notes.append("firejail: not installed (apt-get install firejail): skipped")
if args.bundle and args.state_root:
    subjects.append(Subject("forkbox run (OCI bundle)", "true", spawn_subject(forkbox_run_argv), None))
subjects += [
    Subject('SDK run("python3 -c ...")' if SDK else 'py run("python3 -c ...")', "py",
            sdk_subject(PY_SH[2], expect=SNIPPET_OUT)),
    Subject("bare sh -c 'python3 -c ...'", "py", spawn_subject(lambda: PY_SH, SNIPPET_OUT), PY_SH),
]
if tools["bwrap"]:
    subjects.append(Subject("bwrap sh -c 'python3 -c ...'", "py", spawn_subject(lambda: BWRAP + PY_SH, SNIPPET_OUT),
                            BWRAP + PY_SH))


def once(s):
    try:
        return s.fn()
    except Exception as e:  # noqa: BLE001 - a subject's failure is reported, never fatal
        s.failures += 1
        s.error = str(e)
        if s.argv:
            s.error += " (" + diagnose(s.argv) + ")"
        return None


def pct(v, q):
    v = sorted(v)
    return v[max(0, min(len(v) - 1, math.ceil(q * len(v)) - 1))]


def ms(ns):
    return ns / 1e6


def cleanup_forkbox_run():
    if not (args.bundle and args.state_root):
        return
    ids = subprocess.run([args.forkbox, "--root", args.state_root, "list", "-q"], capture_output=True,
                         text=True).stdout.split()
    for cid in ids:
        subprocess.run([args.forkbox, "--root", args.state_root, "delete", "--force", cid], capture_output=True)
    if ids:
        notes.append("forkbox run left %d container(s) behind (deleted)" % len(ids))


TICK = os.sysconf("SC_CLK_TCK")


def machine_busy():
    """(busy, of it in irq and softirq, elapsed, stolen) CPU seconds of all CPUs so far. Busy: user,
    nice, system, irq, softirq; guest time is inside user already and stolen time (the
    hypervisor's) is not this machine's."""
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    return ((user + nice + system + irq + softirq) / TICK, (irq + softirq) / TICK,
            (user + nice + system + idle + iowait + irq + softirq + steal) / TICK, steal / TICK)


def proc_table():
    """{pid: (ppid, own utime+stime, reaped children's cutime+cstime)}, seconds, of every process."""
    table = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ut, st, cut, cst = (int(x) for x in fields[11:15])
        table[int(d)] = (int(fields[1]), (ut + st) / TICK, (cut + cst) / TICK)
    return table


def tree(table, root):
    kids = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        if p in table and p not in out:
            out.add(p)
            todo += kids.get(p, [])
    return out


class Cpu:
    """CPU seconds between two /proc snapshots, split by whose: the daemon's processes, what
    they reaped, the kernel's threads (kworkers: cgroup, mount and network namespace teardown
    run there, for nobody's account), this process and its children, the machine's total."""

    def __init__(self, daemon_pid):
        self.daemon_pid = daemon_pid
        self.t0, self.m0, self.r0 = proc_table(), machine_busy(), os.times()

    def stop(self):
        t1, m1, r1 = proc_table(), machine_busy(), os.times()
        t0 = self.t0
        d0, d1 = tree(t0, self.daemon_pid), tree(t1, self.daemon_pid)
        # The daemon's own: its processes alive at both ends (daemon, service, builder, unused
        # embryos). With what they reaped: every process of its tree at the end (a process
        # that exited is in its reaper's children's time).
        self.daemon = sum(t1[p][1] - t0[p][1] for p in d1 & d0)
        self.daemon_all = sum(t1[p][1] + t1[p][2] - (t0[p][1] + t0[p][2] if p in d0 else 0) for p in d1)
        # Kernel threads (ppid 2, kthreadd's): a lower bound, an exited kworker takes its time along.
        k1 = [p for p, v in t1.items() if v[0] == 2 or p == 2]
        self.kernel = sum(t1[p][1] - (t0[p][1] if p in t0 else 0) for p in k1)
        self.client = (r1.user - self.r0.user + r1.system - self.r0.system + r1.children_user
                       - self.r0.children_user + r1.children_system - self.r0.children_system)
        self.busy = max(1e-9, m1[0] - self.m0[0])
        self.irq = m1[1] - self.m0[1]
        self.total = max(1e-9, m1[2] - self.m0[2])
        self.steal = m1[3] - self.m0[3]
        return self

    def others(self, extra=0.0):
        """The busy time none of the above account for (other jobs), a share of busy time."""
        return max(0.0, self.busy - self.irq - self.daemon_all - self.kernel - self.client - extra) / self.busy

    def report(self, extra=0.0):
        return ("machine %.0f%% busy (%d CPUs; %.0f%% stolen by the hypervisor); of that: kernel threads %.0f%%, "
                "irq+softirq %.0f%%, other processes %.0f%% (neither this benchmark, its children nor the daemon's)" % (
                    100 * self.busy / self.total, os.cpu_count(), 100 * self.steal / self.total,
                    100 * self.kernel / self.busy, 100 * self.irq / self.busy, 100 * self.others(extra)))


def daemon_pid():
    return info()["pid"]


# --- latency --------------------------------------------------------------------------------

settle_timeouts = [0]


def pool_state():
    i = info()
    p = i.get("pool") or {}
    return p.get("ready", 0), p.get("building", 0), i.get("live", 0)


def pool_full():
    """The daemon's ready pool when it is idle (its --sandbox-pool for the default kind)."""
    deadline = time.monotonic() + 10
    while True:
        ready, building, live = pool_state()
        if (building == 0 and live == 0) or time.monotonic() > deadline:
            return ready
        time.sleep(0.005)


def settle(full):
    """Waits (at most 2 s) until the daemon builds nothing, runs nothing and has its pool full:
    every subject starts from the same state, whatever ran before it."""
    deadline = time.monotonic() + 2
    while True:
        ready, building, live = pool_state()
        if ready >= full and building == 0 and live == 0:
            return
        if time.monotonic() > deadline:
            settle_timeouts[0] += 1
            return
        time.sleep(0.0005)


def idle_pause():
    """--pause-ms: the machine idle before a timed run (after settle, whose polling keeps the
    CPUs awake and the client's code in cache)."""
    if args.pause_ms > 0:
        time.sleep(args.pause_ms / 1000.0)


results = {}


def latency():
    global subjects
    for s in subjects:  # warm-up; a subject that cannot run at all is dropped here
        for _ in range(max(1, args.warmup if not s.sparse else min(args.warmup, 2))):
            if once(s) is None:
                break
        if s.failures:
            notes.append("%s: skipped, fails here: %s" % (s.name, s.error))
    subjects = [s for s in subjects if not s.failures]
    step = max(1, args.n // max(1, args.firejail_n))
    full = pool_full()
    rng = random.Random(1)
    load = Cpu(daemon_pid())
    t_start = time.monotonic()
    for i in range(args.n):
        order = list(subjects)
        rng.shuffle(order)
        for s in order:
            if s.sparse and i % step:
                continue
            if args.settle:
                settle(full)
            idle_pause()
            t = once(s)
            if t is not None:
                s.samples.append(t)
    wall = time.monotonic() - t_start
    load = load.stop().report()
    cleanup_forkbox_run()

    # The C client's own loop: back-to-back requests, latency measured inside the client.
    c_loop = None
    p = subprocess.run([args.client, args.socket, str(args.n)] + SH_TRUE, capture_output=True, text=True)
    if p.returncode == 0:
        c_loop = [int(x) * 1000 for x in p.stdout.split()]
    else:
        notes.append("C client loop: exit %d: %s" % (p.returncode, p.stderr.strip()))

    print("latency (%s): %d iterations in %.1f s, subjects in a new random order every iteration; "
          "forkbox client from Python: %s" % (args.label, args.n, wall, client_kind))
    if args.settle:
        print("  before every timed run (untimed): the daemon idle with its pool full (%d ready)%s; the C client's "
              "loop: back-to-back, no wait" % (full, ", %d waits timed out" % settle_timeouts[0] if settle_timeouts[0] else ""))
    else:
        print("  no wait for the daemon between runs (--no-settle): a sandbox may wait for the pool's refill")
    if args.pause_ms > 0:
        print("  then %g ms idle (--pause-ms) before every timed run: caches cool, CPUs idle, as between an agent's calls"
              % args.pause_ms)
    print("  meanwhile: " + load)
    print("  spawned subjects: os.posix_spawn + waitpid, stdin/stdout/stderr /dev/null (the snippet's stdout: a pipe, "
          "checked); in-process subjects: the call alone")
    by = {s.name: s for s in subjects}
    ref = {"true": subjects[0], "py": next((s for s in subjects if s.group == "py"), None)}
    rows = [(s.name, s.group, s.samples) for s in subjects]
    if c_loop:
        rows.insert(3 if SDK else 2, ("C client in-process loop, sh -c true", "true", c_loop))
    hdr = "  %-38s %5s %8s %8s %8s %9s" % ("subject", "n", "p50 ms", "p90 ms", "p99 ms", "p50/ref")
    for group, title in (("true", "true (ref: %s)" % subjects[0].name),
                         ("py", "python snippet %r (ref: %s)" % (SNIPPET, ref["py"].name if ref["py"] else "-"))):
        print()
        print("  " + title)
        print(hdr)
        r = ref[group]
        r50 = statistics.median(r.samples) if r and r.samples else None
        for name, g, v in rows:
            if g != group or not v:
                continue
            m = statistics.median(v)
            ratio = "%8.2fx" % (m / r50) if r50 else "%9s" % "-"
            print("  %-38s %5d %8.3f %8.3f %8.3f %s" % (name, len(v), ms(m), ms(pct(v, 0.9)), ms(pct(v, 0.99)), ratio))
            results[name] = v
    fails = ["%s: %d failed (%s)" % (s.name, s.failures, s.error) for s in subjects if s.failures]
    if fails:
        print("  failures: " + "; ".join(fails))

    def p50(name):
        v = results.get(name) or (by[name].samples if name in by else None)
        return ms(statistics.median(v)) if v else None

    sdk_true, sdk_argv = subjects[0].name, subjects[1].name
    t = p50(sdk_true)
    print()
    print("  targets (%s):" % args.label)
    target("%s p50 <= 1.0 ms" % sdk_true, t, t is not None and t <= 1.0, "%.3f ms" % (t or 0))
    for bare in ("bare sh -c true", "bare /bin/true"):
        b = p50(bare)
        if t is not None and b is not None:
            target("%s p50 - %s p50 <= 0.4 ms" % (sdk_true, bare), t - b, t - b <= 0.4, "%+.3f ms" % (t - b))
    pys, pyb = ref["py"].name if ref["py"] else None, "bare sh -c 'python3 -c ...'"
    if pys and p50(pys) is not None and p50(pyb) is not None:
        d = p50(pys) - p50(pyb)
        target("%s p50 - bare python3 p50 <= 1.0 ms" % pys, d, d <= 1.0, "%+.3f ms" % d)
    for other, want in (("bwrap /bin/true", 5), ("firejail /bin/true", 30)):
        o = p50(other)
        if o is None or t is None:
            print("    %-60s %s" % ("%s p50 / %s p50 >= %dx" % (other, sdk_true, want), "not measured"))
            continue
        a = p50(sdk_argv)
        target("%s p50 / %s p50 >= %dx" % (other, sdk_true, want), o / t, o / t >= want, "%.1fx" % (o / t))
        if a:
            print("      (over %s: %.1fx)" % (sdk_argv, o / a))


def target(what, value, ok, shown):
    print("    %-60s %-14s %s" % (what, shown, "met" if ok else "MISSED"))


# --- watchdog -------------------------------------------------------------------------------

def histogram(columns):
    """Overshoot histogram, one count column per series (microseconds)."""
    edges = [(-math.inf, 0, "< 0")]
    edges += [(lo, lo + 50, "%d-%d us" % (lo, lo + 50)) for lo in range(0, 1000, 50)]
    edges += [(1000, 2000, "1-2 ms"), (2000, 5000, "2-5 ms"), (5000, 10000, "5-10 ms"),
              (10000, 50000, "10-50 ms"), (50000, math.inf, ">= 50 ms")]
    names = list(columns)
    print("    %-12s" % "overshoot" + "".join(" %10s" % n for n in names))
    for lo, hi, label in edges:
        counts = [sum(1 for x in columns[n] if lo <= x < hi) for n in names]
        if not any(counts):
            continue
        bar = "#" * min(50, round(50 * counts[0] / max(1, len(columns[names[0]]))))
        print("    %-12s" % label + "".join(" %10d" % c for c in counts) + "  " + bar)


def watchdog():
    busy = "while :; do :; done"
    daemon_over, client_over, bad = [], [], []
    load = Cpu(daemon_pid())
    sandbox_cpu = 0.0
    t_start = time.monotonic()
    for _ in range(args.watchdog):
        t0 = perf()
        try:
            code, _, duration_ms, timed_out, cpu_ms = fb_run(busy, timeout_ms=args.timeout_ms)
        except Exception as e:  # noqa: BLE001
            bad.append(str(e))
            continue
        wall = perf() - t0
        sandbox_cpu += (cpu_ms or 0.0) / 1000
        if not timed_out or code != 124:
            bad.append("exit %d, timed_out %s" % (code, timed_out))
            continue
        daemon_over.append((duration_ms - args.timeout_ms) * 1000.0)
        client_over.append(wall / 1000.0 - args.timeout_ms * 1000.0)
    wall = time.monotonic() - t_start
    # A command killed at its deadline is not in its reaper's children's time (seen here): its
    # cgroup's cpu_ms (the result's) is counted instead.
    load = load.stop().report(extra=sandbox_cpu)
    print()
    print("watchdog (%s): %d runs of sh -c %r with timeout_ms=%d in %.1f s (%s)" % (
        args.label, args.watchdog, busy, args.timeout_ms, wall, "SDK" if SDK else "inline client"))
    print("  meanwhile: %s; the busy loop itself keeps one CPU busy" % load)
    print("  daemon: duration_ms (release to exit, the daemon's clock) - %d ms; client: the call's wall "
          "time - %d ms (includes the sandbox's start and the result's trip)" % (args.timeout_ms, args.timeout_ms))
    if bad:
        print("  %d runs did not time out as expected: %s" % (len(bad), "; ".join(sorted(set(bad))[:3])))
    if not daemon_over:
        return
    histogram({"daemon": daemon_over, "client": client_over})
    print("    %-12s %10s %10s" % ("", "daemon", "client"))
    for q, label in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
        print("    %-12s %7.0f us %7.0f us" % (label, pct(daemon_over, q), pct(client_over, q)))
    print("    %-12s %7.0f us %7.0f us" % ("max", max(daemon_over), max(client_over)))
    if true_durations:
        print("  for scale: the daemon's duration_ms of run(\"true\") in the latency loop (release to exit of a "
              "no-op): p50 %.0f us, p90 %.0f us" % (1000 * pct(true_durations, 0.5), 1000 * pct(true_durations, 0.9)))
    p99 = pct(daemon_over, 0.99)
    print("  target: watchdog overshoot p99 <= 200 us (daemon-measured): %.0f us, %s" % (p99, "met" if p99 <= 200 else "MISSED"))


# --- throughput -----------------------------------------------------------------------------

def throughput():
    i = info()
    pids = [i["pid"], i["service_pid"]]
    print()
    print("throughput (%s): 2 concurrent clients, sh -c true, %.0f s each; daemon pid %d, service pid %d "
          "(pool %s)" % (args.label, args.seconds, pids[0], pids[1], i.get("pool")))
    print("  CPU ms per sandbox: daemon: utime+stime of the daemon's processes (daemon, service, builder); "
          "+children: with the processes they reaped (the embryos, the commands); kthreads: the kernel's threads "
          "(namespace and cgroup teardown); clients: the clients' own.")
    print("  machine: all CPUs' busy share (%d CPUs); others: the share of that busy time none of those "
          "account for (other jobs on the machine); stolen: time the hypervisor gave another guest" % os.cpu_count())
    print("  %-24s %6s %7s %7s %9s %9s %8s %8s %7s %7s %7s" % (
        "clients", "runs", "per s", "p50 ms", "daemon", "+children", "kthreads", "clients", "machine", "others",
        "stolen"))

    def build_stats():
        i = info()
        return i.get("built"), i.get("build_ms_mean"), i.get("build_cpu_ms_mean")

    def window(kind):
        b0 = build_stats()
        cpu = Cpu(pids[0])
        t0 = time.monotonic()
        lat = []
        if kind == "C":
            procs = [subprocess.Popen([args.client, "-s", str(args.seconds), args.socket, "0"] + SH_TRUE,
                                      stdout=subprocess.PIPE, text=True) for _ in range(2)]
            for p in procs:
                out, _ = p.communicate()
                lat += [int(x) * 1000 for x in out.split()]
                if p.returncode != 0:
                    notes.append("throughput C client: exit %d" % p.returncode)
        else:
            stop = time.monotonic() + args.seconds
            errors = []

            def worker():
                while time.monotonic() < stop:
                    t = perf()
                    try:
                        fb_run("true")
                    except Exception as e:  # noqa: BLE001
                        errors.append(str(e))
                        return
                    lat.append(perf() - t)
            threads = [threading.Thread(target=worker) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                notes.append("throughput SDK threads: " + errors[0])
        elapsed = time.monotonic() - t0
        cpu.stop()
        n = max(1, len(lat))
        print("  %-24s %6d %7.0f %7.3f %9.3f %9.3f %8.3f %8.3f %6.0f%% %6.0f%% %6.0f%%" % (
            kind_names[kind], len(lat), len(lat) / elapsed, ms(statistics.median(lat)) if lat else 0,
            cpu.daemon * 1000 / n, cpu.daemon_all * 1000 / n, cpu.kernel * 1000 / n, cpu.client * 1000 / n,
            100 * cpu.busy / cpu.total, 100 * cpu.others(), 100 * cpu.steal / cpu.total))
        b1 = build_stats()
        if None not in b0 + b1 and b1[0] > b0[0]:
            nb = b1[0] - b0[0]
            builds.append("%s: %d built, %.2f ms wall and %.2f ms CPU each" % (
                kind_names[kind], nb, (b1[0] * b1[1] - b0[0] * b0[1]) / nb, (b1[0] * b1[2] - b0[0] * b0[2]) / nb))
    builds = []
    kind_names = {"C": "2 C client processes", "py": "2 Python threads (%s)" % ("SDK" if SDK else "inline")}
    window("C")
    window("py")
    if builds:
        print("  the daemon's sandbox builds (info's built, build_ms_mean, build_cpu_ms_mean): " + "; ".join(builds))


# --- sessions -------------------------------------------------------------------------------

def sessions():
    """Sessions through the protocol inline (the SDK's own cost is the latency section's)."""
    sid = raw_exchange("create", {})["session"]
    subjects_s = [
        ("run(\"true\") in a session", "true", lambda: raw_exchange("run", {"session": sid, "argv": ["/bin/sh", "-c", "true"]})),
        ("run(\"true\") in a session, stdin=b\"\"", "true",
         lambda: raw_exchange("run", {"session": sid, "argv": ["/bin/sh", "-c", "true"], "stdin": True}, stdin=b"")),
        ("run(\"true\"), a fresh sandbox", "true", lambda: raw_exchange("run", {"argv": ["/bin/sh", "-c", "true"]})),
        ("run_python(snippet), warm", "py", lambda: raw_exchange("run", {"python": SNIPPET})),
        ("run(\"python3 -c ...\"), fresh", "py", lambda: raw_exchange("run", {"argv": PY_SH})),
        ("bare python3 -c ...", "py", None),
    ]
    samples = {name: [] for name, _, _ in subjects_s}
    check = {"py": SNIPPET_OUT, "true": b""}
    for name, group, fn in subjects_s:  # warm-up
        if fn is not None:
            fn()
    rng = random.Random(2)
    load = Cpu(daemon_pid())
    full = pool_full()
    for _ in range(args.n):
        order = list(subjects_s)
        rng.shuffle(order)
        for name, group, fn in order:
            if args.settle:
                settle(full)
            idle_pause()
            if fn is None:
                samples[name].append(spawn(["python3", "-c", SNIPPET], SNIPPET_OUT))
                continue
            t0 = perf()
            r = fn()
            t1 = perf()
            if r.get("exit_code") != 0 or r["stdout"] != check[group]:
                notes.append("%s: exit %s, printed %r" % (name, r.get("exit_code"), r["stdout"][:80]))
                continue
            samples[name].append(t1 - t0)
    load = load.stop().report()
    print()
    print("sessions (%s): %d iterations, subjects in a new random order every iteration, the protocol inline "
          "from Python" % (args.label, args.n))
    print("  meanwhile: " + load)
    print("  %-38s %5s %8s %8s %8s" % ("subject", "n", "p50 ms", "p90 ms", "p99 ms"))
    for name, _, _ in subjects_s:
        v = samples[name]
        if v:
            print("  %-38s %5d %8.3f %8.3f %8.3f" % (name, len(v), ms(statistics.median(v)), ms(pct(v, 0.9)), ms(pct(v, 0.99))))

    # fork(1) and fork(8) of a session that wrote N bytes; the lower layer (the host's root) is
    # never copied, so its size is not a factor.
    fork_p50 = {}
    print()
    print("  fork: a session writes N bytes (head -c N /dev/urandom > /tmp/blob), then fork(k) %d times (children "
          "closed after each, untimed)" % args.fork_n)
    print("  %-24s %8s %8s %8s %8s" % ("written, children", "p50 ms", "p90 ms", "max ms", "per child"))
    for size, label in ((1024, "1 KiB"), (1 << 20, "1 MiB"), (64 << 20, "64 MiB")):
        parent = raw_exchange("create", {})["session"]
        raw_exchange("run", {"session": parent, "argv": ["/bin/sh", "-c", "head -c %d /dev/urandom > /tmp/blob" % size]})
        for count in (1, 8):
            v = []
            for _ in range(args.fork_n if size < (64 << 20) else max(3, args.fork_n // 4)):
                t0 = perf()
                kids = raw_exchange("fork", {"session": parent, "count": count})["sessions"]
                v.append(perf() - t0)
                for k in kids:
                    raw_exchange("close", {"session": k})
            fork_p50[(size, count)] = ms(statistics.median(v))
            print("  %-24s %8.3f %8.3f %8.3f %8.3f" % ("%s, fork(%d)" % (label, count), ms(statistics.median(v)),
                                                        ms(pct(v, 0.9)), ms(max(v)), ms(statistics.median(v)) / count))
        raw_exchange("close", {"session": parent})
    raw_exchange("close", {"session": sid})

    def p50(name):
        return ms(statistics.median(samples[name])) if samples[name] else None

    print()
    print("  targets (%s):" % args.label)
    t = p50("run(\"true\") in a session")
    if t is not None:
        target('sb.run("true") p50 <= 1 ms (protocol inline)', t, t <= 1.0, "%.3f ms" % t)
    w = p50("run_python(snippet), warm")
    if w is not None:
        target("run_python p50 <= 5 ms", w, w <= 5.0, "%.3f ms" % w)
        b = p50("bare python3 -c ...")
        if b:
            print("      (bare python3 -c: %.3f ms; the warm run is %.2fx of it)" % (b, w / b))
    f = fork_p50.get((1 << 20, 1))
    if f is not None:
        target("fork(1) of a session that wrote 1 MiB <= 5 ms", f, f <= 5.0, "%.3f ms" % f)


if "latency" in sections:
    latency()
if "watchdog" in sections:
    watchdog()
if "throughput" in sections:
    throughput()
if "sessions" in sections:
    sessions()
if notes:
    print()
    print("notes (%s):" % args.label)
    for n in notes:
        print("  - " + n)
