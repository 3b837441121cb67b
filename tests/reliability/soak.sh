#!/usr/bin/env bash
# Soaks (issue #18): N cold `forkbox run`s, N `forkbox --zygote run`s against a daemon and N
# sandbox runs, each counted before and after (at rest, after a warm-up): this run's
# processes, cgroup directories, mounts (private mount namespace), files under the state
# root, and the daemon's (and sandbox service's) fds and RSS. Zero growth, no failed run.
#
# usage: soak.sh [--quick] [-n RUNS]   (default 10000 runs each; --quick: 200)
# shellcheck source=tests/reliability/lib.bash
RUNS=
while (($#)); do
	case $1 in
	--quick) REL_QUICK=1 ;;
	-n) RUNS=$2; shift ;;
	*) echo "usage: soak.sh [--quick] [-n RUNS]" >&2; exit 2 ;;
	esac
	shift
done
. "$(dirname "$0")/lib.bash"
RUNS=${RUNS:-$(rel_count 10000 200)}
WARMUP=20
# RSS that grows by more than this between the warm-up and the end is a leak (allocator
# caches make a few hundred KiB of noise).
RSS_SLACK_KB=${RSS_SLACK_KB:-2048}

B=$REL_WORK/true
rel_bundle "$B" || exit 1
SANDBOX_CLIENT=${SANDBOX_CLIENT:-$REPO_DIR/build/sandbox-client}

# wait_rest SOCK [READY]: until the daemon's counters stop moving (pools refilled), and
# with READY until it has that many templates ready again (at most 60 s).
wait_rest() {
	local sock=$1 want=${2:-} last="" now i
	for ((i = 0; i < 200; i++)); do
		now=$("$FB" daemon --socket "$sock" --stats 2>/dev/null | tr ' ' '\n' | sed -n 's/^ready=//p')
		if [[ -n $now && $now == "$last" ]] && [[ -z $want || $now == "$want" ]]; then
			sleep 0.5
			return 0
		fi
		last=$now
		sleep 0.3
	done
}

ready_of() { "$FB" daemon --socket "$1" --stats 2>/dev/null | tr ' ' '\n' | sed -n 's/^ready=//p'; }

# loop_runs KIND N START: N runs of KIND; prints the failures (the first 5 in full).
loop_runs() {
	local kind=$1 n=$2 start=$3 i rc failed=0 err
	err=$REL_WORK/soak-$kind.err
	for ((i = start; i < start + n; i++)); do
		case $kind in
		cold) "$FB" --root "$ROOT" run --bundle "$B" "$REL_TAG-s$i" </dev/null >/dev/null 2>"$err" ;;
		zygote) "$FB" --root "$ROOT" --zygote="$SOCK" run --bundle "$B" "$REL_TAG-z$i" </dev/null >/dev/null 2>"$err" ;;
		esac
		rc=$?
		if ((rc != 0)); then
			failed=$((failed + 1))
			((failed <= 5)) && echo "  soak-$kind: run $i: rc $rc: $(head -c 300 "$err")" >&2
		fi
	done
	return $((failed > 255 ? 255 : failed))
}

# measure PIDS...: fds and RSS of each.
measure() {
	local p out=""
	for p in "$@"; do out+="fds[$p]=$(rel_fds "$p") rss_kb[$p]=$(rel_rss_kb "$p") "; done
	echo "$out"
}

# leaks_of BEFORE AFTER: fd growth counts one by one; RSS over the slack counts one.
daemon_leaks() {
	local before=$1 after=$2 kv k a b n=0 out=""
	for kv in $after; do
		k=${kv%%=*}
		a=${kv#*=}
		b=$(tr ' ' '\n' <<<"$before" | grep -F "$k=" | cut -d= -f2)
		[[ -n $b ]] || continue
		case $k in
		fds*) ((a > b)) && { n=$((n + a - b)); out+="$k+$((a - b)) "; } ;;
		rss*) ((a > b + RSS_SLACK_KB)) && { n=$((n + 1)); out+="$k+$((a - b))KiB "; } ;;
		esac
	done
	echo "$out"
	return $n
}

