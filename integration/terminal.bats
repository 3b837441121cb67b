#!/usr/bin/env bats
# Terminals: `run` in the foreground with process.terminal drives the pty itself, with the
# caller's terminal (here `script` gives us one).

load helpers

setup() {
	command -v script >/dev/null || skip "script(1) from bsdutils is needed"
	setup_bundle /bin/fbhelper true
	update_config '.process.terminal = true'
}

# run_in_tty CMD: runs the shell command CMD with a pty as its terminal.
run_in_tty() {
	run script -qec "$1" /dev/null </dev/null
}

@test "run with process.terminal gives the process a pty and returns its exit code" {
	set_args /bin/sh -c 'tty; exit 5'
	run_in_tty "$FORKBOX --root $ROOT run --bundle $BUNDLE $CID"
	assert_failure 5
	assert_output --regexp '/dev/pts/[0-9]+'
}

@test "run -t: the process is a session leader with the pty as controlling terminal" {
	set_args /bin/sh -c 'read -r _ _ _ _ _ sid _ tty_nr _ < /proc/self/stat; echo "sid=$sid self=$$ tty=$tty_nr"'
	run_in_tty "$FORKBOX --root $ROOT run --bundle $BUNDLE $CID"
	assert_success
	assert_output --regexp 'sid=1 self=1 tty=[1-9]'
}

@test "run -t copies stdin to the process" {
	set_args /bin/sh -c 'read -r line; echo "got:$line"'
	run script -qec "$FORKBOX --root $ROOT run --bundle $BUNDLE $CID" /dev/null <<<"hello"
	assert_success
	assert_output --partial "got:hello"
}

@test "run -t: consoleSize sets the pty's window size" {
	skip_if_runc "runc sizes a foreground pty from the caller's terminal only"
	update_config '.process.consoleSize = {"height": 25, "width": 81}'
	set_args /bin/stty size
	run_in_tty "$FORKBOX --root $ROOT run --bundle $BUNDLE $CID"
	assert_success
	assert_output --regexp '25 81'
}

@test "run --detach with a terminal needs a console socket, and a foreground run refuses one" {
	run --separate-stderr runtime run --detach --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "console socket"
	run --separate-stderr runtime run --console-socket "$BATS_TEST_TMPDIR/x.sock" --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "console socket"
	run runtime list -q
	assert_output ""
}

@test "run without a terminal keeps the caller's stdio exactly" {
	skip_if_runc "runc gives a foreground container pipes of its own"
	update_config '.process.terminal = false'
	set_args /bin/sh -c 'for fd in 0 1 2; do /bin/fbhelper readlink /proc/self/fd/$fd; done'
	local fifo=$BATS_TEST_TMPDIR/fifo
	mkfifo "$fifo"
	cat "$fifo" >"$BATS_TEST_TMPDIR/out" &
	local reader=$!
	runtime run --bundle "$BUNDLE" "$CID" </dev/null 2>/dev/null >"$fifo"
	wait "$reader"
	run cat "$BATS_TEST_TMPDIR/out"
	assert_line --index 0 /dev/null
	assert_line --index 1 "$fifo"
}

@test "run --preserve-fds passes fds 3..3+N-1, and LISTEN_FDS from socket activation is passed on" {
	update_config '.process.terminal = false'
	set_args /bin/sh -c '/bin/fbhelper readlink /proc/self/fd/3; /bin/fbhelper readlink /proc/self/fd/4; echo "LISTEN_FDS=$LISTEN_FDS LISTEN_PID=$LISTEN_PID"'
	run runtime run --preserve-fds 1 --bundle "$BUNDLE" "$CID" 3<"$BATS_TEST_TMPDIR" 4<"$BUNDLE"
	assert_line --index 0 "$BATS_TEST_TMPDIR"
	assert_line --index 1 --partial "No such file"
	skip_if_runc "runc reads LISTEN_PID of its own process; the shell cannot set it for an exec'd child"
	# exec -a keeps the pid: LISTEN_PID must name forkbox itself.
	run bash -c 'export LISTEN_FDS=2 LISTEN_PID=$$; exec "$0" --root "$1" run --bundle "$2" "$3-la"' \
		"$FORKBOX" "$ROOT" "$BUNDLE" "$CID" 3<"$BATS_TEST_TMPDIR" 4<"$BUNDLE"
	assert_line --index 0 "$BATS_TEST_TMPDIR"
	assert_line --index 1 "$BUNDLE"
	assert_line --index 2 "LISTEN_FDS=2 LISTEN_PID=1"
}

