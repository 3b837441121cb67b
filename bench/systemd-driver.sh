#!/usr/bin/env bash
# systemd-driver.sh - what the systemd cgroup driver costs on create and delete: inside the
# systemd fixture of integration/systemd-helpers.bash (systemd 252 as PID 1 of fresh
# namespaces), `forkbox create` and `delete --force` with the cgroupfs driver and with
# --systemd-cgroup (and runc --systemd-cgroup), in alternating order inside one loop, each
# create with a fresh id; then the same pair with --zygote, a daemon inside the fixture
# running for that phase only (its template builds take the cgroup locks systemd's
# attaching of a unit's process waits for, and would slow the cold phase).
# Prints median and p90 of each, and the in-process slices of the cold systemd creates (from
# FORKBOX_TRACE, one write per mark): connecting, the unit's start (StartTransientUnit,
# systemd's job, JobRemoved), and the placement checks after it.
#
# Back to back, a systemd create waits for systemd to finish with the previous container
# (on v1 every cgroup attach of another process costs the kernel an RCU grace period, and
# systemd attaches the unit's process in each hierarchy it drives): --gap lets it settle.
#
# usage: bench/systemd-driver.sh [-n RUNS] [--bus] [--gap MS]
#   -n RUNS   timed creates per subject (default 30)
#   --bus     start the fixture's system bus first (dbus-daemon): the driver then talks to
#             systemd through it instead of /run/systemd/private
#   --gap MS  sleep MS milliseconds before every timed create (every subject alike)
# environment: FORKBOX (default build/forkbox), RUNC (default /usr/sbin/runc; "" to leave it out)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
FORKBOX=$(readlink -f "${FORKBOX:-$repo/build/forkbox}")
RUNC=${RUNC-/usr/sbin/runc}
runs=30
bus=0
gap=0
while [[ $# -gt 0 ]]; do
	case $1 in
	-n) runs=$2; shift 2 ;;
	--bus) bus=1; shift ;;
	--gap) gap=$2; shift 2 ;;
	*) echo "usage: $0 [-n RUNS] [--bus] [--gap MS]" >&2; exit 2 ;;
	esac
done
[[ $(id -u) -eq 0 ]] || { echo "$0: needs root (it boots systemd in namespaces)" >&2; exit 1; }

work=$(mktemp -d /tmp/fbsdbench.XXXXXX)
export BATS_FILE_TMPDIR=$work
# shellcheck source=../integration/systemd-helpers.bash
source "$repo/integration/systemd-helpers.bash"
cleanup() {
	sd_shutdown
	rm -rf "$work"
}
trap cleanup EXIT

bundle=$work/bundle
mkdir -p "$bundle/rootfs"/{bin,dev,proc,sys,etc,tmp}
cp /bin/busybox "$bundle/rootfs/bin/busybox"
chroot "$bundle/rootfs" /bin/busybox --install -s /bin
"$FORKBOX" spec --bundle "$bundle"
jq '.process.terminal = false | .process.args = ["/bin/true"]' "$bundle/config.json" >"$bundle/c.json"
mv "$bundle/c.json" "$bundle/config.json"

sd_boot
if [[ $bus -eq 1 ]]; then sd_start_dbus; fi

# The loop runs inside the fixture in one process tree (no nsenter per create).
cat >"$work/loop.sh" <<'EOF'
#!/bin/bash
# loop.sh RUNS OUT: creates and deletes, alternating subjects; "subject verb microseconds" lines.
set -u
runs=$1 out=$2
cfg=$BUNDLE/config.json
read -r -a subjects <<<"$SUBJECTS"
# One bundle per cgroupsPath form (cgroupfs /fbxbench/ID, systemd system.slice:fbxb:ID), both
# with the one rootfs by its absolute path.
mkdir -p "$WORK/b-cgroupfs" "$WORK/b-systemd"
t() {
	local s=$EPOCHREALTIME
	"$@" >/dev/null 2>"$WORK/last.err" || { echo "failed: $*: $(cat "$WORK/last.err")" >&2; return 1; }
	local e=$EPOCHREALTIME
	echo $((${e/./} - ${s/./}))
}
for ((i = 0; i < runs + 3; i++)); do
	for s in "${subjects[@]}"; do
		id=b$i-$s-$$
		case $s in
		*cgroupfs) b=$WORK/b-cgroupfs p=/fbxbench/$id flags=() ;;
		*) b=$WORK/b-systemd p=system.slice:fbxb:$id flags=(--systemd-cgroup) ;;
		esac
		jq --arg p "$p" --arg r "$BUNDLE/rootfs" '.linux.cgroupsPath = $p | .root.path = $r' "$cfg" >"$b/config.json"
		rt=("$FORKBOX" --root "$WORK/root")
		[[ $s == zygote-* ]] && rt+=(--zygote="$SOCK")
		[[ $s == runc-* ]] && rt=("$RUNC" --root "$WORK/runc-root")
		if ((GAP > 0)); then sleep "$((GAP / 1000)).$(printf %03d $((GAP % 1000)))"; fi
		trace=
		[[ $s == systemd ]] && trace=$WORK/traces/$id
		c=$(FORKBOX_TRACE=$trace t "${rt[@]}" "${flags[@]}" create --bundle "$b" "$id" </dev/null) || exit 1
		d=$(t "${rt[@]}" delete --force "$id") || exit 1
		# The first three rounds warm the caches (seccomp, the daemon's pools): not kept.
		((i >= 3)) && echo "$s create $c" >>"$out" && echo "$s delete $d" >>"$out"
		# The zygote daemon refills in the background: give it the time an idle gap would.
		if [[ -S $SOCK ]] && ((GAP == 0)); then sleep 0.02; fi
	done
