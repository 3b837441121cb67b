#!/usr/bin/env bash
# floor.sh - the process start-up floor under a container start on this machine.
#
# A `forkbox --zygote create` + `start` + wait of the demo bundle's `true` is three process
# start-ups before any runtime work: the `create` process, the `start` process and the
# container's busybox `true` (a static glibc program). This times, alternating in one loop
# (bench/process-floor.cpp: vfork + execve + wait):
#   nolibc           a static program with no libc that exits at its first instruction
#   glibc            an empty static glibc program: what glibc's start-up costs by itself
#   busybox true     the container's program, run on the host
#   forkbox version  `forkbox --version`: forkbox's own start-up and exit
#   forkbox start    `forkbox start` of a container that does not exist: start-up, flag
#                    parsing, the state root lookup, the error
# then prints the sums that bound create+start+wait from below, and how many cpuid
# instructions glibc's start-up executes (counted with gdb breakpoints, when gdb is there):
# this VM traps cpuid, so each costs microseconds instead of nanoseconds. Last, what a
# syscall, a page fault, a page's first touch and a fork cost here (bench/memory-costs.cpp):
# on these PVM guests most of a container start's time is there, not in forkbox's code.
#
# usage: bench/floor.sh [-n RUNS]   (default 300)
# environment: FORKBOX (default build/forkbox), BUSYBOX (default /bin/busybox)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
FORKBOX=${FORKBOX:-$repo/build/forkbox}
BUSYBOX=${BUSYBOX:-/bin/busybox}
runs=300
while [[ $# -gt 0 ]]; do
	case $1 in
	-n) runs=$2; shift 2 ;;
	*) echo "usage: bench/floor.sh [-n RUNS]" >&2; exit 2 ;;
	esac
done
[[ -x $FORKBOX ]] || { echo "floor.sh: $FORKBOX is not built" >&2; exit 1; }
[[ -x $BUSYBOX ]] || { echo "floor.sh: $BUSYBOX missing (apt-get install busybox-static)" >&2; exit 1; }
# Under `make bench` these are built already; the parent's jobserver is not ours.
MAKEFLAGS= make -s -C "$repo" build/bench-process-floor build/floor-nolibc build/floor-glibc build/bench-memory-costs
build=$repo/build
empty_root=$(mktemp -d /tmp/forkbox-floor.XXXXXX)
trap 'rm -rf "$empty_root"' EXIT

out=$("$build/bench-process-floor" "$runs" \
	"nolibc=$build/floor-nolibc" \
	"glibc=$build/floor-glibc" \
	"busybox true=$BUSYBOX true" \
	"forkbox version=$FORKBOX --version" \
	"forkbox start=$FORKBOX --root $empty_root start no-such-container")
echo "$out"
median() { awk -v n="$1" -F'  +' '$1 == n { print $3 }' <<<"$out"; }
glibc=$(median glibc)
busybox=$(median "busybox true")
version=$(median "forkbox version")
start=$(median "forkbox start")
echo "floor under create+start+wait (medians, us):"
echo "  any two static glibc processes + busybox true:  $((2 * glibc + busybox))"
echo "  forkbox version x2 + busybox true:              $((2 * version + busybox))"
echo "  forkbox start (error path) x2 + busybox true:   $((2 * start + busybox))"

if command -v gdb >/dev/null; then
	count_cpuid() {
		local cmds
		cmds=$(mktemp)
		{
			echo 'set $n = 0'
			objdump -d "$1" | awk -F'\t' '$3 ~ /^cpuid/ { sub(":", "", $1); gsub(" ", "", $1); print $1 }' |
				while read -r addr; do
					printf 'break *0x%s\ncommands\nsilent\nset $n = $n + 1\ncontinue\nend\n' "$addr"
				done
			echo run
			echo 'printf "%d\n", $n'
		} >"$cmds"
		gdb -q -batch -x "$cmds" --args "$@" 2>/dev/null | tail -1
		rm -f "$cmds"
	}
	echo "cpuid instructions executed at start-up (gdb):"
	echo "  glibc:            $(count_cpuid "$build/floor-glibc")"
	echo "  forkbox version:  $(count_cpuid "$FORKBOX" --version)"
fi

echo "what memory and the kernel cost here (build/bench-memory-costs, forkbox's binary as the file):"
"$build/bench-memory-costs" "$FORKBOX" 20
