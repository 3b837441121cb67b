#!/usr/bin/env bats
# `ps`: the processes of a container, as JSON pids or as filtered `ps` output.

load helpers

@test "ps --format json lists the init pid" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	local pid
	pid=$(container_pid "$CID")
	run runtime ps --format json "$CID"
	assert_success
	jq -e --argjson p "$pid" 'type == "array" and index($p) != null' <<<"$output"
}

@test "ps json lists every process of the container" {
	set_args /bin/sh -c 'sleep 100 & sleep 100 & wait'
	run_detached "$CID"
	local i n=0
	for ((i = 0; i < 100; i++)); do
		n=$(runtime ps --format json "$CID" | jq length)
		((n >= 3)) && break
		sleep 0.05
	done
	((n == 3)) || fail "expected 3 pids, got $n"
}

@test "ps lists the processes in sub-cgroups of the container's too, as runc" {
	# A systemd in the container moves even itself out of the container's own cgroup.
	run_with_sub_cgroup_process "/$CID-cg"
	local pid=$SUB_PID
	run runtime ps --format json "$CID"
	assert_success
	jq -e --argjson p "$pid" 'index($p) != null and length == 2' <<<"$output"
	# And kill --all reaches it.
	runtime kill --all "$CID" KILL
	wait_for_pid_gone "$pid"
}

@test "ps prints the ps header and the container's process" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	local pid
	pid=$(container_pid "$CID")
	run runtime ps "$CID"
	assert_success
	assert_line --index 0 --regexp '^UID +PID +PPID '
	assert_line --regexp "^[^ ]+ +$pid +.*fbhelper sleep 100"
	[[ ${#lines[@]} -eq 2 ]] || fail "expected the header and one process: $output"
}

@test "ps passes the arguments after the id to ps" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	local pid
	pid=$(container_pid "$CID")
	run runtime ps "$CID" -o pid,comm
	assert_success
	assert_line --index 0 --regexp '^ *PID +COMMAND'
	assert_line --regexp "^ *$pid +fbhelper$"
	[[ ${#lines[@]} -eq 2 ]] || fail "expected the header and one process: $output"
}

@test "ps accepts -- between the id and the ps arguments" {
	skip_if_runc "runc passes the -- on to ps"
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	local pid
	pid=$(container_pid "$CID")
	run runtime ps "$CID" -- -o pid,comm
	assert_success
	assert_line --index 0 --regexp '^ *PID +COMMAND'
	assert_line --regexp "^ *$pid +fbhelper$"
}

@test "ps without a PID column in the ps output fails" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run --separate-stderr runtime ps "$CID" -o comm
	assert_failure
	assert_stderr_contains "PID"
}

@test "ps works on a paused container" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	local pid
	pid=$(container_pid "$CID")
	runtime pause "$CID"
	run runtime ps --format json "$CID"
	assert_success
	jq -e --argjson p "$pid" 'index($p) != null' <<<"$output"
	runtime resume "$CID"
}

@test "ps of a stopped container prints the header alone (json: null) and exits 0, as runc" {
	run runtime run --keep --bundle "$BUNDLE" "$CID"
	assert_success
	run --separate-stderr runtime ps "$CID"
	assert_success
	assert_equal "${#lines[@]}" 1
	assert_line --index 0 --regexp '^UID +PID +PPID'
	run --separate-stderr runtime ps --format json "$CID"
	assert_success
	assert_output null
}

@test "ps of an unknown container fails" {
	run --separate-stderr runtime ps no-such-container
	assert_failure
	assert_stderr_not_empty
}
