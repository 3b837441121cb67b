#!/usr/bin/env bash
# managers-podman.sh - wall time of `podman run --rm IMG true` with forkbox as the OCI
# runtime against runc, in alternating batches, through one private podman configuration
# (own storage, run root and tmp dir under the bench dir; cgroupfs; no network; a busybox
# image imported offline). Nothing of the host's podman state is touched.
#
# usage: bench/managers-podman.sh [-n RUNS] [-k BATCH] [-w WARMUP]
#   -n RUNS     timed runs per runtime (default 60)
#   -k BATCH    runs of one runtime in a row before switching (default 5); the order of
#               the two runtimes flips every round so neither always goes first
#   -w WARMUP   untimed runs per runtime first (default 3)
# environment:
#   FORKBOX   runtime under test (default build/forkbox)
#   RUNC      default /usr/sbin/runc, or runc on PATH
#   BENCH_DIR default /var/tmp/forkbox-bench (the podman store lives in a temp dir under it)
#
# Prints median and p90 in milliseconds per runtime and the ratio runc/forkbox (> 1:
# forkbox is faster). The podman part of the figure (image lookup, storage mount, conmon,
# cleanup process) is the same for both runtimes, so the difference of the medians is the
# runtimes' own. Needs root, podman, conmon, python3, busybox-static.
#
# To fold into bench/managers.sh: source this file with PODMAN_BENCH_LIB=1 and call
#   podman_bench_setup DIR; podman_bench_run DIR RUNS BATCH WARMUP; podman_bench_teardown DIR
set -euo pipefail

# podman_bench_setup DIR: the private podman configuration and the image in DIR.
podman_bench_setup() {
	local dir=$1 busybox=${BUSYBOX:-/bin/busybox} forkbox runc
	forkbox=$(readlink -f "$FORKBOX")
	runc=$(readlink -f "$RUNC")
	mkdir -p "$dir"/{tmp,volumes,image-tmp,rootfs/bin,rootfs/dev,rootfs/proc,rootfs/sys,rootfs/etc,rootfs/tmp}
	# The same limits for both runtimes, within this machine's hard limits (root here lacks
	# CAP_SYS_RESOURCE, and podman's defaults ask for 1048576).
	cat >"$dir/containers.conf" <<-EOF
		[containers]
		default_ulimits = ["nofile=1024:4096", "nproc=4096:8192"]
		netns = "none"
		log_driver = "k8s-file"

		[network]
		network_backend = "cni"
		network_config_dir = "$dir/cni"

		[engine]
		cgroup_manager = "cgroupfs"
		events_logger = "file"
		events_logfile_path = "$dir/events.log"
		image_copy_tmp_dir = "$dir/image-tmp"
		pull_policy = "never"
		runtime = "forkbox"
		runtime_supports_json = ["forkbox", "runc"]
		tmp_dir = "$dir/tmp"
		volume_path = "$dir/volumes"

		[engine.runtimes]
		forkbox = ["$forkbox"]
		runc = ["$runc"]
	EOF
	cat >"$dir/storage.conf" <<-EOF
		[storage]
		driver = "overlay"
		graphroot = "$dir/graph"
		runroot = "$dir/run"
	EOF
	: >"$dir/registries.conf"
	cp "$busybox" "$dir/rootfs/bin/busybox"
	chroot "$dir/rootfs" /bin/busybox --install -s /bin
	echo 'root:x:0:0:root:/root:/bin/sh' >"$dir/rootfs/etc/passwd"
	echo 'root:x:0:' >"$dir/rootfs/etc/group"
	tar -C "$dir/rootfs" -cf "$dir/rootfs.tar" .
	podman_bench_env "$dir" podman --root "$dir/graph" --runroot "$dir/run" \
		import --quiet "$dir/rootfs.tar" localhost/fbbench-busybox:latest >/dev/null
}

# podman_bench_env DIR CMD...: CMD with DIR's podman configuration.
podman_bench_env() {
	local dir=$1
	shift
	CONTAINERS_CONF=$dir/containers.conf CONTAINERS_STORAGE_CONF=$dir/storage.conf \
		CONTAINERS_REGISTRIES_CONF=$dir/registries.conf TMPDIR=$dir/image-tmp "$@"
}

# podman_bench_teardown DIR: containers, image, the overlay driver's mount, DIR.
podman_bench_teardown() {
	local dir=$1 mnt
	[[ -d $dir ]] || return 0
	podman_bench_env "$dir" podman --root "$dir/graph" --runroot "$dir/run" rm --all --force --time 0 >/dev/null 2>&1 || true
	podman_bench_env "$dir" podman --root "$dir/graph" --runroot "$dir/run" rmi --all --force >/dev/null 2>&1 || true
	awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r |
		while read -r mnt; do umount -l "$mnt" || true; done
	rm -rf "$dir"
}

