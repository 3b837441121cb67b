#!/usr/bin/env bash
# run-true.sh - whole-process wall time of `RUNTIME run` of a busybox `true` bundle:
# forkbox against runc (and crun when installed), in a new random order every round inside
# one timing loop, each run with a fresh container id and (unless --shared-root) its own --root.
# Every runtime runs the same config.json: runc's template plus the seccomp profile that
# `forkbox spec` writes (--no-seccomp leaves it out).
#
# With zygote mode (unless --no-zygote) a `forkbox daemon` serves warm templates, and two
# more subjects run: `forkbox --zygote run`, and `forkbox --zygote create` + `start` + wait
# for the container's exit (the delete after it is not timed).
#
# With --critical-path, after the timed loop (tracing is off in it), an extra pass, not timed, of
# `forkbox create` + `start` + wait, cold and with --zygote, runs with FORKBOX_TRACE set (one
# trace file per run) and bench/critical-path.py prints histograms of the in-process critical
# path: create's "main" to "create: done", the request to the container's first instruction
# (without init's wait for `start`) and start's "main" to "start: released".
#
# usage: bench/run-true.sh [-n RUNS] [-w WARMUP] [--no-crun] [--no-seccomp] [--shared-root]
#                          [--no-zygote] [--critical-path] [--cgroup2] [--ro-binary] [-c RUNS]
#                          [--keep-traces DIR]
#                          [-b BUNDLE_DIR]
#   -n RUNS        timed runs per runtime (default 200)
#   -w WARMUP      untimed runs per runtime first (default 5)
#   --no-crun      leave crun out even when it is installed
#   --no-seccomp   no linux.seccomp (runc's template has none)
#   --shared-root  one --root per runtime for all its runs, as a container manager keeps it;
#                  forkbox's compiled-seccomp cache in the root is then warm after the
#                  first run (with a fresh root per run, forkbox compiles every time)
#   --no-zygote    no daemon, no zygote subjects
#   --gap MS       sleep MS milliseconds before every timed run (every subject alike): the
#                  machine idles between containers, as with an interactive or agent
#                  workload, and the zygote daemon refills its pools in the gaps
#   --critical-path  the traced pass and its histograms (cold; zygote too unless --no-zygote)
#   --cgroup2      everything (the daemon and every runtime) runs in a private mount namespace
#                  where /sys/fs/cgroup is the host's cgroup2 hierarchy alone: the pure v2
#                  host most users run, on this hybrid machine (integration/cgroupv2.bats
#                  builds the same view). crun accepts that layout, so it runs unwrapped.
#   --ro-binary    one more subject: `forkbox run` of the same binary bind-mounted read-only,
#                  as on systems with an immutable /usr (or NixOS's store), where forkbox
#                  execs the container's program without its exec stub (exec_guard.hpp)
#   -c RUNS        traced runs per mode (default 100)
#   --keep-traces DIR  copy the trace files there (bench/critical-path.py --steps DIR/cold
#                  shows the median time between consecutive marks)
#   -b DIR         where the demo bundle is built or reused
#                  (default $BENCH_DIR/bundle; BENCH_DIR defaults to /var/tmp/forkbox-bench)
# environment:
#   FORKBOX  runtime under test (default build/forkbox; FORKBOX=/usr/sbin/runc compares
#            runc with itself, to check the harness before forkbox builds)
#   RUNC     default /usr/sbin/runc, or runc on PATH
#   CRUN     default crun on PATH
#   BENCH_SEED  seed of the per-round shuffle of the subjects (default 1)
#
# crun refuses this machine's hybrid cgroup layout, so it runs through a wrapper that
# enters a private mount namespace, unmounts /sys/fs/cgroup/unified there (crun then uses
# cgroup v1) and execs crun. The wrapper's own cost is measured in the same loop (the
# wrapper exec'ing /bin/true) and its median is subtracted from crun's figures.
#
# Prints median and p90 in milliseconds per runtime and the ratios to forkbox
# (ratio > 1: forkbox is faster). Needs root, python3, jq, busybox-static.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

runs=200
warmup=5
use_crun=1
use_seccomp=1
shared_root=0
use_zygote=1
critical_path=0
cgroup2_view=0
ro_binary=0
cp_runs=100
keep_traces=
bench_dir=${BENCH_DIR:-/var/tmp/forkbox-bench}
bundle=

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
	exit "${1:-0}"
}