@test "run -t: the terminal is the process user's, group tty (5), mode 0620, as a login terminal" {
	set_args /bin/sh -c 'stat -c "%u %g %a" $(tty)'
	run_in_tty "$FORKBOX --root $ROOT run --bundle $BUNDLE $CID"
	assert_success
	assert_output --partial "0 5 620"
	update_config '.process.user = {"uid": 1000, "gid": 100}'
	run_in_tty "$FORKBOX --root $ROOT run --bundle $BUNDLE $CID-u"
	assert_success
	assert_output --partial "1000 5 620"
}

@test "exec -t: the terminal is the exec'd process user's, group tty (5), mode 0620" {
	update_config '.process.terminal = false'
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run_in_tty "$FORKBOX --root $ROOT exec -t -u 1000:100 $CID /bin/sh -c 'stat -c \"%u %g %a\" \$(tty)'"
	assert_success
	assert_output --partial "1000 5 620"
}

@test "run -t: /dev/console is the container's pty, bound over it as runc does" {
	set_args /bin/sh -c 'c=$(stat -c %t:%T /dev/console) && t=$(stat -Lc %t:%T "$(tty)") && echo "$c $t" && [ "$c" = "$t" ]'
	run_in_tty "$FORKBOX --root $ROOT run --bundle $BUNDLE $CID"
	assert_success
}

# CVE-2025-52565 class: a /dev/console swapped for a symlink (here by a createContainer hook,
# standing in for a racing container) must not carry the terminal's bind elsewhere.
@test "run -t: a /dev/console that is a symlink is refused, its target untouched" {
	skip_if_runc "runc 1.1 in Debian 12 predates the fix"
	local rootfs=$BUNDLE/rootfs
	echo witness >"$rootfs/witness"
	update_config '.hooks.createContainer = [{"path": "/bin/sh", "args": ["sh", "-c", $swap]}]' \
		--arg swap "ln -sf /witness $rootfs/dev/console"
	run_in_tty "$FORKBOX --root $ROOT run --bundle $BUNDLE $CID"
	assert_failure
	assert_output --partial "/dev/console is a symlink or a directory"
	run cat "$rootfs/witness"
	assert_output witness
	run runtime list -q
	assert_output ""
}

@test "run -t: init starts on create's memory, and the pty is the same as with a forked init" {
	skip_if_runc "FORKBOX_TRACE is forkbox's"
	set_args /bin/sh -c 'read -r _ _ _ _ _ sid _ tty_nr _ < /proc/self/stat; echo "sid=$sid tty=$([ "$tty_nr" -gt 0 ] && echo yes)"; tty'
	local trace=$BATS_TEST_TMPDIR/trace
	run_in_tty "FORKBOX_TRACE=$trace $FORKBOX --root $ROOT run --bundle $BUNDLE $CID"
	assert_success
	assert_output --regexp 'sid=1 tty=yes'
	assert_output --regexp '/dev/pts/[0-9]+'
	grep -q 'create: init shares memory$' "$trace" || fail "no 'create: init shares memory' in the trace: $(cat "$trace")"
	rm -f "$trace"
	run_in_tty "FORKBOX_INIT_CLONE=fork FORKBOX_TRACE=$trace $FORKBOX --root $ROOT run --bundle $BUNDLE $CID-2"
	assert_success
	assert_output --regexp 'sid=1 tty=yes'
	! grep -q 'init shares memory' "$trace" || fail "FORKBOX_INIT_CLONE=fork shared memory"
}
