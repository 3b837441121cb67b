#!/usr/bin/env bash
# throughput.sh - containers per second, sustained: K workers each run the busybox `true`
# bundle of bench/run-true.sh again and again for T seconds, with a fresh container id per
# run and one --root per subject, for each subject in turn:
#   forkbox run            cold: no daemon running
#   forkbox --zygote run   warm: a `forkbox daemon --pool 8 --warm BUNDLE` started for this
#                          window only (its counters tell how many runs it served warm)
#   runc run               for comparison
#
# Per window it prints: containers/s; the CPU the whole machine was busy (from /proc/stat,
# anything else running on the machine included, so see the idle baseline printed first) as
# a fraction and in CPU-ms per container; the CPU of the runtime processes and the containers
# (this script's reaped children) per container; and for the warm window the daemon's CPU
# (utime+stime of the daemon, of its live template builder, and cutime+cstime of what it reaped).
#
# usage: bench/throughput.sh [-t SECONDS] [-k WORKERS] [--no-runc] [--no-zygote] [--no-seccomp]
#                            [-b BUNDLE_DIR]
#   -t SECONDS     length of each window (default 30)
#   -k WORKERS     concurrent workers (default: the number of CPUs)
#   --no-runc      leave runc out
#   --no-zygote    leave the warm window out
#   --no-seccomp   the bundle without linux.seccomp (as in run-true.sh)
#   -b DIR         demo bundle, built when missing (default $BENCH_DIR/bundle)
# environment: FORKBOX (default build/forkbox), RUNC, BUSYBOX, BENCH_DIR (default
# /var/tmp/forkbox-bench) as in run-true.sh. Needs root, python3, jq, busybox-static.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
prog=throughput.sh

seconds=30
workers=$(nproc)
use_runc=1
use_zygote=1
use_seccomp=1
bench_dir=${BENCH_DIR:-/var/tmp/forkbox-bench}
bundle=

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
	exit "${1:-0}"
}

while [[ $# -gt 0 ]]; do
	case $1 in
	-t) seconds=$2; shift 2 ;;
	-k) workers=$2; shift 2 ;;
	-b) bundle=$2; shift 2 ;;
	--no-runc) use_runc=0; shift ;;
	--no-zygote) use_zygote=0; shift ;;
	--no-seccomp) use_seccomp=0; shift ;;
	-h | --help) usage 0 ;;
	*) echo "$prog: unknown argument $1" >&2; usage 2 ;;
	esac
done
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || { echo "$prog: -t wants a positive number" >&2; exit 2; }
[[ $workers =~ ^[0-9]+$ && $workers -gt 0 ]] || { echo "$prog: -k wants a positive number" >&2; exit 2; }
bundle=${bundle:-$bench_dir/bundle}

FORKBOX=${FORKBOX:-$repo/build/forkbox}
RUNC=${RUNC:-$(command -v runc || echo /usr/sbin/runc)}
BUSYBOX=${BUSYBOX:-/bin/busybox}

[[ $(id -u) -eq 0 ]] || { echo "$prog: needs root" >&2; exit 1; }
for tool in python3 jq; do
	command -v "$tool" >/dev/null || { echo "$prog: $tool is missing" >&2; exit 1; }
done
[[ -x $FORKBOX ]] || { echo "$prog: $FORKBOX is not built (make build/forkbox, or set FORKBOX)" >&2; exit 1; }
[[ -x $RUNC ]] || { echo "$prog: runc not found (apt-get install runc, or set RUNC)" >&2; exit 1; }
if [[ $use_zygote -eq 1 ]] && ! "$FORKBOX" daemon --help >/dev/null 2>&1; then
	echo "$prog: $FORKBOX has no daemon verb; no warm window" >&2
	use_zygote=0
fi

# shellcheck source=bench/bundle.bash
source "$here/bundle.bash"
build_bundle

mkdir -p "$bench_dir"
work=$(mktemp -d "$bench_dir/throughput.XXXXXX")
# State roots on a tmpfs, where they live on a real host (/run/runc, /run/forkbox): this
# machine's /run is a plain directory on disk, and file creation there would dominate.
mount -t tmpfs -o mode=0700 bench-state "$work"
daemon_pid=

