#!/usr/bin/env bats
# `pause` and `resume`: the cgroup freezer stops and restarts every process of a container.

load helpers

# start_counter: a running container whose shell prints an increasing count every 20 ms.
start_counter() {
	set_args /bin/sh -c 'i=0; while true; do i=$((i+1)); echo $i; sleep 0.02; done'
	run_detached "$CID"
	wait_for_output "$CID" 3
}

# lines_out ID: how many lines the container has printed so far.
lines_out() {
	wc -l <"$BATS_TEST_TMPDIR/$1.out"
}

@test "pause makes state say paused and the processes stop running" {
	start_counter
	run runtime pause "$CID"
	assert_success
	run container_status "$CID"
	assert_output paused
	local before after
	before=$(lines_out "$CID")
	sleep 0.5
	after=$(lines_out "$CID")
	[[ $before == "$after" ]] || fail "counter advanced while paused: $before -> $after"
	run runtime list
	assert_success
	assert_line --regexp "^$CID +[0-9]+ +paused "
}

@test "resume makes a paused container run again" {
	start_counter
	runtime pause "$CID"
	local before after
	before=$(lines_out "$CID")
	run runtime resume "$CID"
	assert_success
	run container_status "$CID"
	assert_output running
	sleep 0.5
	after=$(lines_out "$CID")
	((after > before)) || fail "counter did not advance after resume: $before -> $after"
}

@test "pause of a stopped container fails with 'not running'" {
	run runtime run --keep --bundle "$BUNDLE" "$CID"
	assert_success
	run --separate-stderr runtime pause "$CID"
	assert_failure
	assert_stderr_contains "not running"
}

@test "pause of a created container fails" {
	skip_if_runc "runc 1.1 pauses a created container too"
	create_container "$CID"
	run --separate-stderr runtime pause "$CID"
	assert_failure
	assert_stderr_contains "not running"
	run container_status "$CID"
	assert_output created
}

@test "resume of a running container fails with 'not paused'" {
	start_counter
	run --separate-stderr runtime resume "$CID"
	assert_failure
	assert_stderr_contains "not paused"
	run container_status "$CID"
	assert_output running
}

@test "pause and resume of an unknown container fail with 'does not exist'" {
	run --separate-stderr runtime pause no-such-container
	assert_failure
	assert_stderr_contains "does not exist"
	run --separate-stderr runtime resume no-such-container
	assert_failure
	assert_stderr_contains "does not exist"
}

@test "delete without --force of a paused container fails and it stays paused" {
	start_counter
	runtime pause "$CID"
	run --separate-stderr runtime delete "$CID"
	assert_failure
	assert_stderr_contains "paused"
	run container_status "$CID"
	assert_output paused
}

@test "kill -9 of a paused container stops it" {
	start_counter
	local pid
	pid=$(container_pid "$CID")
	runtime pause "$CID"
	run runtime kill "$CID" 9
	assert_success
	wait_for_pid_gone "$pid"
	wait_for_status "$CID" stopped
	run runtime delete "$CID"
	assert_success
	[[ ! -e $ROOT/$CID ]]
}

@test "delete --force of a paused container kills it and leaves nothing behind" {
	start_counter
	local pid cg
	pid=$(container_pid "$CID")
	cg=$(awk -F: '$2 == "freezer" {print $3}' "/proc/$pid/cgroup")
	runtime pause "$CID"
	run runtime delete --force "$CID"
	assert_success
	wait_for_pid_gone "$pid"
	run runtime state "$CID"
	assert_failure
	[[ ! -e $ROOT/$CID ]]
	if [[ -n $cg ]]; then
		[[ ! -d /sys/fs/cgroup/freezer$cg ]] || fail "freezer cgroup $cg left behind"
	fi
}

# wait_stopped PID: the process stopped itself (the FORKBOX_TEST_STOP_AT hook).
wait_stopped() {
	local i
	for ((i = 0; i < 1000; i++)); do
		[[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == T ]] && return 0
		sleep 0.01
	done
	fail "process $1 did not stop at its mark"
}

