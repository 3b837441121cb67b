#!/usr/bin/env bats
# `start`: releases a created container exactly once.

load helpers

@test "start runs the process of a created container" {
	set_args /bin/fbhelper echo hello from start
	create_container "$CID"
	run runtime start "$CID"
	assert_success
	# start returns at once; the process's stdout is create's, not start's.
	assert_output ""
	wait_for_status "$CID" stopped
	run container_out "$CID"
	assert_output "hello from start"
}

@test "start makes a created container running" {
	set_args /bin/fbhelper sleep 100
	create_container "$CID"
	local pid
	pid=$(container_pid "$CID")
	runtime start "$CID"
	run container_status "$CID"
	assert_output running
	# The process that waited in create is the one that runs.
	run container_pid "$CID"
	assert_output "$pid"
}

@test "start twice fails and the container keeps running" {
	set_args /bin/fbhelper sleep 100
	create_container "$CID"
	runtime start "$CID"
	run --separate-stderr runtime start "$CID"
	assert_failure
	assert_stderr_contains "running"
	run container_status "$CID"
	assert_output running
}

@test "start of a stopped container fails" {
	create_container "$CID"
	runtime start "$CID"
	wait_for_status "$CID" stopped
	run --separate-stderr runtime start "$CID"
	assert_failure
	assert_stderr_contains "stopped"
}

@test "start of an unknown container fails with 'does not exist'" {
	run --separate-stderr runtime start no-such-container
	assert_failure
	assert_stderr_contains "does not exist"
}

@test "start reports an init that died while created instead of hanging" {
	create_container "$CID"
	local pid
	pid=$(container_pid "$CID")
	kill -KILL "$pid"
	wait_for_pid_gone "$pid"
	run timeout 30 "$FORKBOX" --root "$ROOT" start "$CID"
	assert_failure
	[ "$status" -ne 124 ] || fail "start hung on a dead init"
	run container_status "$CID"
	assert_output stopped
}

@test "start without an id fails with a usage message" {
	run --separate-stderr runtime start
	assert_failure
	assert_stderr_not_empty
}
