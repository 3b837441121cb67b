#!/usr/bin/env bats
# `run` = create + start + wait: output, exit codes, signal forwarding, --detach, --keep,
# --pid-file, --no-pivot, --no-subreaper.

load helpers

@test "run prints the container's stdout and exits 0" {
	set_args /bin/fbhelper echo hello world
	run runtime run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_output "hello world"
}

@test "run passes its stdin to the container" {
	set_args /bin/fbhelper cat
	run bash -c 'echo "from stdin" | "$0" --root "$1" run --bundle "$2" "$3"' "$FORKBOX" "$ROOT" "$BUNDLE" "$CID"
	assert_success
	assert_output "from stdin"
}

@test "run passes the container's stderr through" {
	set_args /bin/fbhelper read /nonexistent
	run --separate-stderr runtime run --bundle "$BUNDLE" "$CID"
	assert_failure 1
	assert_output ""
	assert_stderr_contains "fbhelper: read /nonexistent: No such file or directory"
}

@test "run exits with the container's exit code" {
	set_args /bin/fbhelper exit 42
	run runtime run --bundle "$BUNDLE" "$CID"
	assert_failure 42
}

@test "run exits 1 when the container process exits 1" {
	set_args /bin/sh -c 'echo ran; exit 1'
	run runtime run --bundle "$BUNDLE" "$CID"
	assert_failure 1
	assert_output ran
}

@test "run exits 137 when the container is killed by SIGKILL" {
	# Outside a pid namespace the process is not pid 1, so its own signal kills it.
	remove_namespace pid
	set_args /bin/fbhelper kill-self 9
	run runtime run --bundle "$BUNDLE" "$CID"
	assert_failure 137
}

@test "run exits 143 when the container is killed by SIGTERM" {
	remove_namespace pid
	set_args /bin/fbhelper kill-self 15
	run runtime run --bundle "$BUNDLE" "$CID"
	assert_failure 143
}

@test "run exits 137 when kill KILL stops its pid-1 container" {
	set_args /bin/fbhelper sleep 100
	runtime run --bundle "$BUNDLE" "$CID" </dev/null >"$BATS_TEST_TMPDIR/run.out" 2>&1 3>&- 4>&- &
	local run_pid=$!
	wait_for_status "$CID" running
	runtime kill "$CID" KILL
	local rc=0
	wait "$run_pid" || rc=$?
	assert_equal "$rc" 137
}

@test "run forwards SIGTERM it receives to the container" {
	set_args /bin/fbhelper sigwait
	# Not through runtime(): $! must be the runtime itself, not a subshell.
	"$FORKBOX" --root "$ROOT" run --bundle "$BUNDLE" "$CID" </dev/null >"$BATS_TEST_TMPDIR/$CID.out" 2>&1 3>&- 4>&- &
	local run_pid=$!
	wait_for_output "$CID" ready
	kill -TERM "$run_pid"
	local rc=0
	wait "$run_pid" || rc=$?
	assert_equal "$rc" 0
	run container_out "$CID"
	assert_line SIGTERM
}

@test "run removes the container after it exits" {
	run runtime run --bundle "$BUNDLE" "$CID"
	assert_success
	run runtime list -q
	assert_success
	assert_output ""
	run runtime state "$CID"
	assert_failure
	[ ! -e "$ROOT/$CID" ]
}

@test "run --keep keeps the stopped container until delete" {
	set_args /bin/fbhelper exit 3
	run runtime run --keep --bundle "$BUNDLE" "$CID"
	assert_failure 3
	run container_status "$CID"
	assert_success
	assert_output stopped
	run runtime delete "$CID"
	assert_success
	run runtime state "$CID"
	assert_failure
}

@test "run --detach returns while the container keeps running" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run container_status "$CID"
	assert_output running
	local pid
	pid=$(container_pid "$CID")
	pid_alive "$pid"
}

@test "run --detach hands the container the runtime's stdout" {
	set_args /bin/fbhelper echo detached output
	run_detached "$CID"
	wait_for_status "$CID" stopped
	run container_out "$CID"
	assert_output "detached output"
}

@test "run --pid-file writes the container's init pid" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID" --pid-file "$BATS_TEST_TMPDIR/pid"
	local pid
	pid=$(container_pid "$CID")
	run cat "$BATS_TEST_TMPDIR/pid"
	# runc writes the pid without a trailing newline.
	assert_output "$pid"
	pid_alive "$pid"
}

@test "run with an id already in use fails and leaves the first container running" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run run_detached "$CID"
	assert_failure
	run container_err "$CID"
	assert_output --partial "exists"
	run container_status "$CID"
	assert_output running
}

@test "run --no-pivot runs the container" {
	set_args /bin/fbhelper echo no pivot
	run runtime run --no-pivot --bundle "$BUNDLE" "$CID"
	assert_success
	assert_output "no pivot"
}

