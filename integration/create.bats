#!/usr/bin/env bats
# `create`: the container waits in "created" until start; pid file; id validation;
# bundle and config errors; the console socket.

load helpers

@test "create leaves the container created without running its process" {
	set_args /bin/fbhelper echo started
	create_container "$CID"
	run container_status "$CID"
	assert_output created
	sleep 0.2
	run container_out "$CID"
	assert_output ""
	runtime start "$CID"
	wait_for_status "$CID" stopped
	run container_out "$CID"
	assert_output started
}

@test "create --pid-file writes the pid of the waiting init" {
	create_container "$CID" --pid-file "$BATS_TEST_TMPDIR/pid"
	local pid
	pid=$(container_pid "$CID")
	[ "$pid" -gt 0 ]
	run cat "$BATS_TEST_TMPDIR/pid"
	assert_output "$pid"
	pid_alive "$pid"
}

@test "create --pid-file accepts a path relative to the current directory" {
	cd "$BATS_TEST_TMPDIR"
	create_container "$CID" --pid-file pidfile
	run cat "$BATS_TEST_TMPDIR/pidfile"
	assert_output "$(container_pid "$CID")"
}

@test "create keeps the container's state under --root" {
	create_container "$CID"
	[ -d "$ROOT/$CID" ]
	run runtime list -q
	assert_output "$CID"
}

@test "create with an id already in use fails and keeps the first container" {
	create_container "$CID"
	local pid
	pid=$(container_pid "$CID")
	run create_container "$CID"
	assert_failure
	run container_err "$CID"
	assert_output --partial "exists"
	run container_pid "$CID"
	assert_output "$pid"
	run container_status "$CID"
	assert_output created
}

@test "create rejects invalid container ids" {
	local id
	for id in "a/b" ".." "." "../escape" "a b" "" $'tab\tid' $'new\nline'; do
		try_create --bundle "$BUNDLE" "$id"
		if [ "$status" -eq 0 ]; then
			fail "create accepted the id '$id'"
		fi
		assert_stderr_not_empty
	done
	run runtime list -q
	assert_output ""
	[ ! -e "$BATS_TEST_TMPDIR/escape" ]
	[ ! -e "$ROOT/../escape" ]
}

@test "create accepts ids with dots, dashes, underscores and pluses" {
	local id=$CID.test_id-1+x
	create_container "$id"
	run container_status "$id"
	assert_output created
}

@test "create with a missing bundle directory fails with a message" {
	try_create --bundle "$BATS_TEST_TMPDIR/no-such-bundle" "$CID"
	assert_failure
	assert_stderr_contains "no-such-bundle"
	run runtime list -q
	assert_output ""
}

@test "create without config.json fails with a message" {
	rm "$BUNDLE/config.json"
	try_create --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "config.json"
	run runtime list -q
	assert_output ""
}

@test "create with malformed config.json fails with a message and leaves no state" {
	echo '{"ociVersion": "1.0.2", "process": {' >"$BUNDLE/config.json"
	try_create --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_not_empty
	run runtime list -q
	assert_output ""
	[ ! -e "$ROOT/$CID" ]
}

@test "create with a missing rootfs fails with a message and leaves no state" {
	rm -rf "$BUNDLE/rootfs"
	try_create --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_not_empty
	run runtime list -q
	assert_output ""
	[ ! -e "$ROOT/$CID" ]
}

