#!/usr/bin/env bash
# Every reliability scenario of issue #18 (RELIABILITY.md lists them): resource faults,
# soaks, stampedes, and the kills (kills.sh) when present. Each scenario prints one line:
# name, runs, leaks found, defects (crashes, hangs, unclear errors, torn state), ok/FAIL.
# Exits non-zero when any scenario found a leak or a defect.
#
# usage: tests/reliability/run.sh [--quick] [SCRIPT...]
#   --quick   short counts (200 soak runs instead of 10,000), for `make test`
#   SCRIPT    some of: faults soak stampede kills (default: all)
#
# Each script runs in a private mount namespace (unshare -m, propagation private), so the
# mounts it counts are its own: nobody else's mount or unmount moves its figures.
set -u
here=$(cd "$(dirname "$0")" && pwd)
quick=()
scripts=()
for a in "$@"; do
	case $a in
	--quick) quick=(--quick) ;;
	faults | soak | stampede | kills) scripts+=("$a") ;;
	*) echo "usage: $0 [--quick] [faults|soak|stampede|kills]..." >&2; exit 2 ;;
	esac
done
((${#scripts[@]})) || scripts=(faults stampede soak kills)
[[ $(id -u) == 0 ]] || { echo "run.sh: the scenarios need root" >&2; exit 2; }

status=0
start=$(date +%s)
for s in "${scripts[@]}"; do
	script=$here/$s.sh
	if [[ ! -x $script ]]; then
		[[ $s == kills ]] && { echo "(kills.sh not present: skipped)"; continue; }
		echo "$script missing" >&2
		status=1
		continue
	fi
	echo "== $s"
	nice -n 5 unshare --mount --propagation private -- "$script" "${quick[@]}" || status=1
done
echo "== reliability: $([[ $status == 0 ]] && echo ok || echo FAILED) in $(($(date +%s) - start)) s"
exit $status
