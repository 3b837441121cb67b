#!/usr/bin/env bash
# managers-containerd.sh - wall time of `ctr run --rm IMG ID true` through containerd's runc
# shim with forkbox and with runc as the shim's runc binary, in alternating batches.
#
# usage: bench/managers-containerd.sh [-n RUNS] [-b BATCH] [-w WARMUP]
#   -n RUNS    timed runs per runtime (default 60)
#   -b BATCH   runs per batch; batches alternate forkbox, runc, forkbox, ... (default 5)
#   -w WARMUP  untimed runs per runtime first (default 3)
# environment: FORKBOX (default build/forkbox), RUNC (default runc on PATH)
#
# A private containerd (scripts/containerd-private.bash) under a temporary directory serves
# a busybox image built offline; it is stopped and removed at the end. Each run is a whole
# `ctr run --rm` process: client, container and snapshot, shim start, create, start, wait,
# delete. Prints median and p90 in milliseconds and the ratio runc/forkbox (> 1: forkbox is
# faster). Needs root, containerd, ctr, busybox-static, jq.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

runs=60
batch=5
warmup=3
while [[ $# -gt 0 ]]; do
	case $1 in
	-n) runs=$2; shift 2 ;;
	-b) batch=$2; shift 2 ;;
	-w) warmup=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "managers-containerd.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
for v in "$runs" "$batch" "$warmup"; do
	[[ $v =~ ^[0-9]+$ ]] || { echo "managers-containerd.sh: -n, -b and -w want numbers" >&2; exit 2; }
done
[[ $runs -gt 0 && $batch -gt 0 ]] || { echo "managers-containerd.sh: -n and -b must be positive" >&2; exit 2; }

FORKBOX=${FORKBOX:-$repo/build/forkbox}
RUNC=${RUNC:-$(command -v runc || echo /usr/sbin/runc)}
BUSYBOX=${BUSYBOX:-/bin/busybox}
[[ $(id -u) -eq 0 ]] || { echo "managers-containerd.sh: needs root" >&2; exit 1; }
for tool in containerd ctr jq; do
	command -v "$tool" >/dev/null || { echo "managers-containerd.sh: $tool is missing (make deps)" >&2; exit 1; }
done
[[ -x $FORKBOX ]] || { echo "managers-containerd.sh: $FORKBOX is not built (make)" >&2; exit 1; }
[[ -x $RUNC ]] || { echo "managers-containerd.sh: runc not found (set RUNC)" >&2; exit 1; }
[[ -x $BUSYBOX ]] || { echo "managers-containerd.sh: $BUSYBOX missing (apt-get install busybox-static)" >&2; exit 1; }
FORKBOX=$(realpath "$FORKBOX")
RUNC=$(realpath "$RUNC")

# shellcheck source=../scripts/containerd-private.bash
source "$repo/scripts/containerd-private.bash"
CTRD_NS=fbbench-$$
dir=$(mktemp -d /tmp/fbbench-ctrd.XXXXXX)
cleanup() {
	ctrd_stop
	find /sys/fs/cgroup -maxdepth 2 -depth -type d -name "$CTRD_NS" -exec rmdir {} + 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rootfs=$dir/rootfs
mkdir -p "$rootfs"/{bin,dev,proc,sys,etc,tmp}
cp "$BUSYBOX" "$rootfs/bin/busybox"
chroot "$rootfs" /bin/busybox --install -s /bin
echo 'root:x:0:0:root:/root:/bin/sh' >"$rootfs/etc/passwd"
ctrd_start "$dir/ctrd" "$FORKBOX"
image=localhost/fb-bench:latest
ctrd_import "$rootfs" "$image"

n=0
# one RUNTIME: one `ctr run --rm` of /bin/true with RUNTIME as the shim's binary; prints ms.
one() {
	local t0 t1
	n=$((n + 1))
	t0=$EPOCHREALTIME
	ctrd_ctr run --rm --runc-binary "$1" "$image" "b$n" /bin/true </dev/null >/dev/null
	t1=$EPOCHREALTIME
	echo "$(((${t1/./} - ${t0/./}) / 1000)).$(((${t1/./} - ${t0/./}) % 1000 / 100))"
}

for ((i = 0; i < warmup; i++)); do
	one "$FORKBOX" >/dev/null
	one "$RUNC" >/dev/null
done

fb_times=() runc_times=()
done_runs=0
while ((done_runs < runs)); do
	k=$((runs - done_runs < batch ? runs - done_runs : batch))
	for ((i = 0; i < k; i++)); do fb_times+=("$(one "$FORKBOX")"); done
	for ((i = 0; i < k; i++)); do runc_times+=("$(one "$RUNC")"); done
	done_runs=$((done_runs + k))
done

# stats TIMES...: "median p90" of the values.
stats() {
	printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		p = v[int(NR * 0.9 + 0.999)]
		printf "%.1f %.1f\n", m, p
	}'
}
read -r fb_med fb_p90 < <(stats "${fb_times[@]}")
read -r runc_med runc_p90 < <(stats "${runc_times[@]}")
echo "ctr run --rm IMG ID /bin/true through containerd-shim-runc-v2, $runs runs each, batches of $batch"
printf '%-10s median %8.1f ms   p90 %8.1f ms\n' forkbox "$fb_med" "$fb_p90" runc "$runc_med" "$runc_p90"
awk -v f="$fb_med" -v r="$runc_med" 'BEGIN {printf "ratio runc/forkbox (median): %.2f   saved per container: %.1f ms\n", r / f, r - f}'
