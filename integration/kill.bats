#!/usr/bin/env bats
# `kill`: signal the container's init; names with and without SIG, numbers; errors.

load helpers

# start_sigwait: a running container whose init prints "ready", then the name of the
# first SIGTERM/SIGINT/SIGUSR1 it receives, and exits 0.
start_sigwait() {
	set_args /bin/fbhelper sigwait
	run_detached "$CID"
	wait_for_output "$CID" ready
}

@test "kill sends SIGTERM by default and state becomes stopped" {
	start_sigwait
	run runtime kill "$CID"
	assert_success
	wait_for_output "$CID" SIGTERM
	wait_for_status "$CID" stopped
}

@test "kill accepts a signal name with the SIG prefix" {
	start_sigwait
	runtime kill "$CID" SIGUSR1
	wait_for_output "$CID" SIGUSR1
	wait_for_status "$CID" stopped
}

@test "kill accepts a signal name without the SIG prefix" {
	start_sigwait
	runtime kill "$CID" USR1
	wait_for_output "$CID" SIGUSR1
}

@test "kill accepts a signal number" {
	start_sigwait
	runtime kill "$CID" 10
	wait_for_output "$CID" SIGUSR1
}

@test "kill accepts SIGINT by name and by number" {
	start_sigwait
	runtime kill "$CID" INT
	wait_for_output "$CID" SIGINT
	CID=$CID-2 start_sigwait
	runtime kill "$CID-2" 2
	wait_for_output "$CID-2" SIGINT
}

@test "kill KILL stops a container that ignores SIGTERM" {
	set_args /bin/fbhelper ignore-term-sleep 100
	run_detached "$CID"
	wait_for_output "$CID" ready
	runtime kill "$CID" TERM
	sleep 0.3
	run container_status "$CID"
	assert_output running
	runtime kill "$CID" KILL
	wait_for_status "$CID" stopped
}

@test "kill 9 stops a container whose pid-1 ignores SIGTERM by default" {
	# pid 1 of a pid namespace has no default action for SIGTERM.
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	runtime kill "$CID" 9
	wait_for_status "$CID" stopped
}

@test "kill of a created container delivers the signal and it becomes stopped" {
	create_container "$CID"
	local pid
	pid=$(container_pid "$CID")
	run runtime kill "$CID" KILL
	assert_success
	wait_for_pid_gone "$pid"
	wait_for_status "$CID" stopped
}

# term_ends_created_container [stub|itself]: kill TERM of a created $CID ends its init
# (which waits for start as pid 1, where TERM's default action does nothing) and the
# container is stopped. With an argument, forkbox's init must wait as the exec stub or itself.
term_ends_created_container() {
	create_container "$CID"
	local pid
	pid=$(container_pid "$CID")
	if [[ $# -gt 0 ]] && ! is_runc; then
		run readlink "/proc/$pid/exe"
		if [[ $1 == stub ]]; then assert_output --partial "memfd:forkbox-exec"; else refute_output --partial "memfd:"; fi
	fi
	run runtime kill "$CID" TERM
	assert_success
	wait_for_pid_gone "$pid"
	wait_for_status "$CID" stopped
	run --separate-stderr runtime start "$CID"
	assert_failure
}

@test "kill TERM of a created container ends it, as runc's does" {
	term_ends_created_container stub
}

@test "kill TERM of a created container whose init waits for start itself (startContainer hook) ends it" {
	update_config '.hooks.startContainer = [{"path": "/bin/sh", "args": ["sh", "-c", "true"]}]'
	term_ends_created_container itself
}

@test "kill TERM of a created container ends it under a filter refusing rt_sigaction" {
	# The stub could not catch TERM: init waits itself, with its handlers from before the filter.
	update_config '.process.noNewPrivileges = true
		| .linux.seccomp = {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["rt_sigaction"], "action": "SCMP_ACT_ERRNO"}]}'
	term_ends_created_container itself
}

@test "kill HUP, INT and QUIT of created containers end them too" {
	local sig
	for sig in HUP INT QUIT; do
		create_container "$CID"
		local pid
		pid=$(container_pid "$CID")
		runtime kill "$CID" "$sig"
		wait_for_pid_gone "$pid"
		wait_for_status "$CID" stopped
		runtime delete "$CID"
	done
}

@test "kill USR1 of a created container does nothing, as runc's (Go drops it); start runs it" {
	set_args /bin/fbhelper echo started
	create_container "$CID"
	runtime kill "$CID" USR1
	sleep 0.3
	run container_status "$CID"
	assert_output created
	runtime start "$CID"
	wait_for_status "$CID" stopped
	run container_out "$CID"
	assert_output started
}

@test "kill of a stopped container fails" {
	run runtime run --keep --bundle "$BUNDLE" "$CID"
	assert_success
	run --separate-stderr runtime kill "$CID" KILL
	assert_failure
	assert_stderr_contains "not running"
}

@test "kill of an unknown container fails with 'does not exist'" {
	run --separate-stderr runtime kill no-such-container KILL
	assert_failure
	assert_stderr_contains "does not exist"
}

@test "kill with an unknown signal name fails and the container keeps running" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run --separate-stderr runtime kill "$CID" BOGUS
	assert_failure
	assert_stderr_contains "BOGUS"
	run container_status "$CID"
	assert_output running
}

@test "kill with an out-of-range signal number fails" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run --separate-stderr runtime kill "$CID" 99
	assert_failure
	assert_stderr_not_empty
	run container_status "$CID"
	assert_output running
}

@test "kill ID 0 probes the container: exit 0 while it runs, and fails once it stopped (as runc)" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run runtime kill "$CID" 0
	assert_success
	run runtime kill --all "$CID" 0
	assert_success
	runtime kill "$CID" KILL
	wait_for_status "$CID" stopped
	run runtime kill "$CID" 0
	assert_failure
}
