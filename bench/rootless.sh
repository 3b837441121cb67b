#!/usr/bin/env bash
# rootless.sh - rootless `RUNTIME run` of a busybox `true` bundle (`spec --rootless`: a user
# namespace mapping 0 to the user, no network namespace, no cgroup), as an unprivileged user:
# forkbox against runc, alternating inside one timing loop that itself runs as that user,
# each runtime with one state root on a tmpfs (as $XDG_RUNTIME_DIR is on a real host).
#
# usage: bench/rootless.sh [-n RUNS] [-w WARMUP] [--no-seccomp]
#   -n RUNS       timed runs per runtime (default 200)
#   -w WARMUP     untimed runs per runtime first (default 5)
#   --no-seccomp  no linux.seccomp (runc's rootless template has none)
# environment: FORKBOX (default build/forkbox), RUNC (default /usr/sbin/runc),
#   BENCH_USER (default fbrootless, uid 23456: made when missing, as the rootless tests do)
#
# A user's `forkbox daemon` serves a third subject, `forkbox --zygote run` (warm: the user,
# ipc and uts namespaces come from a template; a rootless bundle has no network namespace,
# the warm path's biggest saving, and no rootfs template fits a user namespace yet).
# Prints median and p90 in milliseconds and each one's time over cold forkbox's (ratio > 1:
# forkbox is faster).
# Needs root (to make the user and the bundle), python3, jq, busybox-static.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
runs=200
warmup=5
seccomp=1
while [[ $# -gt 0 ]]; do
	case $1 in
	-n) runs=$2; shift 2 ;;
	-w) warmup=$2; shift 2 ;;
	--no-seccomp) seccomp=0; shift ;;
	-h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "rootless.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
forkbox=$(readlink -f "${FORKBOX:-$repo/build/forkbox}")
runc=${RUNC:-/usr/sbin/runc}
user=${BENCH_USER:-fbrootless}
[[ -x $forkbox ]] || { echo "rootless.sh: $forkbox missing: run make" >&2; exit 1; }
[[ -x $runc ]] || { echo "rootless.sh: runc missing" >&2; exit 1; }
if ! id -u "$user" >/dev/null 2>&1; then
	groupadd -g 23456 "$user" 2>/dev/null || true
	useradd -u 23456 -g 23456 -M -d /nonexistent -s /usr/sbin/nologin "$user"
fi
uid=$(id -u "$user")
gid=$(id -g "$user")

# The bundle and the state roots live on one tmpfs the user owns; removed on exit.
work=$(mktemp -d /dev/shm/forkbox-bench-rootless.XXXXXX)
chmod 0755 "$work"
cleanup() {
	local rt id
	[[ -n ${daemon:-} ]] && kill -TERM "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
	for rt in forkbox forkbox-zygote runc; do
		for id in $(ls "$work/xdg/$rt" 2>/dev/null); do
			setpriv --reuid "$uid" --regid "$gid" --init-groups \
				"$([[ $rt == runc ]] && echo "$runc" || echo "$forkbox")" --root "$work/xdg/$rt" \
				delete --force "$id" >/dev/null 2>&1 || true
		done
	done
	rm -rf --one-file-system "$work"
}
trap cleanup EXIT
"$repo/scripts/make-bundle.sh" "$work/bundle" "$forkbox" true >/dev/null
(cd "$work/bundle" && rm -f config.json && "$forkbox" spec --rootless)
filter='.process.terminal = false | .process.args = ["/bin/true"]'
[[ $seccomp == 1 ]] || filter+=' | del(.linux.seccomp)'
jq "$filter" "$work/bundle/config.json" >"$work/bundle/config.json.new"
mv "$work/bundle/config.json.new" "$work/bundle/config.json"
jq --argjson u "$uid" --argjson g "$gid" \
	'.linux.uidMappings[0].hostID = $u | .linux.gidMappings[0].hostID = $g' \
	"$work/bundle/config.json" >"$work/bundle/config.json.new"
mv "$work/bundle/config.json.new" "$work/bundle/config.json"
mkdir -p "$work/xdg"
chown -R "$uid:$gid" "$work/bundle" "$work/xdg"
chmod 0700 "$work/xdg"

# exec: $! must be the daemon's own pid, for the kill in cleanup.
(exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/nonexistent USER="$user" XDG_RUNTIME_DIR="$work/xdg" \
	setpriv --reuid "$uid" --regid "$gid" --init-groups "$forkbox" daemon --socket "$work/xdg/zygote.sock" --root "$work/xdg/forkbox-zygote" \
	--warm "$work/bundle" </dev/null >"$work/daemon.log" 2>&1) &
daemon=$!
for ((i = 0; i < 100; i++)); do
	[[ -S $work/xdg/zygote.sock ]] && break
	sleep 0.05
done
[[ -S $work/xdg/zygote.sock ]] || { cat "$work/daemon.log" >&2; exit 1; }

echo "rootless run of /bin/true as $user ($uid), $runs runs each, seccomp=$seccomp, state on tmpfs"
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/nonexistent USER="$user" XDG_RUNTIME_DIR="$work/xdg" \
	BENCH_RUNS="$runs" BENCH_WARMUP="$warmup" BENCH_FORKBOX="$forkbox" BENCH_RUNC="$runc" \
	BENCH_BUNDLE="$work/bundle" BENCH_XDG="$work/xdg" BENCH_ZYGOTE="$work/xdg/zygote.sock" \
	setpriv --reuid "$uid" --regid "$gid" --init-groups python3 - <<'PY'
import os, statistics, subprocess, sys, time

runs, warmup = int(os.environ["BENCH_RUNS"]), int(os.environ["BENCH_WARMUP"])
bundle, xdg = os.environ["BENCH_BUNDLE"], os.environ["BENCH_XDG"]
fb = os.environ["BENCH_FORKBOX"]
subjects = {"forkbox": [fb], "forkbox-zygote": [fb, "--zygote=" + os.environ["BENCH_ZYGOTE"]],
            "runc": [os.environ["BENCH_RUNC"]]}
samples = {name: [] for name in subjects}
seq = 0

def once(name, record):
    global seq
    seq += 1
    root = os.path.join(xdg, name)
    argv = subjects[name] + ["--root", root, "run", "--bundle", bundle, "rl-%d-%d" % (os.getpid(), seq)]
    t0 = time.perf_counter_ns()
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = (time.perf_counter_ns() - t0) / 1e6
    if proc.returncode != 0:
        sys.exit("%s failed: exit %d: %s" % (name, proc.returncode, proc.stderr.decode(errors="replace").strip()))
    if record:
        samples[name].append(elapsed)

for i in range(warmup):
    for name in subjects:
        once(name, False)
for i in range(runs):
    # Alternate the order, so none always runs on a machine another just warmed.
    for name in (list(subjects) if i % 2 == 0 else reversed(list(subjects))):
        once(name, True)

def p(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]

cold = statistics.median(samples["forkbox"])
print("%-15s %9s %9s %11s" % ("runtime", "median ms", "p90 ms", "vs forkbox"))
for name, v in samples.items():
    m = statistics.median(v)
    print("%-15s %9.2f %9.2f %10.2fx" % (name, m, p(v, 0.9), m / cold))
PY
