#!/usr/bin/env bats
# `events`: a container's cgroup stats and OOM notifications as JSON lines, like runc's.

load helpers

# start_events ARGS...: `events ARGS` in the background, its stdout in $EVENTS_OUT; the pid
# in $EVENTS_PID (killed by fb_teardown if the test leaves it running). The binary is run
# directly, not through the runtime function: $! is then its own pid, not a subshell's.
start_events() {
	EVENTS_OUT=$BATS_TEST_TMPDIR/events.out
	# Made here: the background job's redirection opens it only once that job runs, which a
	# busy machine may not do before the first wait_for_events reads it.
	: >"$EVENTS_OUT"
	"$FORKBOX" --root "$ROOT" events "$@" </dev/null >"$EVENTS_OUT" 2>"$BATS_TEST_TMPDIR/events.err" 3>&- 4>&- &
	EVENTS_PID=$!
	FB_PIDS+=("$EVENTS_PID")
}

# wait_for_events N [SECONDS]: poll until the events output has at least N lines.
wait_for_events() {
	local want=$1 secs=${2:-20} i n=0
	for ((i = 0; i < secs * 20; i++)); do
		n=$(wc -l <"$EVENTS_OUT")
		((n >= want)) && return 0
		sleep 0.05
	done
	echo "events: $n lines after ${secs}s, wanted $want; stderr:" >&2
	cat "$BATS_TEST_TMPDIR/events.err" >&2
	return 1
}

# wait_for_events_exit [SECONDS]: poll until the background events process has ended,
# then set $status to its exit status.
wait_for_events_exit() {
	wait_for_pid_gone "$EVENTS_PID" "${1:-20}" || return 1
	status=0
	wait "$EVENTS_PID" || status=$?
}

# start_waiting_container FILE [SH...]: a running container whose shell waits until
# /tmp/FILE exists in its rootfs, then runs SH.
start_waiting_container() {
	local file=$1
	shift
	set_args /bin/sh -c "while [ ! -e /tmp/$file ]; do sleep 0.05; done; $*"
	run_detached "$CID"
	wait_for_status "$CID" running
}

@test "events --stats prints one stats event with the container's usage and limits" {
	update_config '.linux.resources.memory = {"limit": 33554432} | .linux.resources.pids = {"limit": 64}'
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	wait_for_status "$CID" running
	run --separate-stderr runtime events --stats "$CID"
	assert_success
	[[ ${#lines[@]} -eq 1 ]] || fail "expected one line, got: $output"
	jq -e --arg id "$CID" '.type == "stats" and .id == $id' <<<"$output"
	jq -e '.data.pids.current >= 1 and .data.pids.limit == 64' <<<"$output"
	jq -e '.data.memory.usage.limit == 33554432 and .data.memory.usage.usage > 0' <<<"$output"
	jq -e '.data.cpu.usage.total > 0' <<<"$output"
}

@test "events --stats reports hugetlb usage per page size" {
	skip_if_runc "runc 1.1 cannot set hugepageLimits on this hybrid host (no v1 hugetlb)"
	[[ -d /sys/kernel/mm/hugepages/hugepages-2048kB ]] || skip "no 2 MiB huge pages on this kernel"
	update_config '.linux.resources.hugepageLimits = [{"pageSize": "2MB", "limit": 4194304}]'
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	wait_for_status "$CID" running
	run --separate-stderr runtime events --stats "$CID"
	assert_success
	jq -e '.data.hugetlb["2MB"] | has("failcnt") and (.usage // 0) == 0' <<<"$output"
}

@test "events --stats has runc's field set" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	wait_for_status "$CID" running
	run --separate-stderr runtime events --stats "$CID"
	assert_success
	run jq -c '.data | keys' <<<"$output"
	assert_output '["blkio","cpu","cpuset","hugetlb","intel_rdt","memory","network_interfaces","pids"]'
	run jq -c '[(.data.cpu | keys), (.data.cpu.usage | has("kernel") and has("user")),
		(.data.memory | has("usage") and has("swap") and has("kernel") and has("kernelTCP")),
		(.data.memory.usage | has("limit") and has("failcnt"))]' <<<"$(runtime events --stats "$CID")"
	assert_output '[["throttling","usage"],true,true,true]'
}

@test "events --interval streams stats events until SIGTERM" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	wait_for_status "$CID" running
	start_events --interval 100ms "$CID"
	wait_for_events 2
	kill -TERM "$EVENTS_PID"
	wait_for_events_exit
	is_runc || [[ $status -eq 0 ]] || fail "events exited with $status after SIGTERM"
	run jq -e --arg id "$CID" -s 'length >= 2 and all(.type == "stats" and .id == $id and (.data.pids.current >= 1))' \
		"$EVENTS_OUT"
	assert_success
}

