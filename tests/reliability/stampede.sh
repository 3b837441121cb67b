#!/usr/bin/env bash
# Stampedes (issue #18): 100 parallel creates of distinct ids; 20 concurrent verbs on one id
# (state is never torn; each verb runs, or fails with a clear "not running"/"does not exist"
# style error, never a crash or a hang); create/delete of one id in a tight loop from 4
# processes. Nothing may be left behind.
#
# usage: stampede.sh [--quick]
# shellcheck source=tests/reliability/lib.bash
[[ ${1:-} == --quick ]] && REL_QUICK=1
. "$(dirname "$0")/lib.bash"

# Distinct cgroups per container: no cgroupsPath (forkbox's /forkbox/<id>; ids carry the tag).
B=$REL_WORK/sleep
rel_bundle "$B" /bin/fbhelper sleep 1000 || exit 1
rel_jq "$B/config.json" 'del(.linux.cgroupsPath)'
ROOT=$REL_WORK/root
rel_tmpfs "$ROOT" 64m
REL_ROOTS+=("$ROOT")

# The errors a verb may end with when another verb got there first, as runc words them
# (plus forkbox's own wording of the same cases). Anything else is a defect.
EXPECTED='container .* does not exist|container does not exist|container not running|container not paused|cannot start an already running container|cannot start a container that has stopped|cannot delete container .* that is not stopped|container with id exists|container init exited before start|is busy|cannot exec in a (stopped|paused) container|container .* is (not running|paused|stopped)|container is paused'

# judge LABEL RC ERR: "" or the problem.
judge() {
	local label=$1 rc=$2 err=$3
	((rc == 0)) && return 0
	((rc == 124)) && { echo "$label hung; "; return 0; }
	# 255: exec's own failure (runc's code too); 129-254: a signal.
	((rc > 128 && rc < 255)) && { echo "$label killed by signal $((rc - 128)): $(head -c 200 "$err"); "; return 0; }
	grep -qE "$EXPECTED" "$err" && rel_clear_error "$err" && return 0
	echo "$label rc $rc: $(head -c 200 "$err" | tr '\n' ' '); "
}

scenario_parallel_creates() {
	local n runs leaks=0 defects=0 before after out i problems=""
	n=$(rel_count 100 100)
	before=$(rel_snapshot "$ROOT")
	for ((i = 0; i < n; i++)); do
		timeout 60 "$FB" --root "$ROOT" create --bundle "$B" "$REL_TAG-p$i" </dev/null >/dev/null 2>"$REL_WORK/p$i.err" &
	done
	local rcs=() pid
	for pid in $(jobs -p); do
		wait "$pid"
		rcs+=($?)
	done
	for ((i = 0; i < n; i++)); do
		((rcs[i] == 0)) || problems+="create $i: rc ${rcs[i]}: $(head -c 200 "$REL_WORK/p$i.err"); "
	done
	local listed
	listed=$("$FB" --root "$ROOT" list --format json | jq '[.[] | select(.status == "created")] | length')
	((listed == n)) || problems+="$listed of $n created; "
	# And all deleted at once.
	for ((i = 0; i < n; i++)); do
		timeout 60 "$FB" --root "$ROOT" delete --force "$REL_TAG-p$i" 2>"$REL_WORK/pd$i.err" &
	done
	wait
	for ((i = 0; i < n; i++)); do
		[[ -s $REL_WORK/pd$i.err ]] && problems+="delete $i: $(head -c 200 "$REL_WORK/pd$i.err"); "
	done
	runs=$((2 * n))
	[[ -n $problems ]] && { defects=1; echo "  parallel-creates: $problems" >&2; }
	sleep 0.2
	after=$(rel_snapshot "$ROOT")
	out=$(rel_compare "$before" "$after") || leaks=$?
	rel_report stampede-100-creates "$runs" "$leaks" "$defects" "$out"
}

# verb_worker N SEED: N random verbs on $ID; one line per verb: "VERB RC ERRFILE".
verb_worker() {
	local n=$1 w=$2 i v rc err out
	local verbs=(state state kill0 ps pause resume exec start delete list)
	RANDOM=$w
	for ((i = 0; i < n; i++)); do
		v=${verbs[RANDOM % ${#verbs[@]}]}
		err=$REL_WORK/v$w.$i.err
		out=$REL_WORK/v$w.$i.out
		case $v in
		state) timeout 30 "$FB" --root "$ROOT" state "$ID" >"$out" 2>"$err" ;;
		kill0) timeout 30 "$FB" --root "$ROOT" kill "$ID" 0 >"$out" 2>"$err" ;;
		ps) timeout 30 "$FB" --root "$ROOT" ps "$ID" >"$out" 2>"$err" ;;
		pause) timeout 30 "$FB" --root "$ROOT" pause "$ID" >"$out" 2>"$err" ;;
		resume) timeout 30 "$FB" --root "$ROOT" resume "$ID" >"$out" 2>"$err" ;;
		exec) timeout 30 "$FB" --root "$ROOT" exec "$ID" /bin/fbhelper true </dev/null >"$out" 2>"$err" ;;
		start) timeout 30 "$FB" --root "$ROOT" start "$ID" >"$out" 2>"$err" ;;
		delete) timeout 30 "$FB" --root "$ROOT" delete "$ID" >"$out" 2>"$err" ;;
		list) timeout 30 "$FB" --root "$ROOT" list --format json >"$out" 2>"$err" ;;
		esac
		rc=$?
		echo "$v $rc $err $out"
	done
}