soak_cold() {
	ROOT=$REL_WORK/cold-root
	rel_tmpfs "$ROOT" 64m
	REL_ROOTS+=("$ROOT")
	loop_runs cold "$WARMUP" 0
	local before after out leaks=0 failed=0 t0 t1
	before=$(rel_snapshot "$ROOT")
	t0=$(date +%s%N)
	loop_runs cold "$RUNS" "$WARMUP" || failed=$?
	t1=$(date +%s%N)
	after=$(rel_snapshot "$ROOT")
	out=$(rel_compare "$before" "$after") || leaks=$?
	rel_report soak-cold-run "$RUNS" "$leaks" "$failed" "$out $((RUNS * 1000000000 / (t1 - t0 + 1)))/s [before: $before after: $after]"
}

soak_zygote() {
	ROOT=$REL_WORK/zygote-root
	SOCK=$REL_WORK/zygote.sock
	rel_tmpfs "$ROOT" 64m
	REL_ROOTS+=("$ROOT")
	# The containers' cgroup parent exists before the daemon, as a manager's slice does: the
	# daemon puts its spare cgroups in it, and a parent made by a container's create cannot be
	# removed by its delete while spares are inside (the daemon does not own it).
	local h
	for h in /sys/fs/cgroup/*/; do
		[[ -f ${h}cgroup.procs && ! -f ${h}cgroup.controllers ]] || continue
		mkdir -p "$h${REL_CG#/}"
		if [[ -f ${h}cpuset.cpus ]]; then
			cat "${h}cpuset.cpus" >"$h${REL_CG#/}/cpuset.cpus"
			cat "${h}cpuset.mems" >"$h${REL_CG#/}/cpuset.mems"
		fi
	done
	local pre
	pre=$(rel_snapshot "$ROOT")
	rel_daemon "$SOCK" "$REL_WORK/zygote-daemon.log" --pool 4 --warm "$B" --root "$ROOT" --no-sandboxes ||
		{ rel_report soak-zygote-run 0 0 1 "no daemon"; return; }
	local dpid=$REL_DAEMON_PID
	loop_runs zygote "$WARMUP" 0
	wait_rest "$SOCK"
	local before after failed=0 dbefore dafter dout dleaks=0 served0 served1 t0 t1
	REL_SKIP_SPARES=1
	before=$(rel_snapshot "$ROOT")
	dbefore=$(measure "$dpid")
	served0=$("$FB" daemon --socket "$SOCK" --stats | tr ' ' '\n' | sed -n 's/^served=//p')
	t0=$(date +%s%N)
	local ready0
	ready0=$(ready_of "$SOCK")
	loop_runs zygote "$RUNS" "$WARMUP" || failed=$?
	t1=$(date +%s%N)
	wait_rest "$SOCK" "$ready0"
	served1=$("$FB" daemon --socket "$SOCK" --stats | tr ' ' '\n' | sed -n 's/^served=//p')
	after=$(rel_snapshot "$ROOT")
	local out="" leaks=0
	# Each ready template holds one spare cgroup per hierarchy: spares beyond the pool leak.
	local ready1 spares
	ready1=$(ready_of "$SOCK")
	spares=$(compgen -G "/sys/fs/cgroup/memory$REL_CG/.zygote-$dpid-*" | wc -l)
	((spares > ready1)) && { leaks=$((leaks + spares - ready1)); out+=" spares $spares for $ready1 templates"; }
	dafter=$(measure "$dpid")
	REL_SKIP_SPARES=0
	out+=$(rel_compare "$before" "$after") || leaks=$((leaks + $?))
	dout=$(daemon_leaks "$dbefore" "$dafter") || dleaks=$?
	rel_stop_daemon "$dpid"
	# Stopped, the daemon takes its templates and spare cgroups with it.
	local post pout pleaks=0
	post=$(rel_snapshot "$ROOT")
	pout=$(rel_compare "$pre" "$post") || pleaks=$?
	((pleaks)) && echo "  soak-zygote: left after the daemon stopped: $(rel_cgroup_dirs | tr '\n' ' ')" >&2
	rel_report soak-zygote-run "$RUNS" $((leaks + dleaks + pleaks)) "$failed" \
		"$out $dout ${pout:+after stop: $pout} served $((served1 - served0)) warm; $((RUNS * 1000000000 / (t1 - t0 + 1)))/s [before: $dbefore after: $dafter]"
}

soak_sandbox() {
	[[ -x $SANDBOX_CLIENT ]] || make -C "$REPO_DIR" -s build/sandbox-client >/dev/null || {
		rel_report soak-sandbox-run 0 0 1 "no build/sandbox-client"
		return
	}
	SOCK=$REL_WORK/sandbox.sock
	local pre
	pre=$(rel_snapshot)
	rel_daemon "$SOCK" "$REL_WORK/sandbox-daemon.log" --pool 1 || { rel_report soak-sandbox-run 0 0 1 "no daemon"; return; }
	local dpid=$REL_DAEMON_PID spid
	"$SANDBOX_CLIENT" "$SOCK" "$WARMUP" true >/dev/null 2>&1
	spid=$("$FB" sandbox --socket "$SOCK" --info 2>/dev/null | jq -r .service_pid)
	wait_rest "$SOCK"
	sleep 1
	local before after out leaks=0 failed=0 dbefore dafter dout dleaks=0 rc t0 t1
	before="$(rel_snapshot) svc_cgroups=$(compgen -G "/sys/fs/cgroup/*/forkbox-sandbox/$spid-*" | wc -l)"
	dbefore=$(measure "$dpid" "$spid")
	t0=$(date +%s%N)
	"$SANDBOX_CLIENT" "$SOCK" "$RUNS" true >"$REL_WORK/sandbox-lat" 2>"$REL_WORK/sandbox.err"
	rc=$?
	t1=$(date +%s%N)
	local done_runs
	done_runs=$(wc -l <"$REL_WORK/sandbox-lat")
	((rc != 0 || done_runs != RUNS)) && {
		failed=$((RUNS - done_runs > 0 ? RUNS - done_runs : 1))
		echo "  soak-sandbox: rc $rc after $done_runs runs: $(head -c 300 "$REL_WORK/sandbox.err")" >&2
	}
	wait_rest "$SOCK"
	sleep 1
	after="$(rel_snapshot) svc_cgroups=$(compgen -G "/sys/fs/cgroup/*/forkbox-sandbox/$spid-*" | wc -l)"
	dafter=$(measure "$dpid" "$spid")
	out=$(rel_compare "$before" "$after") || leaks=$?
	dout=$(daemon_leaks "$dbefore" "$dafter") || dleaks=$?
	rel_stop_daemon "$dpid"
	local post pout pleaks=0 left
	post=$(rel_snapshot)
	pout=$(rel_compare "$pre" "$post") || pleaks=$?
	# The service's cgroups, named after its pid.
	left=$(compgen -G "/sys/fs/cgroup/*/forkbox-sandbox/$spid-*" | wc -l)
	((left)) && { pleaks=$((pleaks + left)); pout+=" service cgroups+$left"; }
	local median
	median=$(sort -n "$REL_WORK/sandbox-lat" | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }')
	rel_report soak-sandbox-run "$RUNS" $((leaks + dleaks + pleaks)) "$failed" \
		"$out $dout ${pout:+after stop: $pout} median ${median}us; $((RUNS * 1000000000 / (t1 - t0 + 1)))/s [before: $dbefore after: $dafter]"
}

for s in ${REL_SCENARIOS:-cold zygote sandbox}; do
	"soak_$s"
done
exit "$REL_FAILED"