# freezer_cgroup PID: the process's v1 freezer cgroup, or nothing.
freezer_cgroup() {
	awk -F: '$2 == "freezer" {print $3}' "/proc/$1/cgroup"
}

# exec_in_background ARGS...: `forkbox exec ARGS` in the background, output in exec.out;
# its pid in EXEC_PID.
exec_in_background() {
	"$FORKBOX" --root "$ROOT" exec "$@" </dev/null >"$BATS_TEST_TMPDIR/exec.out" 2>&1 3>&- 4>&- &
	EXEC_PID=$!
	FB_PIDS+=("$EXEC_PID")
}

# assert_container_gone PID CGROUP: init and the container's freezer cgroup are gone.
assert_container_gone() {
	wait_for_pid_gone "$1"
	[[ ! -e $ROOT/$CID ]] || fail "state directory left"
	if [[ -n $2 ]]; then
		[[ ! -d /sys/fs/cgroup/freezer$2 ]] || fail "freezer cgroup $2 left behind"
	fi
}

@test "an exec that a pause overtakes fails with 'paused' and runs nothing after the resume" {
	skip_if_runc "FORKBOX_TEST_STOP_AT is forkbox's own"
	start_counter
	# Stopped after its check that the container is not paused: the pause lands in between.
	FORKBOX_TEST_STOP_AT="exec: checked" exec_in_background "$CID" /bin/fbhelper echo overtaken
	wait_stopped "$EXEC_PID"
	runtime pause "$CID"
	kill -CONT "$EXEC_PID"
	local rc=0
	wait "$EXEC_PID" || rc=$?
	((rc != 0)) || fail "exec succeeded in a paused container: $(cat "$BATS_TEST_TMPDIR/exec.out")"
	grep -q "cannot exec in a paused container" "$BATS_TEST_TMPDIR/exec.out" ||
		fail "exec: $(cat "$BATS_TEST_TMPDIR/exec.out")"
	runtime resume "$CID"
	local before
	before=$(lines_out "$CID")
	sleep 0.3
	(($(lines_out "$CID") > before)) || fail "the container did not run again after the resume"
	! grep -q overtaken "$BATS_TEST_TMPDIR/exec.out" || fail "the overtaken exec ran its process"
}

@test "an exec waiting in a paused container ends on SIGTERM, and delete --force then leaves nothing" {
	start_counter
	local pid cg
	pid=$(container_pid "$CID")
	cg=$(freezer_cgroup "$pid")
	runtime pause "$CID"
	exec_in_background --ignore-paused "$CID" /bin/fbhelper echo never
	# Its child joins the frozen cgroups and waits there for the resume.
	sleep 0.3
	pid_alive "$EXEC_PID" || fail "exec returned: $(cat "$BATS_TEST_TMPDIR/exec.out")"
	kill -TERM "$EXEC_PID"
	wait_for_pid_gone "$EXEC_PID"
	local rc=0
	wait "$EXEC_PID" || rc=$?
	((rc != 0)) || fail "exec succeeded"
	if ! is_runc; then
		grep -q "interrupted by SIGTERM" "$BATS_TEST_TMPDIR/exec.out" || fail "exec: $(cat "$BATS_TEST_TMPDIR/exec.out")"
	fi
	runtime delete --force "$CID"
	assert_container_gone "$pid" "$cg"
}

@test "delete --force of a paused container with an exec waiting in it ends both and leaves nothing" {
	start_counter
	local pid cg
	pid=$(container_pid "$CID")
	cg=$(freezer_cgroup "$pid")
	runtime pause "$CID"
	exec_in_background --ignore-paused "$CID" /bin/fbhelper echo never
	sleep 0.3
	runtime delete --force "$CID"
	wait_for_pid_gone "$EXEC_PID"
	local rc=0
	wait "$EXEC_PID" || rc=$?
	((rc != 0)) || fail "exec succeeded"
	assert_container_gone "$pid" "$cg"
}
