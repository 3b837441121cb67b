#!/usr/bin/env bats
# Sandbox sessions through the CLI (docs/sandbox-protocol.md, "Sessions"): `forkbox sandbox
# create` makes one, `--session ID` runs in it, `put`/`get`/`ls`/`diff` are its file verbs,
# `fork`, `pause`/`resume`, `list` and `close` manage it. One root daemon for the file
# (sandbox-helpers.bash); each test closes the sessions it made, and teardown_file checks
# that no cgroup or mount is left.
#
# forkbox only: skipped against runc.

load sandbox-helpers

# new_session [create options]: a session's id in $SID, closed by teardown.
new_session() {
	SID=$(sb create "$@") || fail "create failed: $SID"
	[[ $SID =~ ^sb-[0-9a-f]{16}$ ]] || fail "not a session id: $SID"
	SESSIONS+=("$SID")
}

setup() {
	sandbox_setup
	SESSIONS=()
}

teardown() {
	local id
	for id in "${SESSIONS[@]}"; do
		sb close "$id" >/dev/null 2>&1 || true
	done
	local pid
	for pid in "${EXTRA_PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null
		wait_for_pid_gone "$pid" 10 >/dev/null 2>&1 || kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null || true
	done
	[[ -n ${TDIR:-} ]] && rm -rf "$TDIR"
	return 0
}

# sessions_live: the daemon's count of sessions.
sessions_live() {
	sb --info | jq -r .sessions
}

@test "sandbox session: runs share the sandbox's files; list shows it; close ends it with a clear error after" {
	local before
	before=$(sessions_live)
	new_session --ttl-s 300
	run sb --session "$SID" -- sh -c 'echo one > /tmp/state; mkdir -p /sbxw; echo two > /sbxw/w; echo $$'
	assert_success
	run sb --session "$SID" -- sh -c 'cat /tmp/state /sbxw/w'
	assert_success
	assert_output "one
two"
	run sb list
	assert_success
	assert_output --partial "$SID"
	[[ $(sessions_live) == $((before + 1)) ]] || fail "info's sessions: $(sessions_live), before $before"
	run sb close "$SID"
	assert_success
	run --separate-stderr sb --session "$SID" -- true
	assert_failure
	[[ $stderr == *"no_such_sandbox"*"has ended: closed by its client"* ]] || fail "stderr: $stderr"
	[[ $(sessions_live) == "$before" ]] || fail "info's sessions after close: $(sessions_live)"
	run sb list
	refute_output --partial "$SID"
}

@test "sandbox session: a run's sandbox keys are refused; an unknown session is no_such_sandbox" {
	new_session
	run --separate-stderr sb --session "$SID" --memory 64 -- true
	assert_failure
	[[ $stderr == *"invalid_request"*"memory_mb"*"the session's"* ]] || fail "stderr: $stderr"
	run --separate-stderr sb --session sb-0000000000000000 -- true
	assert_failure
	[[ $stderr == *"no_such_sandbox"* ]] || fail "stderr: $stderr"
}

@test "sandbox session: put/get round-trip binary data; ls and diff; '..' refused; a missing file is file_error" {
	new_session
	head -c 300000 /dev/urandom >"$TDIR/blob"
	printf 'a\0b\377c' >>"$TDIR/blob"
	run sb put "$SID" /sbxw/data/blob <"$TDIR/blob"
	assert_success
	sb get "$SID" /sbxw/data/blob >"$TDIR/back"
	cmp "$TDIR/blob" "$TDIR/back" || fail "the file came back different"
	run sb ls "$SID" /sbxw/data
	assert_success
	[[ $(jq -r '.[0].name + " " + .[0].type + " " + (.[0].size|tostring)' <<<"$output") == "blob file $(stat -c %s "$TDIR/blob")" ]] ||
		fail "ls: $output"
	[[ -e /etc/motd ]] || skip "the host has no /etc/motd"
	run sb --session "$SID" -- sh -c 'rm /etc/motd; echo x >> /etc/hostname'
	assert_success
	run sb diff "$SID"
	assert_success
	[[ $(jq -r '.[] | .path + ":" + .change' <<<"$output" | tr '\n' ' ') == *"/etc/hostname:modified /etc/motd:deleted /sbxw:created /sbxw/data:created /sbxw/data/blob:created"* ]] ||
		fail "diff: $output"
	run --separate-stderr sb get "$SID" /work/../etc/shadow
	assert_failure
	[[ $stderr == *"invalid_request"*".."* ]] || fail "stderr: $stderr"
	run --separate-stderr sb get "$SID" /no/such/file
	assert_failure
	[[ $stderr == *"file_error"*"No such file or directory"* ]] || fail "stderr: $stderr"
	# The host's files are the lower layer's: untouched.
	[[ -e /etc/motd ]] || fail "the host's /etc/motd is gone"
	run cat /etc/hostname
	refute_output --partial x
}

