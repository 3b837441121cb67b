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