# podman_bench_run DIR RUNS BATCH WARMUP: the timing loop; prints the table and the ratio.
podman_bench_run() {
	local dir=$1
	BENCH_DIR_PM=$dir BENCH_RUNS=$2 BENCH_BATCH=$3 BENCH_WARMUP=$4 podman_bench_env "$dir" python3 - <<-'PY'
		import math, os, statistics, subprocess, sys, time

		d = os.environ["BENCH_DIR_PM"]
		runs, batch, warmup = (int(os.environ[k]) for k in ("BENCH_RUNS", "BENCH_BATCH", "BENCH_WARMUP"))
		base = ["podman", "--root", d + "/graph", "--runroot", d + "/run"]
		image = "localhost/fbbench-busybox:latest"
		names = ["forkbox", "runc"]
		samples = {n: [] for n in names}
		failed = {n: 0 for n in names}
		last_error = {}

		def once(name, record):
		    argv = base + ["--runtime", name, "run", "--rm", image, "true"]
		    t0 = time.perf_counter_ns()
		    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
		                       stderr=subprocess.PIPE)
		    ms = (time.perf_counter_ns() - t0) / 1e6
		    if p.returncode != 0:
		        failed[name] += 1
		        last_error[name] = p.stderr.decode(errors="replace").strip()
		    elif record:
		        samples[name].append(ms)

		for _ in range(warmup):
		    for n in names:
		        once(n, False)
		for n in names:
		    failed[n] = 0
		done, rnd = {n: 0 for n in names}, 0
		while any(done[n] < runs for n in names):
		    for n in (names if rnd % 2 == 0 else names[::-1]):
		        for _ in range(min(batch, runs - done[n])):
		            once(n, True)
		            done[n] += 1
		    rnd += 1

		def p90(v):
		    s = sorted(v)
		    return s[max(0, math.ceil(0.9 * len(s)) - 1)]

		print("podman run --rm IMG true   runs   median ms     p90 ms   failed")
		stats = {}
		for n in names:
		    v = samples[n]
		    if v:
		        stats[n] = (statistics.median(v), p90(v))
		        print("%-24s %6d %11.1f %10.1f %8d" % (n, len(v), stats[n][0], stats[n][1], failed[n]))
		    else:
		        print("%-24s %6d %11s %10s %8d" % (n, 0, "-", "-", failed[n]))
		    if failed[n]:
		        print("    last failure: %s" % last_error[n][:300])
		if len(stats) == 2:
		    print("ratio runc/forkbox: median %.2f, p90 %.2f; median difference %.1f ms" % (
		        stats["runc"][0] / stats["forkbox"][0], stats["runc"][1] / stats["forkbox"][1],
		        stats["runc"][0] - stats["forkbox"][0]))
		sys.exit(1 if any(failed.values()) else 0)
	PY
}

[[ ${PODMAN_BENCH_LIB:-} == 1 ]] && return 0

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
runs=60
batch=5
warmup=3
while [[ $# -gt 0 ]]; do
	case $1 in
	-n) runs=$2; shift 2 ;;
	-k) batch=$2; shift 2 ;;
	-w) warmup=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "managers-podman.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
for n in "$runs" "$batch" "$warmup"; do
	[[ $n =~ ^[0-9]+$ ]] || { echo "managers-podman.sh: -n, -k and -w want numbers" >&2; exit 2; }
done
[[ $runs -gt 0 && $batch -gt 0 ]] || { echo "managers-podman.sh: -n and -k want positive numbers" >&2; exit 2; }

FORKBOX=${FORKBOX:-$repo/build/forkbox}
RUNC=${RUNC:-$(command -v runc || echo /usr/sbin/runc)}
[[ $(id -u) -eq 0 ]] || { echo "managers-podman.sh: needs root" >&2; exit 1; }
for tool in podman conmon python3; do
	command -v "$tool" >/dev/null || { echo "managers-podman.sh: $tool is missing (make deps)" >&2; exit 1; }
done
[[ -x $FORKBOX ]] || { echo "managers-podman.sh: $FORKBOX is not built (make, or set FORKBOX)" >&2; exit 1; }
[[ -x $RUNC ]] || { echo "managers-podman.sh: runc not found (set RUNC)" >&2; exit 1; }

bench_dir=${BENCH_DIR:-/var/tmp/forkbox-bench}
mkdir -p "$bench_dir"
work=$(mktemp -d "$bench_dir/podman.XXXXXX")
trap 'podman_bench_teardown "$work"' EXIT
podman_bench_setup "$work"
podman_bench_run "$work" "$runs" "$batch" "$warmup"