done
exit 0
EOF
chmod +x "$work/loop.sh"

sock=$work/zygote.sock
mkdir -p "$work/traces"
cold="cgroupfs systemd"
[[ -n $RUNC ]] && cold+=" runc-systemd"
sd_exec env WORK="$work" BUNDLE="$bundle" SOCK="$sock" FORKBOX="$FORKBOX" RUNC="$RUNC" GAP="$gap" \
	SUBJECTS="$cold" "$work/loop.sh" "$runs" "$work/times"

sd_exec "$FORKBOX" --log "$work/daemon.log" daemon --socket "$sock" --pool 2 </dev/null >/dev/null 2>&1 &
for ((i = 0; i < 100; i++)); do
	sd_exec "$FORKBOX" daemon --socket "$sock" --stats >/dev/null 2>&1 && break
	sleep 0.05
done
sd_exec env WORK="$work" BUNDLE="$bundle" SOCK="$sock" FORKBOX="$FORKBOX" RUNC="$RUNC" GAP="$gap" \
	SUBJECTS="zygote-cgroupfs zygote-systemd" "$work/loop.sh" "$runs" "$work/times"
daemon=$(sd_exec pgrep -o -f -- "^$FORKBOX --log [^ ]* daemon --socket $sock") && sd_exec kill -TERM "$daemon" || true

python3 - "$work/times" "$work/traces" "$(if [[ $bus -eq 1 ]]; then echo system bus; else echo /run/systemd/private; fi)" "$gap" <<'EOF'
import os, statistics, sys
times, traces, via, gap = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
data = {}
for line in open(times):
    s, verb, us = line.split()
    data.setdefault((s, verb), []).append(int(us) / 1000)
def stat(v):
    v = sorted(v)
    return statistics.median(v), v[min(len(v) - 1, int(round(0.9 * (len(v) - 1))))]
print(f"systemd driver via {via}, gap {gap} ms; whole process, ms (median / p90, n={len(next(iter(data.values())))})")
order = ["cgroupfs", "systemd", "zygote-cgroupfs", "zygote-systemd", "runc-systemd"]
for verb in ("create", "delete"):
    for s in order:
        if (s, verb) in data:
            m, p = stat(data[(s, verb)])
            print(f"  {verb:6} {s:16} {m:7.2f} / {p:7.2f}")
    for a, b in (("cgroupfs", "systemd"), ("zygote-cgroupfs", "zygote-systemd")):
        if (a, verb) in data and (b, verb) in data:
            print(f"  {verb:6} {b} - {a}: {stat(data[(b, verb)])[0] - stat(data[(a, verb)])[0]:+.2f} ms (medians)")
# In-process slices of the traced systemd creates (marks of forkbox's own pid).
slices = [("connect", "create: zygote answered", "create: systemd connected"),
          ("start unit (StartTransientUnit + job + JobRemoved)", "create: cloned", "create: systemd unit started"),
          ("  of which until the job was queued", "create: cloned", "create: systemd job queued"),
          ("placement check and cgroupfs writes", "create: systemd unit started", "create: systemd placement done"),
          ("whole create (main to done)", "main", "create: done")]
got = {name: [] for name, _, _ in slices}
for f in os.listdir(traces):
    if not f.startswith("b") or int(f[1:].split("-")[0]) < 3: continue  # the warm-up rounds
    marks = {}
    pids = {}
    for line in open(os.path.join(traces, f)):
        parts = line.split(None, 2)
        if len(parts) < 3: continue
        pid, ns, label = parts[0], int(parts[1]), parts[2].strip()
        pids.setdefault(pid, 0); pids[pid] += 1
        marks.setdefault((pid, label), ns)
    main_pid = next((p for (p, l) in marks if l == "main"), None)
    for name, a, b in slices:
        if (main_pid, a) in marks and (main_pid, b) in marks:
            got[name].append((marks[(main_pid, b)] - marks[(main_pid, a)]) / 1e6)
print("in-process, cold systemd creates above, ms (median / p90)")
for name, _, _ in slices:
    if got[name]:
        m, p = stat(got[name])
        print(f"  {name:52} {m:7.2f} / {p:7.2f}")
EOF
