#!/usr/bin/env bats
# `forkbox run BUNDLE/`: the CI use. A path to a bundle instead of an id: a generated id,
# the container's output and exit code passed through, the container removed afterwards,
# and a cancelled job (SIGTERM, SIGINT, SIGHUP, a SIGKILL of the process group) or a
# --timeout leaves nothing behind.

load helpers

setup() {
	# The bundle directory is named after $CID, so the generated ids start with $CID and
	# fb_teardown finds their cgroups.
	BUNDLE=$BATS_TEST_TMPDIR/$CID
	setup_bundle
}

# the_ids: ids under the test's root (state directories), one a line.
the_ids() {
	[[ -d $ROOT ]] || return 0
	local d
	for d in "$ROOT"/*; do
		[[ -d $d ]] && basename "$d"
	done
}

# assert_nothing_left: no state, cgroup, mount or process of any container of this test.
assert_nothing_left() {
	run the_ids
	assert_output ""
	local d
	d=$(find /sys/fs/cgroup -maxdepth 5 -type d -name "$CID-*" 2>/dev/null | head -n 1)
	[[ -z $d ]] || fail "cgroup $d was left behind"
	run grep -F "$BUNDLE" /proc/self/mountinfo
	assert_failure
	run -0 bash -c "find /proc -mindepth 2 -maxdepth 2 -name root -lname '$BUNDLE/*' 2>/dev/null; true"
	assert_output ""
}

# wait_for_running [SECONDS]: until one container of this test runs; prints its id.
wait_for_running() {
	local secs=${1:-10} i id
	for ((i = 0; i < secs * 20; i++)); do
		for id in $(the_ids); do
			if [[ $(container_status "$id" 2>/dev/null) == running ]]; then
				echo "$id"
				return 0
			fi
		done
		sleep 0.05
	done
	echo "no running container after ${secs}s" >&2
	return 1
}

# wait_for_nothing_left [SECONDS]: until the guardian has removed every container.
wait_for_nothing_left() {
	local secs=${1:-10} i
	for ((i = 0; i < secs * 20; i++)); do
		[[ -z $(the_ids) ]] && return 0
		sleep 0.05
	done
	echo "containers left after ${secs}s: $(the_ids)" >&2
	return 1
}

# wait_run: waits for the background run: its exit code in $status, what it printed in
# $output, as `run` would set them.
wait_run() {
	status=0
	wait "$RUN_PID" || status=$?
	output=$(cat "$BATS_TEST_TMPDIR/run.out" "$BATS_TEST_TMPDIR/run.err")
}

# run_in_background ARGS...: `runtime run ARGS` in the background (its own process
# group, SIGINT not ignored as bash does for background jobs), output to run.out/run.err;
# sets RUN_PID.
run_in_background() {
	setsid "$FORKBOX" --root "$ROOT" run "$@" </dev/null >"$BATS_TEST_TMPDIR/run.out" 2>"$BATS_TEST_TMPDIR/run.err" 3>&- 4>&- &
	RUN_PID=$!
	FB_PIDS+=("$RUN_PID")
}

@test "run BUNDLE/ from another directory, by a relative path, runs it and removes it" {
	skip_if_runc "runc takes an id, not a bundle path"
	set_args /bin/fbhelper echo hello from the bundle
	cd "$BATS_TEST_TMPDIR"
	run --separate-stderr runtime run "$CID/"
	assert_success
	assert_output "hello from the bundle"
	assert_nothing_left
}

@test "run BUNDLE by an absolute path, and run . from inside the bundle" {
	skip_if_runc "runc takes an id, not a bundle path"
	set_args /bin/fbhelper echo absolute
	run runtime run "$BUNDLE"
	assert_success
	assert_output absolute
	cd "$BUNDLE"
	run runtime run .
	assert_success
	assert_output absolute
	assert_nothing_left
}

@test "run BUNDLE/ exits with the container's code, 128+N when a signal killed it" {
	skip_if_runc "runc takes an id, not a bundle path"
	set_args /bin/fbhelper exit 42
	run runtime run "$BUNDLE/"
	assert_failure 42
	remove_namespace pid
	set_args /bin/fbhelper kill-self 9
	run runtime run "$BUNDLE/"
	assert_failure 137
	assert_nothing_left
}

@test "run BUNDLE/ passes stdout and stderr through apart, and as they come" {
	skip_if_runc "runc takes an id, not a bundle path"
	set_args /bin/sh -c 'echo to-stdout; echo to-stderr >&2'
	run --separate-stderr runtime run "$BUNDLE/"
	assert_success
	assert_output to-stdout
	[[ $stderr == to-stderr ]] || fail "stderr: '$stderr'"
	# Unbuffered: the first line is there while the container still runs.
	set_args /bin/sh -c 'echo first; exec /bin/fbhelper sleep 100'
	run_in_background "$BUNDLE/"
	wait_for_file "$BATS_TEST_TMPDIR/run.out"
	run cat "$BATS_TEST_TMPDIR/run.out"
	assert_output first
	kill -TERM "$RUN_PID"
	wait "$RUN_PID" || true
	assert_nothing_left
}

@test "run BUNDLE/ names its generated id in --log and with --debug" {
	skip_if_runc "runc takes an id, not a bundle path"
	run --separate-stderr runtime --log "$BATS_TEST_TMPDIR/log" run "$BUNDLE/"
	assert_success
	run grep -o "as container $CID-[0-9a-f]\{8\}" "$BATS_TEST_TMPDIR/log"
	assert_success
	run --separate-stderr runtime --debug run "$BUNDLE/"
	assert_success
	assert_stderr_contains "as container $CID-"
}

@test "two runs of one bundle at once get ids of their own" {
	skip_if_runc "runc takes an id, not a bundle path"
	set_args /bin/sh -c 'sleep 0.5; echo done'
	local log=$BATS_TEST_TMPDIR/log
	"$FORKBOX" --root "$ROOT" --log "$log" run "$BUNDLE/" >"$BATS_TEST_TMPDIR/a.out" 2>&1 </dev/null 3>&- 4>&- &
	local a=$!
	"$FORKBOX" --root "$ROOT" --log "$log" run "$BUNDLE/" >"$BATS_TEST_TMPDIR/b.out" 2>&1 </dev/null 3>&- 4>&- &
	local b=$!
	wait "$a"
	wait "$b"
	run cat "$BATS_TEST_TMPDIR/a.out" "$BATS_TEST_TMPDIR/b.out"
	assert_output "done
done"
	run bash -c "grep -o 'as container [^\"]*' '$log' | sort -u | wc -l"
	assert_output 2
	assert_nothing_left
}

@test "SIGTERM to run BUNDLE/ kills and removes the container (exit 143)" {
	skip_if_runc "runc forwards the signal and keeps a run by id"
	set_args /bin/fbhelper sleep 100
	run_in_background "$BUNDLE/"
	wait_for_running >/dev/null
	kill -TERM "$RUN_PID"
	wait_run
	assert_failure 143
	assert_nothing_left
}

@test "SIGTERM to run BUNDLE/ while a hook of its create hangs ends the run and leaves nothing" {
	skip_if_runc "runc forwards the signal and keeps a run by id"
	set_args /bin/fbhelper sleep 100
	# The hook's own process: it dies with the runtime (its death signal).
	local hook="sleep 1000.$RANDOM"
	update_config '.hooks.createRuntime = [{"path": "/bin/sh", "args": ["sh", "-c", "echo x > '"$BATS_TEST_TMPDIR"'/hook.ran; exec '"$hook"'"]}]'
	run_in_background "$BUNDLE/"
	wait_for_file "$BATS_TEST_TMPDIR/hook.ran" || fail "no hook: $(cat "$BATS_TEST_TMPDIR/run.err")"
	kill -TERM "$RUN_PID"
	wait_for_pid_gone "$RUN_PID"
	wait_run
	assert_failure 143
	wait_for_nothing_left
	assert_nothing_left
	local i
	for ((i = 0; i < 100; i++)); do
		pgrep -fx "$hook" >/dev/null || return 0
		sleep 0.05
	done
	pkill -fx "$hook"
	fail "the hook outlived the run"
}

@test "SIGINT and SIGHUP to run BUNDLE/ kill and remove the container (exit 130, 129)" {
	skip_if_runc "runc forwards the signal and keeps a run by id"
	set_args /bin/fbhelper sleep 100
	run_in_background "$BUNDLE/"
	wait_for_running >/dev/null
	kill -INT "$RUN_PID"
	wait_run
	assert_failure 130
	assert_nothing_left
	run_in_background "$BUNDLE/"
	wait_for_running >/dev/null
	kill -HUP "$RUN_PID"
	wait_run
	assert_failure 129
	assert_nothing_left
}

@test "a runner that SIGKILLs run BUNDLE/'s process group leaves no container behind" {
	skip_if_runc "runc takes an id, not a bundle path"
	# No pid namespace either: every process of the container must go, not just its init.
	remove_namespace pid
	set_args /bin/sh -c '/bin/fbhelper sleep 100 & exec /bin/fbhelper sleep 100'
	run_in_background "$BUNDLE/"
	wait_for_running >/dev/null
	kill -KILL -- "-$RUN_PID"
	wait "$RUN_PID" || true
	wait_for_nothing_left
	assert_nothing_left
}

@test "run BUNDLE/ leaves no guardian behind; SIGKILLed alone, its guardian removes the container and logs it" {
	skip_if_runc "runc takes an id, not a bundle path"
	set_args /bin/fbhelper exit 0
	run runtime run "$BUNDLE/"
	assert_success
	# The guardian is a child of the run, dismissed and reaped before it returns.
	run pgrep -f -- "--root $ROOT delete --force"
	assert_failure
	set_args /bin/fbhelper sleep 100
	local log=$BATS_TEST_TMPDIR/run.log
	setsid "$FORKBOX" --root "$ROOT" --log "$log" run "$BUNDLE/" </dev/null >/dev/null 2>&1 3>&- 4>&- &
	RUN_PID=$!
	FB_PIDS+=("$RUN_PID")
	local id
	id=$(wait_for_running)
	kill -KILL "$RUN_PID"
	wait "$RUN_PID" || true
	wait_for_nothing_left
	assert_nothing_left
	# The cleanup is `forkbox delete --force` with the run's --root and --log.
	run grep -F "delete: removed container $id (--force)" "$log"
	assert_success
}

@test "run --timeout kills every process of the container at the deadline and exits 124" {
	skip_if_runc "runc has no --timeout"
	remove_namespace pid
	set_args /bin/sh -c '/bin/fbhelper sleep 100 & exec /bin/fbhelper sleep 100'
	run runtime run --timeout 500ms "$BUNDLE/"
	assert_failure 124
	assert_nothing_left
	# By id too; a container that ends in time keeps its own code.
	set_args /bin/fbhelper exit 3
	run runtime run --timeout 10s --bundle "$BUNDLE" "$CID"
	assert_failure 3
}

@test "run --timeout refuses a value that is not a positive Go duration" {
	skip_if_runc "runc has no --timeout"
	run --separate-stderr runtime run --timeout soon "$BUNDLE/"
	assert_failure
	assert_stderr_contains 'invalid value "soon" for flag -timeout'
	run --separate-stderr runtime run --timeout 0s "$BUNDLE/"
	assert_failure
	assert_stderr_contains "greater than 0"
	assert_nothing_left
}

@test "run of a missing or broken bundle fails with a clear message and leaves nothing" {
	skip_if_runc "runc takes an id, not a bundle path"
	run --separate-stderr runtime run "$BATS_TEST_TMPDIR/no-such-bundle/"
	assert_failure
	assert_stderr_contains "no-such-bundle"
	mkdir "$BATS_TEST_TMPDIR/empty"
	run --separate-stderr runtime run "$BATS_TEST_TMPDIR/empty/"
	assert_failure
	assert_stderr_contains "config.json"
	echo '{"ociVersion": ' >"$BUNDLE/config.json"
	run --separate-stderr runtime run "$BUNDLE/"
	assert_failure
	assert_stderr_contains "config.json"
	assert_nothing_left
}

@test "an id that is also a directory holding a config.json keeps runc's meaning" {
	# ./$CID is a bundle, and so is the cwd: `run $CID` runs the cwd's bundle as that id.
	local work=$BATS_TEST_TMPDIR/work
	make_bundle "$work" /bin/fbhelper echo the cwd bundle
	make_bundle "$work/$CID" /bin/fbhelper echo the other bundle
	cd "$work"
	run runtime run "$CID"
	assert_success
	assert_output "the cwd bundle"
	# Without a bundle in the cwd it fails as runc does; forkbox says how to mean ./$CID.
	mkdir "$BATS_TEST_TMPDIR/elsewhere"
	mv "$work/$CID" "$BATS_TEST_TMPDIR/elsewhere/"
	cd "$BATS_TEST_TMPDIR/elsewhere"
	run --separate-stderr runtime run "$CID"
	assert_failure
	assert_stderr_contains "config.json"
	if ! is_runc; then
		assert_stderr_contains "forkbox run $CID/"
	fi
}

@test "run BUNDLE/: its guardian ignores the job's signals and blocks none (its cleanup inherits its mask)" {
	skip_if_runc "runc takes an id, not a bundle path"
	set_args /bin/fbhelper sleep 100
	setsid "$FORKBOX" --root "$ROOT" run "$BUNDLE/" </dev/null >/dev/null 2>&1 3>&- 4>&- &
	RUN_PID=$!
	FB_PIDS+=("$RUN_PID")
	wait_for_running >/dev/null
	# The guardian: the run's child still running forkbox (init runs the container's program).
	local pid guardian= exe
	exe=$(readlink "/proc/$RUN_PID/exe")
	for pid in $(pgrep -P "$RUN_PID"); do
		[[ $(readlink "/proc/$pid/exe") == "$exe" ]] && guardian=$pid
	done
	[[ -n $guardian ]] || fail "no guardian among the run's children: $(pgrep -P "$RUN_PID" | tr '\n' ' ')"
	run awk '/^SigBlk:/ {print $2}' "/proc/$guardian/status"
	assert_output 0000000000000000
	# HUP, INT, PIPE and TERM (bits 0, 1, 12, 14) ignored.
	local ign
	ign=$(awk '/^SigIgn:/ {print $2}' "/proc/$guardian/status")
	(((16#$ign & 0x5003) == 0x5003)) || fail "SigIgn $ign"
	kill -TERM "$RUN_PID"
	wait "$RUN_PID" || true
	wait_for_nothing_left
	assert_nothing_left
}