scenario_concurrent_verbs() {
	local rounds runs=0 leaks=0 defects=0 before after out r w problems
	rounds=$(rel_count 20 4)
	before=$(rel_snapshot "$ROOT")
	for ((r = 0; r < rounds; r++)); do
		ID=$REL_TAG-v$r
		"$FB" --root "$ROOT" create --bundle "$B" "$ID" </dev/null >/dev/null 2>"$REL_WORK/vc.err" ||
			{ defects=$((defects + 1)); echo "  concurrent-verbs: create: $(cat "$REL_WORK/vc.err")" >&2; continue; }
		# 20 workers; in odd rounds a delete --force lands in the middle of them.
		for ((w = 0; w < 20; w++)); do
			verb_worker 10 $((r * 100 + w)) >"$REL_WORK/w$w.log" &
		done
		if ((r % 2)); then
			sleep 0.3
			timeout 30 "$FB" --root "$ROOT" delete --force "$ID" 2>"$REL_WORK/vdf.err" ||
				echo "delete-force 1 $REL_WORK/vdf.err /dev/null" >"$REL_WORK/wdf.log"
		fi
		wait
		problems=""
		local line v rc err o
		for f in "$REL_WORK"/w*.log; do
			while read -r v rc err o; do
				runs=$((runs + 1))
				# The exec'd process killed by a delete (--force, or of a container still
				# created, which runc deletes too): exec says so, 128+9.
				[[ $v == exec && $rc == 137 ]] && continue
				problems+=$(judge "$v" "$rc" "$err")
				if [[ $v == state && $rc == 0 ]]; then
					jq -e '.id and .status' "$o" >/dev/null 2>&1 || problems+="torn state output: $(head -c 200 "$o"); "
				fi
				if [[ $v == list && $rc == 0 ]]; then
					jq -e 'type == "array"' "$o" >/dev/null 2>&1 || problems+="torn list output: $(head -c 200 "$o"); "
				fi
			done <"$f"
		done
		rm -f "$REL_WORK"/w*.log "$REL_WORK"/wdf.log
		[[ -f $ROOT/$ID/state.json ]] && { jq -e .id "$ROOT/$ID/state.json" >/dev/null 2>&1 || problems+="torn state.json; "; }
		# Whatever state it is in now, delete --force ends it.
		timeout 30 "$FB" --root "$ROOT" delete --force "$ID" 2>"$REL_WORK/vd.err" || problems+="final delete: $(cat "$REL_WORK/vd.err"); "
		[[ -e $ROOT/$ID ]] && problems+="state dir left; "
		if [[ -n $problems ]]; then
			defects=$((defects + 1))
			echo "  concurrent-verbs round $r: $problems" >&2
		fi
		rm -f "$REL_WORK"/v*.err "$REL_WORK"/v*.out
	done
	sleep 0.3
	after=$(rel_snapshot "$ROOT")
	out=$(rel_compare "$before" "$after") || leaks=$?
	rel_report stampede-20-verbs-one-id "$runs" "$leaks" "$defects" "$out"
}

# churn_worker N W: create then delete --force of $ID, N times.
churn_worker() {
	local n=$1 w=$2 i rc
	for ((i = 0; i < n; i++)); do
		timeout 30 "$FB" --root "$ROOT" create --bundle "$B" "$ID" </dev/null >/dev/null 2>"$REL_WORK/c$w.err"
		rc=$?
		echo "create $rc $(judge create $rc "$REL_WORK/c$w.err")"
		timeout 30 "$FB" --root "$ROOT" delete --force "$ID" 2>"$REL_WORK/d$w.err"
		rc=$?
		echo "delete $rc $(judge delete $rc "$REL_WORK/d$w.err")"
	done
}

scenario_create_delete_churn() {
	local n runs=0 leaks=0 defects=0 before after out w made=0 problems=""
	n=$(rel_count 500 50)
	ID=$REL_TAG-churn
	before=$(rel_snapshot "$ROOT")
	for ((w = 0; w < 4; w++)); do
		churn_worker "$n" "$w" >"$REL_WORK/churn$w.log" &
	done
	wait
	local v rc rest
	for ((w = 0; w < 4; w++)); do
		while read -r v rc rest; do
			runs=$((runs + 1))
			[[ $v == create && $rc == 0 ]] && made=$((made + 1))
			[[ -n $rest ]] && problems+="$rest"
		done <"$REL_WORK/churn$w.log"
	done
	[[ -e $ROOT/$ID ]] && problems+="state dir left: $(ls -la "$ROOT/$ID" | tr '\n' ' '); "
	if [[ -n $problems ]]; then
		defects=$(grep -o '; ' <<<"$problems" | wc -l)
		echo "  create-delete-churn: $(head -c 2000 <<<"$problems")" >&2
	fi
	"$FB" --root "$ROOT" delete --force "$ID" 2>/dev/null
	sleep 0.3
	after=$(rel_snapshot "$ROOT")
	out=$(rel_compare "$before" "$after") || leaks=$?
	rel_report stampede-4x-create-delete "$runs" "$leaks" "$defects" "$out created $made"
}

for s in ${REL_SCENARIOS:-parallel_creates concurrent_verbs create_delete_churn}; do
	"scenario_$s"
done
exit "$REL_FAILED"
