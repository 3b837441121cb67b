#!/usr/bin/env bash
# managers.sh - forkbox against runc as seen by the container managers: the median wall time
# of `podman run --rm IMG true` (bench/managers-podman.sh) and of `ctr run --rm IMG ID true`
# through containerd's runc shim (bench/managers-containerd.sh), each in alternating batches
# of the two runtimes, with the ratio runc/forkbox (> 1: forkbox is faster).
#
# usage: bench/managers.sh [-n RUNS] [--podman-only | --containerd-only]
#   -n RUNS   timed runs per runtime and manager (default 40)
# environment: FORKBOX, RUNC, BENCH_DIR as the two scripts take them.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
runs=40
do_podman=1
do_containerd=1
while [[ $# -gt 0 ]]; do
	case $1 in
	-n) runs=$2; shift 2 ;;
	--podman-only) do_containerd=0; shift ;;
	--containerd-only) do_podman=0; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "managers.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done

status=0
if [[ $do_podman -eq 1 ]]; then
	echo "== podman run --rm IMG true (forkbox vs runc)"
	"$here/managers-podman.sh" -n "$runs" || status=1
fi
if [[ $do_containerd -eq 1 ]]; then
	echo "== ctr run --rm IMG ID true (forkbox vs runc)"
	"$here/managers-containerd.sh" -n "$runs" || status=1
fi
exit $status