# Outside a pid namespace a process the container orphans goes to the nearest subreaper:
# runc's run is one (so nothing of the container ends up a child of the host's init),
# unless --no-subreaper.
write_orphan_script() {
	cat >"$BUNDLE/rootfs/orphan.sh" <<-'EOF'
		sleep 0.2
		p=$(grep PPid /proc/$$/status | cut -f2)
		echo "reaper: $(cat /proc/$p/comm)"
	EOF
	remove_namespace pid
	set_args /bin/sh -c '(sh /orphan.sh &); sleep 0.6'
}

@test "run is the subreaper of what the container orphans outside a pid namespace" {
	write_orphan_script
	run runtime run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_output "reaper: $(basename "$FORKBOX")"
}

@test "run --no-subreaper leaves what the container orphans to the host" {
	write_orphan_script
	run runtime run --no-subreaper --bundle "$BUNDLE" "$CID"
	assert_success
	assert_output --partial "reaper: "
	refute_output "reaper: $(basename "$FORKBOX")"
}

@test "run with a missing bundle fails with a message" {
	run --separate-stderr runtime run --bundle "$BATS_TEST_TMPDIR/no-such-bundle" "$CID"
	assert_failure
	assert_stderr_not_empty
	run runtime list -q
	assert_output ""
}

@test "run of a missing executable fails with a message and leaves nothing" {
	set_args /bin/no-such-program
	run --separate-stderr runtime run --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "no-such-program"
	run runtime list -q
	assert_output ""
}

@test "run resolves process.args[0] through the PATH of process.env" {
	update_config '.process.env = ["PATH=/bin"]'
	set_args fbhelper echo found in PATH
	run runtime run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_output "found in PATH"
}

@test "run with --bundle relative to the current directory works" {
	set_args /bin/fbhelper echo relative
	cd "$BATS_TEST_TMPDIR"
	run runtime run --bundle bundle "$CID"
	assert_success
	assert_output relative
}

@test "run without --bundle uses the current directory" {
	set_args /bin/fbhelper echo cwd bundle
	cd "$BUNDLE"
	run runtime run "$CID"
	assert_success
	assert_output "cwd bundle"
}

@test "run: a container process that calls PTRACE_TRACEME still gets its signals and exits normally" {
	# forkbox run is init's parent, so TRACEME makes it the tracer: it must let the stop go.
	skip_if_runc "runc 1.1 leaves the traced process stopped for ever"
	set_args /bin/fbhelper traceme-signal
	update_config 'del(.linux.seccomp)'  # the default profile denies ptrace
	run runtime run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_output "got USR1"
}

@test "a cold run's init starts on create's memory and ends where a forked init does" {
	skip_if_runc "FORKBOX_TRACE is forkbox's"
	local trace=$BATS_TEST_TMPDIR/trace
	FORKBOX_TRACE=$trace run_sh 'cat /proc/self/cgroup; hostname; readlink /proc/1/exe'
	assert_success
	local shared=$output
	grep -q 'create: init shares memory$' "$trace" || fail "no 'create: init shares memory' in the trace: $(cat "$trace")"
	[[ $shared == *"$CID"* ]] || fail "not in the container's cgroups: $shared"
	# A cgroup v2 hierarchy (pure v2, or hybrid's unified one): born there by clone3.
	if [[ $(uname -m) == x86_64 && $shared == *"0::/"*"$CID"* ]]; then
		grep -q 'init: born in its cgroup$' "$trace" || fail "init was not born in its v2 cgroup: $(cat "$trace")"
	fi

	rm -f "$trace"
	FORKBOX_INIT_CLONE=fork FORKBOX_TRACE=$trace run_sh 'cat /proc/self/cgroup; hostname; readlink /proc/1/exe'
	assert_success
	assert_output "$shared"
	! grep -q 'init shares memory' "$trace" || fail "FORKBOX_INIT_CLONE=fork shared memory"
}

@test "init that runs a hook itself keeps to fork; hooks create runs leave it on create's memory" {
	skip_if_runc "FORKBOX_TRACE is forkbox's"
	local trace=$BATS_TEST_TMPDIR/trace
	update_config '.hooks.createContainer = [{"path": "/bin/true"}]'
	FORKBOX_TRACE=$trace run_sh 'echo ran'
	assert_success
	assert_output ran
	! grep -q 'init shares memory' "$trace" || fail "init shared memory though it forks a createContainer hook"

	rm -f "$trace"
	update_config 'del(.hooks.createContainer) | .hooks.prestart = [{"path": "/bin/sh", "args": ["sh", "-c", "cat > '"$BATS_TEST_TMPDIR"'/hook.state"]}]'
	FORKBOX_TRACE=$trace run_sh 'echo ran'
	assert_success
	assert_output ran
	grep -q 'create: init shares memory$' "$trace" || fail "no 'create: init shares memory' in the trace: $(cat "$trace")"
	grep -q '"status":"created"' "$BATS_TEST_TMPDIR/hook.state" || fail "prestart hook state: $(cat "$BATS_TEST_TMPDIR/hook.state")"
}