@test "sandbox session: a symlink out of the sandbox resolves in its root, never on the host" {
	new_session
	# A host directory the sandbox sees through its lower layer (its /tmp is its own).
	HOST_DIR=$(mktemp -d /var/tmp/fb-session.XXXXXX)
	chmod 0755 "$HOST_DIR"
	echo host-secret >"$HOST_DIR/secret"
	chmod 0644 "$HOST_DIR/secret"
	run sb --session "$SID" -- sh -c "mkdir -p /sbxw && ln -s ../../../../../..$HOST_DIR /sbxw/esc && ln -s $HOST_DIR/secret /sbxw/abs"
	assert_success
	# Writing through the links writes the sandbox's own copy of that path, in its overlay.
	run sb put "$SID" /sbxw/esc/secret <<<"overwritten"
	assert_success
	run sb put "$SID" /sbxw/abs <<<"again"
	assert_success
	local host
	host=$(cat "$HOST_DIR/secret")
	rm -rf "$HOST_DIR"
	[[ $host == host-secret ]] || fail "the host's file changed: $host"
	run sb get "$SID" /sbxw/esc/secret
	assert_output again
	# /proc's magic links are refused.
	run --separate-stderr sb get "$SID" /proc/1/root/etc/hostname
	assert_failure
	[[ $stderr == *"file_error"* ]] || fail "stderr: $stderr"
}

@test "sandbox session: the deadline kills a run's processes and the session goes on; background processes do not hold a run" {
	new_session --timeout-ms 400
	run sb --session "$SID" -- sh -c 'sleep 30'
	[[ $status == 124 ]] || fail "status $status: $output"
	local start=$SECONDS
	run sb --session "$SID" -- sh -c 'sleep 30 >/dev/null 2>&1 & echo started'
	assert_success
	assert_output started
	((SECONDS - start < 20)) || fail "the run waited for its background process"
	run sb --session "$SID" -- sh -c 'ps -eo args | grep -c "^sleep 30"'
	assert_output 1
}