@test "a create that fails inside init leaves no process, mount, cgroup, state or pid file behind" {
	local cg=/$CID-failed
	mkdir "$BATS_TEST_TMPDIR/pids"
	update_config '.linux.cgroupsPath = $p
		| .mounts += [{"destination": "/broken", "type": "no-such-fs", "source": "none"}]' --arg p "$cg"
	try_create --bundle "$BUNDLE" --pid-file "$BATS_TEST_TMPDIR/pids/init.pid" "$CID"
	assert_failure
	assert_stderr_contains "no-such-fs"
	[ ! -e "$ROOT/$CID" ]
	# Not even a staged pid file beside where it would have gone.
	run ls -A "$BATS_TEST_TMPDIR/pids"
	assert_output ""
	local d
	for d in /sys/fs/cgroup/*"$cg" /sys/fs/cgroup"$cg"; do
		[ ! -e "$d" ] || fail "cgroup $d was left behind"
	done
	run grep -F "$BUNDLE" /proc/self/mountinfo
	assert_failure
	run pgrep -f -- "--root $ROOT create"
	assert_failure
}

@test "create of a missing executable fails at create time, not at start" {
	set_args /bin/no-such-program
	run create_container "$CID"
	assert_failure
	run container_err "$CID"
	assert_output --partial "no-such-program"
	run runtime list -q
	assert_output ""
}

@test "create with process.terminal and no --console-socket fails without hanging" {
	update_config '.process.terminal = true'
	run timeout 30 "$FORKBOX" --root "$ROOT" create --bundle "$BUNDLE" "$CID" </dev/null 3>&- 4>&-
	assert_failure
	[ "$status" -ne 124 ] || fail "create hung with terminal=true and no console socket"
	assert_output --partial "console"
	run runtime list -q
	assert_output ""
}

@test "create --console-socket sends the pty master and the process gets the pty as stdio" {
	update_config '.process.terminal = true'
	set_args /bin/fbhelper readlink /proc/self/fd/0
	local sock=$BATS_TEST_TMPDIR/console.sock result=$BATS_TEST_TMPDIR/console.out
	python3 "$INTEGRATION_DIR/helper/recv_console.py" "$sock" "$result" 3>&- 4>&- &
	FB_PIDS+=($!)
	wait_for_file "$sock.ready"
	create_container "$CID" --console-socket "$sock"
	runtime start "$CID"
	wait_for_status "$CID" stopped
	wait "${FB_PIDS[-1]}"
	run cat "$result"
	assert_line --index 0 "isatty=True"
	assert_line --index 1 --regexp '^/dev/pts/[0-9]+.?$'
}

@test "create with a console socket nobody listens on fails cleanly and leaves no state" {
	update_config '.process.terminal = true'
	try_create --bundle "$BUNDLE" --console-socket "$BATS_TEST_TMPDIR/none.sock" "$CID"
	assert_failure
	assert_stderr_contains "none.sock"
	run runtime state "$CID"
	assert_failure
}

# runc's --pidfd-socket (runc 1.2): a pidfd of init, sent with "standard", which the
# receiver can signal the container through.
@test "create --pidfd-socket sends a pidfd of the container's init" {
	skip_if_runc "--pidfd-socket came with runc 1.2; Debian 12 has 1.1.5"
	set_args /bin/fbhelper sleep 100
	local sock=$BATS_TEST_TMPDIR/pidfd.sock result=$BATS_TEST_TMPDIR/pidfd.out
	python3 "$INTEGRATION_DIR/helper/pidfd_kill.py" "$sock" "$result" 9 3>&- 4>&- &
	FB_PIDS+=($!)
	wait_for_file "$sock.ready"
	create_container "$CID" --pidfd-socket "$sock"
	wait_for_file "$result"
	run cat "$result"
	assert_output "standard $(container_pid "$CID")"
	touch "$result.go"
	wait "${FB_PIDS[-1]}"
	wait_for_status "$CID" stopped
}

@test "create with a pidfd socket nobody listens on fails cleanly and leaves no state" {
	try_create --bundle "$BUNDLE" --pidfd-socket "$BATS_TEST_TMPDIR/none.sock" "$CID"
	assert_failure
	assert_stderr_contains "none.sock"
	run runtime state "$CID"
	assert_failure
}

@test "create --console-socket without process.terminal is refused" {
	try_create --bundle "$BUNDLE" --console-socket "$BATS_TEST_TMPDIR/none.sock" "$CID"
	assert_failure
	assert_stderr_contains "console socket"
}

@test "create --console-socket applies process.consoleSize to the pty" {
	update_config '.process.terminal = true | .process.consoleSize = {"height": 31, "width": 97}'
	set_args /bin/stty size
	local sock=$BATS_TEST_TMPDIR/console.sock result=$BATS_TEST_TMPDIR/console.out
	python3 "$INTEGRATION_DIR/helper/recv_console.py" "$sock" "$result" 3>&- 4>&- &
	FB_PIDS+=($!)
	wait_for_file "$sock.ready"
	create_container "$CID" --console-socket "$sock"
	runtime start "$CID"
	wait_for_status "$CID" stopped
	wait "${FB_PIDS[-1]}"
	run cat "$result"
	assert_line --index 1 --regexp '^31 97.?$'
}