all_args=("$@")  # for the --cgroup2 restart
while [[ $# -gt 0 ]]; do
	case $1 in
	-n) runs=$2; shift 2 ;;
	-w) warmup=$2; shift 2 ;;
	-b) bundle=$2; shift 2 ;;
	--no-crun) use_crun=0; shift ;;
	--no-seccomp) use_seccomp=0; shift ;;
	--shared-root) shared_root=1; shift ;;
	--no-zygote) use_zygote=0; shift ;;
	--gap) export BENCH_GAP_MS=$2; shift 2 ;;
	--critical-path) critical_path=1; shift ;;
	--cgroup2) cgroup2_view=1; shift ;;
	--ro-binary) ro_binary=1; shift ;;
	-c) cp_runs=$2; shift 2 ;;
	--keep-traces) keep_traces=$2; shift 2 ;;
	-h | --help) usage 0 ;;
	*) echo "run-true.sh: unknown argument $1" >&2; usage 2 ;;
	esac
done
[[ $runs =~ ^[0-9]+$ && $runs -gt 0 ]] || { echo "run-true.sh: -n wants a positive number" >&2; exit 2; }
[[ $warmup =~ ^[0-9]+$ ]] || { echo "run-true.sh: -w wants a number" >&2; exit 2; }
[[ $cp_runs =~ ^[0-9]+$ && $cp_runs -gt 0 ]] || { echo "run-true.sh: -c wants a positive number" >&2; exit 2; }
bundle=${bundle:-$bench_dir/bundle}

FORKBOX=${FORKBOX:-$repo/build/forkbox}
RUNC=${RUNC:-$(command -v runc || echo /usr/sbin/runc)}
CRUN=${CRUN:-$(command -v crun || true)}
BUSYBOX=${BUSYBOX:-/bin/busybox}

[[ $(id -u) -eq 0 ]] || { echo "run-true.sh: needs root" >&2; exit 1; }