@test "sandbox session: fork makes children with the parent's files and none of its processes; they diverge; nested forks" {
	new_session
	sb --session "$SID" -- sh -c 'echo base > /tmp/f; mkdir -p /sbxw; echo w > /sbxw/w; (sleep 1000 &) ; true'
	run sb fork "$SID" 2
	assert_success
	local kids=($output)
	[[ ${#kids[@]} == 2 ]] || fail "fork printed: $output"
	SESSIONS+=("${kids[@]}")
	run sb --session "${kids[0]}" -- sh -c 'cat /tmp/f /sbxw/w; echo k0 > /tmp/f; pgrep -c sleep || true'
	assert_output "base
w
0"
	run sb --session "${kids[1]}" -- cat /tmp/f
	assert_output base
	run sb --session "$SID" -- sh -c 'cat /tmp/f; pgrep -c sleep'
	assert_output "base
1"
	run sb diff "${kids[0]}"
	[[ $(jq -r '.[] | .path + ":" + .change' <<<"$output" | tr '\n' ' ') == "/tmp/f:modified " ]] || fail "child's diff: $output"
	# A fork of a fork of a fork.
	local at=${kids[0]} i
	for i in 1 2 3; do
		run sb fork "$at"
		assert_success
		SESSIONS+=("$output")
		at=$output
		sb --session "$at" -- sh -c "echo $i >> /tmp/f"
	done
	run sb --session "$at" -- cat /tmp/f
	assert_output "k0
1
2
3"
	run sb list
	[[ $output == *"$at  ${SESSIONS[-2]}"* ]] || fail "list shows no parent: $output"
}

@test "sandbox session: pause freezes its cgroup (a root daemon) and refuses runs and file verbs; resume thaws it" {
	local marker=$((96543000 + $$ % 1000))
	new_session
	[[ $(sb --info | jq -r .freezer) == cgroup ]] || skip "no cgroup freezer here"
	sb --session "$SID" -- sh -c "(sleep $marker &) ; true"
	local pid freezer
	pid=$(wait_for_process sleep "sleep $marker" 10)
	freezer=/sys/fs/cgroup/freezer$(awk -F: '$2 == "freezer" {print $3}' "/proc/$pid/cgroup")
	[[ -f $freezer/freezer.state ]] || skip "no v1 freezer (pure v2: cgroup.freeze)"
	[[ $(cat "$freezer/freezer.state") == THAWED ]] || fail "state before: $(cat "$freezer/freezer.state")"
	run sb pause "$SID"
	assert_success
	[[ $(cat "$freezer/freezer.state") == FROZEN ]] || fail "state paused: $(cat "$freezer/freezer.state")"
	run --separate-stderr sb --session "$SID" -- true
	assert_failure
	[[ $stderr == *"paused"* ]] || fail "stderr: $stderr"
	run --separate-stderr sb get "$SID" /etc/hostname
	assert_failure
	[[ $stderr == *"paused"* ]] || fail "stderr: $stderr"
	run sb resume "$SID"
	assert_success
	[[ $(cat "$freezer/freezer.state") == THAWED ]] || fail "state resumed: $(cat "$freezer/freezer.state")"
	run sb --session "$SID" -- pgrep -c -f "sleep $marker"
	assert_output 1
	# A paused session closes (a frozen v1 task cannot die until thawed).
	sb pause "$SID"
	run sb close "$SID"
	assert_success
	no_process_matching "sleep $marker" 5
}

@test "sandbox session (user's daemon): pause stops its processes by signal; runs refused, files still readable" {
	start_user_daemon
	local id marker=$((96544000 + $$ % 1000))
	id=$(usb create) || fail "create: $id"
	[[ $(usb --info | jq -r .freezer) == signal ]] || fail "a user's daemon has no cgroups here"
	usb --session "$id" -- sh -c "echo x > /tmp/f; (sleep $marker &) ; true"
	local pid
	pid=$(wait_for_process sleep "sleep $marker" 10)
	usb pause "$id"
	[[ $(awk '/^State:/ {print $2}' "/proc/$pid/status") == T ]] || fail "not stopped: $(grep State "/proc/$pid/status")"
	run --separate-stderr usb --session "$id" -- true
	assert_failure
	[[ $stderr == *"paused"* ]] || fail "stderr: $stderr"
	run usb get "$id" /tmp/f
	assert_output x
	usb resume "$id"
	[[ $(awk '/^State:/ {print $2}' "/proc/$pid/status") == S ]] || fail "not continued: $(grep State "/proc/$pid/status")"
	usb close "$id"
}

@test "sandbox session: ttl and idle expiry end it with the reason" {
	new_session --ttl-s 1
	local ttl=$SID
	new_session --idle-s 1
	local idle=$SID
	sleep 2.5
	run --separate-stderr sb --session "$ttl" -- true
	assert_failure
	[[ $stderr == *"has ended: expired (its ttl of 1 s)"* ]] || fail "stderr: $stderr"
	run --separate-stderr sb --session "$idle" -- true
	assert_failure
	[[ $stderr == *"has ended: idle for 1 s"* ]] || fail "stderr: $stderr"
}

# The init is the daemon's own binary: through /proc/1/exe a sandbox would reach it
# (runc's CVE-2019-5736).
@test "sandbox session: the sandbox cannot reach its init (not dumpable: no /proc/1/fd, /proc/1/mem, /proc/1/exe)" {
	new_session
	run sb --session "$SID" -- sh -c 'ls /proc/1/fd; cat /proc/1/environ; head -c1 /proc/1/mem; head -c1 /proc/1/exe; echo x >>/proc/1/exe; echo done'
	assert_output --partial "'/proc/1/fd': Permission denied"
	assert_output --partial "/proc/1/environ: Permission denied"
	assert_output --partial "'/proc/1/mem' for reading: Permission denied"
	assert_output --partial "'/proc/1/exe' for reading: Permission denied"
	assert_output --partial "cannot create /proc/1/exe: Permission denied"
	assert_output --partial "done"
	refute_output --partial "socket:"
}

@test "sandbox session (user's daemon): files, runs and a fork as an unprivileged user" {
	start_user_daemon
	local id kid
	id=$(usb create) || fail "create: $id"
	run usb --session "$id" -- sh -c 'echo mine > /tmp/m; id -u'
	assert_output 0
	kid=$(usb fork "$id") || fail "fork: $kid"
	run usb --session "$kid" -- cat /tmp/m
	assert_output mine
	run as_user sh -c "echo data | timeout 30 $SB_FB sandbox --socket $USOCK put $kid /sbxw/x && timeout 30 $SB_FB sandbox --socket $USOCK get $kid /sbxw/x"
	assert_output data
	run usb diff "$kid"
	[[ $(jq -r '.[] | .path + ":" + .change' <<<"$output" | tr '\n' ' ') == "/sbxw:created /sbxw/x:created " ]] || fail "diff: $output"
	usb close "$kid"
	usb close "$id"
	run usb list
	refute_output --partial sb-
}

@test "sandbox --python: a warm interpreter runs the code as python3 -c would, a fresh sandbox each time" {
	run --separate-stderr sb --python 'import math, sys; print(math.factorial(20)); print(sys.argv, __name__)'
	assert_success
	assert_output "2432902008176640000
['-c'] __main__"
	# Tracebacks and exit codes are python3's.
	run --separate-stderr sb --python 'x = 1
1 / 0'
	[[ $status == 1 ]] || fail "status $status"
	[[ $stderr == *'File "<string>", line 2, in <module>'*"ZeroDivisionError: division by zero"* ]] || fail "stderr: $stderr"
	[[ $stderr != *"exec(compile"* ]] || fail "the wrapper shows in the traceback: $stderr"
	run sb --python 'import sys; sys.exit(7)'
	[[ $status == 7 ]] || fail "status $status"
	run sb --python 'import atexit, threading, time
atexit.register(lambda: print("atexit ran"))
threading.Thread(target=lambda: (time.sleep(0.2), print("thread ran"))).start()'
	assert_output "thread ran
atexit ran"
	# Nothing of one run is seen by the next: files, globals, imported modules.
	sb --python 'open("/tmp/left", "w").write("x"); import sys; sys.modules["json"].leak = 1' --preload json
	run sb --python 'import os, sys; print(os.path.exists("/tmp/left"), hasattr(sys.modules["json"], "leak"))' --preload json
	assert_output "False False"
	# The deadline, stdin, cwd and env are a run's.
	run sb --python 'while True: pass' --timeout-ms 300
	[[ $status == 124 ]] || fail "status $status"
	run sb --stdin --cwd /tmp -e X=42 --python 'import os, sys; print(sys.stdin.read().strip(), os.getcwd(), os.environ["X"])' <<<"in"
	assert_output "in /tmp 42"
	run --separate-stderr sb --python 'print(1)' --preload no_such_module_here
	assert_failure
	[[ $stderr == *"ModuleNotFoundError"*"no_such_module_here"* ]] || fail "stderr: $stderr"
}

@test "sandbox session: a sandbox service killed with SIGKILL takes its sessions with it; the next one cleans up and serves" {
	local sock=$TDIR/kill.sock marker=$((97865000 + $$ % 1000))
	start_daemon_as_root "$sock"
	local svc id
	svc=$("$SB_FB" sandbox --socket "$sock" --info | jq -r .service_pid)
	id=$(sb_on "$sock" create) || fail "create: $id"
	sb_on "$sock" --session "$id" -- sh -c "(sleep $marker &); true"
	# A run in flight too.
	(sb_on "$sock" --session "$id" -- sleep $((marker + 1)) >"$TDIR/inflight.out" 2>&1 || echo "rc=$?" >>"$TDIR/inflight.out") &
	local client=$!
	wait_for_process sleep "sleep $((marker + 1))" 10 >/dev/null
	kill -KILL "$svc"
	wait "$client"
	# The client is told, the session's processes are gone with their init (PDEATHSIG).
	[[ $(cat "$TDIR/inflight.out") == *"rc=1"* ]] || fail "the client in flight: $(cat "$TDIR/inflight.out")"
	no_process_matching "sleep $marker" 5
	no_process_matching "sleep $((marker + 1))" 5
	# The daemon starts a new service on the next request; it removes the dead one's cgroups.
	run --separate-stderr sb_on "$sock" -- echo again
	assert_success
	assert_output again
	run --separate-stderr sb_on "$sock" --session "$id" -- true
	assert_failure
	[[ $stderr == *"no_such_sandbox"* ]] || fail "stderr: $stderr"
	local i left
	for ((i = 0; i < 50; i++)); do
		left=$(service_cgroups "$svc")
		[[ -z $left ]] && break
		sleep 0.1
	done
	[[ -z $left ]] || fail "the dead service's cgroups are left: $left"
}