# The daemon (by its pid), then whatever a worker left behind in the subjects' roots.
# shellcheck disable=SC2317  # called through the trap
cleanup() {
	trap - EXIT INT TERM
	if [[ -n $daemon_pid ]]; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	local root rt id
	for root in "$work"/root-*; do
		[[ -d $root ]] || continue
		rt=$FORKBOX
		[[ $root == */root-runc ]] && rt=$RUNC
		for id in $("$rt" --root "$root" list -q 2>/dev/null); do
			"$rt" --root "$root" delete --force "$id" >/dev/null 2>&1 || true
		done
	done
	umount "$work" 2>/dev/null || umount -l "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts the daemon for the warm window only, so the cold and runc windows run without it.
start_daemon() {
	# shellcheck disable=SC2086  # ZYGOTE_DAEMON_ARGS: extra daemon options, word-split
	"$FORKBOX" daemon --socket "$work/zygote.sock" --pool 8 ${ZYGOTE_DAEMON_ARGS:-} --warm "$bundle" \
		</dev/null >/dev/null 2>"$work/daemon.err" &
	daemon_pid=$!
	local _ ready last=-1
	for _ in $(seq 200); do
		# Ready when the pools are full (at least 8, and no longer growing), so the window
		# starts warm: --warm fills a namespace-only pool and, when the bundle fits one, a
		# rootfs pool.
		ready=$("$FORKBOX" daemon --socket "$work/zygote.sock" --stats 2>/dev/null | tr ' ' '\n' | sed -n 's/^ready=//p')
		if [[ -n $ready ]] && ((ready >= 8 && ready == last)); then
			return 0
		fi
		last=${ready:--1}
		sleep 0.05
	done
	echo "$prog: the daemon did not fill its pool in 10 s" >&2
	cat "$work/daemon.err" >&2
	return 1
}

echo "config: runc's template, seccomp $([[ $use_seccomp -eq 1 ]] && echo "forkbox's default profile" || echo none)," \
	"$workers workers, $seconds s per window, $(nproc) CPUs"

run_window() {
	BENCH_SUBJECT=$1 BENCH_SECONDS=${2:-$seconds} BENCH_WORKERS=$workers BENCH_BUNDLE=$bundle BENCH_WORK=$work \
		BENCH_FORKBOX=$FORKBOX BENCH_RUNC=$RUNC BENCH_DAEMON_PID=${daemon_pid:-0} python3 - <<'PY'
import os
import resource
import signal
import subprocess
import sys
import threading
import time

subject = os.environ["BENCH_SUBJECT"]
seconds = float(os.environ["BENCH_SECONDS"])
workers = int(os.environ["BENCH_WORKERS"])
bundle = os.environ["BENCH_BUNDLE"]
work = os.environ["BENCH_WORK"]
fb = os.environ["BENCH_FORKBOX"]
daemon_pid = int(os.environ["BENCH_DAEMON_PID"])
tick = os.sysconf("SC_CLK_TCK")
zsock = os.path.join(work, "zygote.sock")


def machine():
    """(busy, total) jiffies of all CPUs; busy leaves out idle and iowait."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4], sum(v)


if subject == "baseline":
    b0 = machine()
    time.sleep(seconds)
    b1 = machine()
    print("%-22s machine busy %5.1f%% with nothing of ours running" % (
        "idle baseline", 100.0 * (b1[0] - b0[0]) / max(1, b1[1] - b0[1])))
    sys.exit(0)


def proc_cpu(pid, with_children):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state): utime, stime, cutime, cstime are fields 14-17.
    return sum(int(x) for x in fields[11:15 if with_children else 13]) / tick


def daemon_cpu():
    """Seconds of CPU of the daemon, of its live children (the template builder) and of
    the children it reaped."""
    total = proc_cpu(daemon_pid, True)
    try:
        with open("/proc/%d/task/%d/children" % (daemon_pid, daemon_pid)) as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        children = []
    for child in children:
        try:
            total += proc_cpu(child, True)
        except OSError:
            pass  # exited meanwhile: counted in cutime from now on
    return total


def daemon_stats():
    out = subprocess.run([fb, "daemon", "--socket", zsock, "--stats"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (kv.split("=", 1) for kv in out.split() if "=" in kv) if v.isdigit()}


binary = os.environ["BENCH_RUNC"] if subject == "runc" else fb
root = os.path.join(work, "root-" + subject)
os.makedirs(root, exist_ok=True)
prefix = [binary, "--root", root] + (["--zygote=" + zsock] if subject == "zygote" else [])
label = {"cold": "forkbox run", "zygote": "forkbox --zygote run", "runc": "runc run"}[subject]
done = [0] * workers
failed = [0] * workers
last_error = [None]
deadline = None


stop = threading.Event()


def worker(w, count=None):
    n = 0
    while not stop.is_set() and ((count is not None and n < count) or
                                 (count is None and time.monotonic() < deadline)):
        n += 1
        cid = "tp-%d-%s-%d-%d" % (os.getpid(), subject, w, n)
        p = subprocess.run(prefix + ["run", "--bundle", bundle, cid], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if p.returncode == 0:
            done[w] += 1
        else:
            failed[w] += 1
            last_error[0] = "exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace").strip())
            subprocess.run([binary, "--root", root, "delete", "--force", cid], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def in_parallel(**kw):
    threads = [threading.Thread(target=worker, args=(w,), kwargs=kw) for w in range(workers)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        # Each worker ends its current run (and deletes it if it failed) before the shell's
        # cleanup looks for leftovers.
        stop.set()
        for t in threads:
            t.join()
        sys.exit(130)


signal.signal(signal.SIGTERM, signal.default_int_handler)


# Warm-up, not counted: the root's seccomp cache, page cache, and (warm) the pool refills
# before the window starts.
in_parallel(count=2)
if subject == "zygote":
    for _ in range(200):
        if daemon_stats().get("ready", 0) >= 8:
            break
        time.sleep(0.05)
done[:] = [0] * workers
failed[:] = [0] * workers

ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
m0 = machine()
d0 = daemon_cpu() if daemon_pid else None
s0 = daemon_stats() if subject == "zygote" else None
t0 = time.monotonic()
deadline = t0 + seconds
in_parallel()
elapsed = time.monotonic() - t0
m1 = machine()
d1 = daemon_cpu() if daemon_pid else None
s1 = daemon_stats() if subject == "zygote" else None
ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)

n = sum(done)
busy_s = (m1[0] - m0[0]) / tick
busy_frac = (m1[0] - m0[0]) / max(1, m1[1] - m0[1])
children_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
per = (lambda s: "%7.1f" % (1000.0 * s / n)) if n else (lambda s: "%7s" % "-")
print("%-22s %6d runs %7.1f/s  machine busy %5.1f%% %s CPU-ms/container  runtime+container %s CPU-ms/container"
      % (label, n, n / elapsed, 100.0 * busy_frac, per(busy_s), per(children_s)))
if d0 is not None:
    ds = d1 - d0
    print("%-22s daemon %.2f CPU-s in %.1f s (%.1f%% of one CPU), %s CPU-ms/container; served %d warm, missed %d"
          % ("", ds, elapsed, 100.0 * ds / elapsed, per(ds).strip(),
             s1.get("served", 0) - s0.get("served", 0), s1.get("missed", 0) - s0.get("missed", 0)))
if sum(failed):
    print("%-22s %d runs failed; last: %s" % ("", sum(failed), (last_error[0] or "")[:300]))
    sys.exit(1)
PY
}

status=0
run_window baseline $((seconds < 3 ? seconds : 3)) || status=1
run_window cold || status=1
if [[ $use_zygote -eq 1 ]]; then
	if start_daemon; then
		run_window zygote || status=1
	else
		status=1
	fi
	kill -TERM "$daemon_pid" 2>/dev/null || true
	wait "$daemon_pid" 2>/dev/null || true
	daemon_pid=
fi
if [[ $use_runc -eq 1 ]]; then
	run_window runc || status=1
fi
exit $status