@test "events stops streaming with status 0 when the container exits" {
	skip_if_runc "runc 1.1 streams until the container's cgroup is removed (delete)"
	start_waiting_container stop
	start_events --interval 100ms "$CID"
	wait_for_events 1
	touch "$BUNDLE/rootfs/tmp/stop"
	wait_for_events_exit
	[[ $status -eq 0 ]] || fail "events exited with $status"
	run container_status "$CID"
	assert_output stopped
}

@test "events stops streaming when the container is deleted" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	wait_for_status "$CID" running
	start_events --interval 100ms "$CID"
	wait_for_events 1
	run runtime delete --force "$CID"
	assert_success
	wait_for_events_exit
	is_runc || [[ $status -eq 0 ]] || fail "events exited with $status"
}

@test "events reports an oom event when the container exceeds its memory limit" {
	# Memory and memory+swap both 16 MiB: the hog cannot escape into swap.
	update_config '.linux.resources.memory = {"limit": 16777216, "swap": 16777216}'
	start_waiting_container hog 'x=$(head -c 67108864 /dev/zero | tr "\0" a); echo survived'
	start_events --interval 100ms "$CID"
	wait_for_events 1 # the OOM notification is registered before the first stats event
	touch "$BUNDLE/rootfs/tmp/hog"
	local i
	for ((i = 0; i < 400; i++)); do
		grep -q '"type":"oom"' "$EVENTS_OUT" && break
		sleep 0.05
	done
	run jq -c --arg id "$CID" 'select(.type == "oom")' "$EVENTS_OUT"
	assert_success
	assert_line "{\"type\":\"oom\",\"id\":\"$CID\"}"
	if ! is_runc; then
		# The OOM killer took the container's shell: the stream ends with it.
		wait_for_events_exit
		[[ $status -eq 0 ]] || fail "events exited with $status"
	fi
}

@test "events of an unknown container fails with 'does not exist'" {
	run --separate-stderr runtime events --stats no-such-container
	assert_failure
	assert_stderr_contains "does not exist"
	run --separate-stderr runtime events --interval 100ms no-such-container
	assert_failure
	assert_stderr_contains "does not exist"
}

@test "events of a stopped container fails with 'is not running'" {
	run runtime run --keep --bundle "$BUNDLE" "$CID"
	assert_success
	run --separate-stderr runtime events --stats "$CID"
	assert_failure
	assert_stderr_contains "container with id $CID is not running"
	run --separate-stderr runtime events "$CID"
	assert_failure
	assert_stderr_contains "is not running"
}

@test "events refuses an interval that is not a positive Go duration" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	wait_for_status "$CID" running
	run runtime events --interval 5 "$CID"
	assert_failure
	assert_output --partial 'invalid value "5" for flag -interval'
	run --separate-stderr runtime events --interval 0 "$CID"
	assert_failure
	assert_stderr_contains "duration interval must be greater than 0"
	run --separate-stderr runtime events --interval -1s "$CID"
	assert_failure
	assert_stderr_contains "duration interval must be greater than 0"
}

@test "events requires a container id" {
	run runtime events
	assert_failure
}
