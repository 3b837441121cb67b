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

# fd_targets PID: "N TARGET" for each of the process's fds above 2.
fd_targets() {
	local fd
	for fd in /proc/"$1"/fd/*; do
		[ "${fd##*/}" -gt 2 ] && echo "${fd##*/} $(readlink "$fd")"
	done
	return 0
}

# init_waits_itself_then_prints OUTPUT: creates $CID, whose init must wait for start as
# forkbox itself (its exe not the stub's memfd), starts it and expects OUTPUT.
init_waits_itself_then_prints() {
	create_container "$CID"
	local pid
	pid=$(container_pid "$CID")
	run readlink "/proc/$pid/exe"
	refute_output --partial "memfd:"
	runtime start "$CID"
	wait_for_status "$CID" stopped
	run container_out "$CID"
	assert_output "$1"
}

@test "a created container's init waits for start as the exec stub, holding only the exec fifo" {
	skip_if_runc "forkbox's exec stub (exec_guard.hpp)"
	set_args /bin/fbhelper echo started
	create_container "$CID"
	local pid
	pid=$(container_pid "$CID")
	# Its exec is done before start: /proc/PID/exe is the sealed memfd, not the host binary.
	run readlink "/proc/$pid/exe"
	assert_output --partial "memfd:forkbox-exec"
	# One fd above stdio: the fifo, O_PATH (no access mode), which names no directory.
	run fd_targets "$pid"
	assert_output --regexp "^[0-9]+ $ROOT/$CID/exec\.fifo\$"
	local n=${output%% *}
	[ ! -d "/proc/$pid/fd/$n" ]
	local flags
	flags=$(awk '/^flags:/ {print $2}' "/proc/$pid/fdinfo/$n")
	(((8#$flags & 8#10000000) != 0)) || fail "fd $n is not O_PATH: flags $flags"
	runtime start "$CID"
	wait_for_status "$CID" stopped
	run container_out "$CID"
	assert_output started
}

@test "with a startContainer hook, init waits for start itself and the hook runs before the process" {
	skip_if_runc "forkbox's exec stub (exec_guard.hpp)"
	set_args /bin/sh -c 'cat /tmp/hook; echo process'
	update_config '.root.readonly = false
		| .hooks.startContainer = [{"path": "/bin/sh", "args": ["sh", "-c", "echo hook >/tmp/hook"]}]'
	init_waits_itself_then_prints "hook
process"
}

@test "without procfs at /proc in the container, init waits for start itself" {
	skip_if_runc "forkbox's exec stub (exec_guard.hpp)"
	set_args /bin/fbhelper echo started
	update_config '.mounts |= map(select(.destination != "/proc"))
		| .linux.maskedPaths = [] | .linux.readonlyPaths = []'
	init_waits_itself_then_prints started
}

@test "with a filter refusing prctl, init waits for start itself (the stub could not make itself undumpable)" {
	skip_if_runc "forkbox's exec stub (exec_guard.hpp)"
	set_args /bin/fbhelper echo started
	update_config '.process.noNewPrivileges = true
		| .linux.seccomp = {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["prctl"], "action": "SCMP_ACT_KILL"}]}'
	init_waits_itself_then_prints started
}

@test "a created container's init killed while it waits as the stub: the container is stopped" {
	create_container "$CID"
	run runtime kill "$CID" KILL
	assert_success
	wait_for_status "$CID" stopped
	run --separate-stderr runtime start "$CID"
	assert_failure
}

# A hang-up of the exec fifo is not init's death: the fifo is 0622, as runc's, so a writer may
# come and go without writing while `start` waits; and poll can report the hang-up of a stub
# that wrote and exec'd at once before the byte it wrote (the soak's failures, see
# RELIABILITY.md). Only init's pidfd ends the wait.
@test "start waits on through a writer of the exec fifo that comes and goes without writing" {
	skip_if_runc "FORKBOX_TEST_STOP_AT is forkbox's own"
	source "$REPO_DIR/tests/reliability/kills-lib.bash"
	set_args /bin/fbhelper echo released
	FORKBOX_TEST_STOP_AT="init: exec" create_container "$CID"
	local init i fifo start_pid rc=0
	init=$(container_pid "$CID")
	for ((i = 0; i < 500; i++)); do
		kl_at_mark "$init" && break
		sleep 0.01
	done
	kl_at_mark "$init" || fail "init did not wait at 'init: exec'"
	fifo=$ROOT/$CID/exec.fifo
	[[ -p $fifo ]] || fail "no exec fifo at $fifo"
	runtime start "$CID" >"$BATS_TEST_TMPDIR/start.out" 2>&1 &
	start_pid=$!
	# start reads the fifo (its reader open, no writer yet: init waits before its stub).
	for ((i = 0; i < 500; i++)); do
		[[ $(readlink /proc/"$start_pid"/fd/* 2>/dev/null) == *exec.fifo* ]] && break
		sleep 0.01
	done
	# A writer that opens and closes without a byte (read-write: it does not wait for a reader).
	exec {w}<>"$fifo"
	exec {w}>&-
	sleep 0.2
	pid_alive "$start_pid" || fail "start gave up on a writer that left: $(cat "$BATS_TEST_TMPDIR/start.out")"
	kill -CONT "$init"
	wait "$start_pid" || rc=$?
	((rc == 0)) || fail "start failed ($rc): $(cat "$BATS_TEST_TMPDIR/start.out")"
	wait_for_status "$CID" stopped
	run container_out "$CID"
	assert_output "released"
}