# --cgroup2: start over inside the pure v2 view (BENCH_CGROUP2_VIEW marks the second pass).
# Nothing mounted there propagates back to the host; the view ends with the last process.
if [[ $cgroup2_view -eq 1 && -z ${BENCH_CGROUP2_VIEW:-} ]]; then
	v2_mount=$(awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2" && $4 == "/") { print $5; exit } break } }' \
		/proc/self/mountinfo)
	[[ -n $v2_mount ]] || { echo "run-true.sh: --cgroup2: this host has no cgroup2 hierarchy" >&2; exit 1; }
	if [[ $v2_mount != /sys/fs/cgroup ]]; then
		export BENCH_CGROUP2_VIEW=1
		exec unshare --mount --propagation private -- bash -c \
			'umount -R /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec "$0" "$@"' "$0" "${all_args[@]}"
	fi
	BENCH_CGROUP2_VIEW=1  # already a pure v2 host
fi
for tool in python3 jq; do
	command -v "$tool" >/dev/null || { echo "run-true.sh: $tool is missing" >&2; exit 1; }
done
[[ -x $FORKBOX ]] || { echo "run-true.sh: $FORKBOX is not built (make build/forkbox, or set FORKBOX)" >&2; exit 1; }
[[ -x $RUNC ]] || { echo "run-true.sh: runc not found (apt-get install runc, or set RUNC)" >&2; exit 1; }
if [[ $use_crun -eq 1 && ( -z $CRUN || ! -x $CRUN ) ]]; then
	use_crun=0
fi

prog=run-true.sh
# shellcheck source=bench/bundle.bash
source "$here/bundle.bash"
build_bundle

mkdir -p "$bench_dir"
work=$(mktemp -d "$bench_dir/run.XXXXXX")
# State roots on a tmpfs, where they live on a real host (/run/runc, /run/forkbox): this
# machine's /run is a plain directory on disk, and file creation there would dominate.
mount -t tmpfs -o mode=0700 bench-state "$work"
daemon_pid=
ro_copy=
# The daemon (by its pid), containers an interrupted run left in the roots, the work dir.
# shellcheck disable=SC2317  # called through the trap
cleanup() {
	trap - EXIT
	if [[ -n $daemon_pid ]]; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	local root rt id
	for root in "$work"/*/; do
		for rt in "$FORKBOX" "$RUNC"; do
			for id in $("$rt" --root "$root" list -q 2>/dev/null); do
				"$rt" --root "$root" delete --force "$id" >/dev/null 2>&1 || true
			done
		done
	done
	[[ -n $ro_copy ]] && { umount "$ro_copy" 2>/dev/null || umount -l "$ro_copy" 2>/dev/null || true; }
	umount "$work" 2>/dev/null || umount -l "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export BENCH_RUNS=$runs BENCH_WARMUP=$warmup BENCH_BUNDLE=$bundle BENCH_WORK=$work
export BENCH_SHARED_ROOT=$shared_root BENCH_CGROUP2_VIEW=${BENCH_CGROUP2_VIEW:-}
export BENCH_CRITICAL_PATH=$critical_path BENCH_CP_RUNS=$cp_runs BENCH_KEEP_TRACES=$keep_traces BENCH_HERE=$here
echo "config: runc's template, seccomp $([[ $use_seccomp -eq 1 ]] && echo "forkbox's default profile" || echo none)," \
	"$([[ $shared_root -eq 1 ]] && echo "one --root per runtime" || echo "a fresh --root per run")," \
	"cgroups $([[ -n ${BENCH_CGROUP2_VIEW:-} ]] && echo "pure v2 (private view)" || echo "as the host has them")"
crun_used=
if [[ $use_crun -eq 1 ]]; then
	crun_used=$CRUN
fi
export BENCH_FORKBOX=$FORKBOX BENCH_RUNC=$RUNC BENCH_CRUN=$crun_used
export BENCH_FORKBOX_RO=
if [[ $ro_binary -eq 1 ]]; then
	ro_copy=$work/forkbox-ro
	touch "$ro_copy"
	mount --bind "$FORKBOX" "$ro_copy"
	mount -o remount,bind,ro "$ro_copy"
	BENCH_FORKBOX_RO=$ro_copy
fi
export BENCH_ZYGOTE_SOCKET=
if [[ $use_zygote -eq 1 ]] && "$FORKBOX" daemon --help >/dev/null 2>&1; then
	BENCH_ZYGOTE_SOCKET=$work/zygote.sock
	# shellcheck disable=SC2086  # ZYGOTE_DAEMON_ARGS: extra daemon options, word-split
	"$FORKBOX" daemon --socket "$BENCH_ZYGOTE_SOCKET" --pool 8 ${ZYGOTE_DAEMON_ARGS:-} --warm "$bundle" \
		</dev/null >/dev/null 2>"$work/daemon.err" &
	daemon_pid=$!
	for _ in $(seq 100); do
		"$FORKBOX" daemon --socket "$BENCH_ZYGOTE_SOCKET" --stats >/dev/null 2>&1 && break
		sleep 0.05
	done
fi

python3 - <<'PY'
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

runs = int(os.environ["BENCH_RUNS"])
warmup = int(os.environ["BENCH_WARMUP"])
bundle = os.environ["BENCH_BUNDLE"]
work = os.environ["BENCH_WORK"]
crun = os.environ.get("BENCH_CRUN") or None
shared_root = os.environ.get("BENCH_SHARED_ROOT") == "1"

# crun wrapper: private mount namespace without the cgroup2 mount, then exec.
WRAP = ["unshare", "-m", "sh", "-c", "umount /sys/fs/cgroup/unified 2>/dev/null; exec \"$@\"", "sh"]


def runtime_cmd(binary, wrap=False):
    def cmd(root, cid):
        argv = [binary, "--root", root, "run", "--bundle", bundle, cid]
        return WRAP + argv if wrap else argv
    return cmd


def cleanup(binary, wrap, root, cid):
    argv = [binary, "--root", root, "delete", "--force", cid]
    subprocess.run(WRAP + argv if wrap else argv, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# name -> (command builder, binary, wrapped?)
subjects = {"forkbox": (runtime_cmd(os.environ["BENCH_FORKBOX"]), os.environ["BENCH_FORKBOX"], False),
            "runc": (runtime_cmd(os.environ["BENCH_RUNC"]), os.environ["BENCH_RUNC"], False)}
if os.environ.get("BENCH_FORKBOX_RO"):
    ro = os.environ["BENCH_FORKBOX_RO"]
    subjects["forkbox (read-only mount)"] = (runtime_cmd(ro), ro, False)
if crun and os.environ.get("BENCH_CGROUP2_VIEW"):
    subjects["crun"] = (runtime_cmd(crun), crun, False)  # pure v2: crun runs as it is
elif crun:
    subjects["crun"] = (runtime_cmd(crun, wrap=True), crun, True)
    subjects["wrapper"] = (lambda root, cid: WRAP + ["/bin/true"], None, False)

zsock = os.environ.get("BENCH_ZYGOTE_SOCKET")
if zsock:
    import ctypes
    # Orphaned container inits (their `create` has exited) come to us, so we can wait.
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    fb = os.environ["BENCH_FORKBOX"]
    subjects["forkbox --zygote run"] = (
        lambda root, cid: [fb, "--root", root, "--zygote=" + zsock, "run", "--bundle", bundle, cid], fb, False)

    def create_start_wait(root, cid):
        return ("sequence", [
            [fb, "--root", root, "--zygote=" + zsock, "create", "--bundle", bundle,
             "--pid-file", os.path.join(root, cid + ".pid"), cid],
            [fb, "--root", root, "start", cid]], os.path.join(root, cid + ".pid"))
    subjects["forkbox --zygote create+start+wait"] = (create_start_wait, fb, False)

samples = {name: [] for name in subjects}
failures = {name: 0 for name in subjects}
last_error = {}
seq = 0


def once(name, record):
    global seq
    seq += 1
    build, binary, wrap = subjects[name]
    tag = "".join(c if c.isalnum() else "-" for c in name)
    cid = "bench-%d-%d-%s" % (os.getpid(), seq, tag)
    root = os.path.join(work, "root-" + tag if shared_root else cid)
    os.makedirs(root, exist_ok=True)
    argv = build(root, cid)
    t0 = time.perf_counter_ns()
    if argv[0] == "sequence":
        # Not a pipe: the waiting init would hold it open, and create would never "finish".
        with open(os.path.join(root, cid + ".err"), "w+b") as err:
            for step in argv[1]:
                proc = subprocess.run(step, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
                if proc.returncode != 0:
                    err.seek(0)
                    proc.stderr = err.read()
                    break
        if proc.returncode == 0:
            try:
                os.waitpid(int(open(argv[2]).read()), 0)
            except (OSError, ValueError):
                pass
        elapsed = time.perf_counter_ns() - t0
        if proc.returncode == 0:
            cleanup(binary, wrap, root, cid)
    else:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
        elapsed = time.perf_counter_ns() - t0
    if proc.returncode != 0:
        failures[name] += 1
        last_error[name] = "exit %d: %s" % (proc.returncode, proc.stderr.decode(errors="replace").strip())
        if binary:
            cleanup(binary, wrap, root, cid)
    elif record:
        samples[name].append(elapsed / 1e6)
    if not shared_root:
        shutil.rmtree(root, ignore_errors=True)


order = list(subjects)
# Warm-up, untimed; a runtime that cannot run the bundle at all is dropped here.
for i in range(max(warmup, 1)):
    for name in order:
        once(name, record=False)
for name in list(order):
    if failures[name] >= max(warmup, 1):
        print("%s: every warm-up run failed (%s); leaving it out" % (name, last_error.get(name)),
              file=sys.stderr)
        order.remove(name)
for name in failures:
    failures[name] = 0

# Every round in a new random order, so that no subject always follows the same neighbour:
# a fixed or mirrored order put the read-only subject right after a zygote subject half the
# time, while the daemon refilled its pool, and the cold subject never.
gap = float(os.environ.get("BENCH_GAP_MS") or 0) / 1000
shuffler = random.Random(int(os.environ.get("BENCH_SEED") or 1))
for i in range(runs):
    names = list(order)
    shuffler.shuffle(names)
    for name in names:
        if gap:
            time.sleep(gap)
        once(name, record=True)
    if (i + 1) % 50 == 0:
        print("  %d/%d rounds" % (i + 1, runs), file=sys.stderr)


def p90(values):
    s = sorted(values)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


stats = {}
for name in order:
    v = samples[name]
    if v:
        stats[name] = (statistics.median(v), p90(v), len(v))

print("runtime                                runs   median ms     p90 ms   failed")
wrapper = stats.get("wrapper")
labels = {"crun": "crun (minus wrapper)" if wrapper else "crun", "wrapper": "crun wrapper alone"}
for name in order:
    if name not in stats:
        print("%-36s %6d %11s %10s %8d" % (labels.get(name, name), 0, "-", "-", failures[name]))
        continue
    med, q90, n = stats[name]
    if name == "crun" and wrapper:
        med, q90 = med - wrapper[0], q90 - wrapper[0]
        stats["crun"] = (med, q90, n)
    print("%-36s %6d %11.2f %10.2f %8d" % (labels.get(name, name), n, med, q90, failures[name]))
    if failures[name] and name in last_error:
        print("    last failure: %s" % last_error[name][:300])

fb = stats.get("forkbox")
if fb:
    for other in ("runc", "crun"):
        if other in stats:
            print("ratio %s/forkbox: median %.2f, p90 %.2f" % (
                other, stats[other][0] / fb[0], stats[other][1] / fb[1]))
    for warm in ("forkbox (read-only mount)", "forkbox --zygote run", "forkbox --zygote create+start+wait"):
        if warm in stats:
            for other in ("runc", "crun", "forkbox"):
                if other in stats:
                    print("ratio %s/(%s): median %.2f" % (other, warm, stats[other][0] / stats[warm][0]))
if os.path.realpath(os.environ["BENCH_FORKBOX"]) == os.path.realpath(os.environ["BENCH_RUNC"]):
    print("note: FORKBOX is runc, so forkbox/runc compares runc with itself")


def critical_path():
    """The traced pass: create + start + wait per run, one trace file per run."""
    import ctypes
    import importlib.util
    here = os.environ["BENCH_HERE"]
    spec = importlib.util.spec_from_file_location("critical_path", os.path.join(here, "critical-path.py"))
    cp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cp)
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: wait for init
    fb = os.environ["BENCH_FORKBOX"]
    n = int(os.environ["BENCH_CP_RUNS"])
    modes = [("cold", [])]
    if zsock:
        modes.append(("zygote", ["--zygote=" + zsock]))

    def zygote_stats():
        out = subprocess.run([fb, "daemon", "--socket", zsock, "--stats"], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True).stdout
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    print()
    print("critical path (FORKBOX_TRACE, %d traced create+start+wait runs per mode, not timed above)" % n)
    failed_any = False
    for mode, flags in modes:
        traces = os.path.join(work, "traces-" + mode)
        os.makedirs(traces)
        root = os.path.join(work, "root-trace-" + mode)
        before = zygote_stats() if flags else None
        failed = 0
        for i in range(-2, n):  # two untraced runs first: a fresh root compiles seccomp once
            cid = "trace-%d-%s-%d" % (os.getpid(), mode, i + 2)
            env = dict(os.environ)
            if i >= 0:
                env["FORKBOX_TRACE"] = os.path.join(traces, "%05d" % i)
            pid_file = os.path.join(work, cid + ".pid")
            with open(os.path.join(work, cid + ".err"), "w+b") as err:
                ok = True
                for step in ([fb, "--root", root] + flags + ["create", "--bundle", bundle, "--pid-file", pid_file, cid],
                             [fb, "--root", root, "start", cid]):
                    if subprocess.run(step, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=err, env=env).returncode != 0:
                        ok = False
                        break
                if ok:
                    try:
                        os.waitpid(int(open(pid_file).read()), 0)
                    except (OSError, ValueError):
                        pass
                else:
                    failed += 1
                    err.seek(0)
                    last = err.read().decode(errors="replace").strip()
            subprocess.run([fb, "--root", root, "delete", "--force", cid], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        title = "%s: forkbox %screate + start" % (mode, "".join(f + " " for f in flags).replace(zsock or "@", "SOCK"))
        if before is not None:
            after = zygote_stats()
            served = int(after.get("served", 0)) - int(before.get("served", 0))
            missed = int(after.get("missed", 0)) - int(before.get("missed", 0))
            title += "; daemon served %d, missed %d" % (served, missed)
        cp.report([traces], title=title)
        if failed:
            failed_any = True
            print("  %d runs failed; last: %s" % (failed, last[:300]))
        keep = os.environ.get("BENCH_KEEP_TRACES")
        if keep:
            shutil.copytree(traces, os.path.join(keep, mode), dirs_exist_ok=True)
    return failed_any


cp_failed = os.environ.get("BENCH_CRITICAL_PATH") == "1" and critical_path()
sys.exit(1 if any(failures[n] for n in order) or cp_failed else 0)
PY
