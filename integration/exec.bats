#!/usr/bin/env bats
# `exec`: another process in a running container.

load helpers

setup() {
	if ! runtime exec --help >/dev/null 2>&1; then
		skip "this runtime has no exec verb yet"
	fi
	setup_bundle /bin/fbhelper sleep 100
}

# start_container: $CID running /bin/fbhelper sleep 100.
start_container() {
	run_detached "$CID"
	wait_for_status "$CID" running
}

@test "exec runs a command in a running container with its output and exit code" {
	start_container
	run runtime exec "$CID" /bin/fbhelper echo from exec
	assert_success
	assert_output "from exec"
	run runtime exec "$CID" /bin/fbhelper exit 7
	assert_failure 7
}

@test "exec joins the container's pid, mount, network, uts, ipc and user namespaces" {
	start_container
	local pid ns i=0
	pid=$(container_pid "$CID")
	run runtime exec "$CID" /bin/sh -c 'for ns in pid mnt net uts ipc user; do /bin/fbhelper readlink /proc/self/ns/$ns; done'
	assert_success
	for ns in pid mnt net uts ipc user; do
		assert_line --index $i "$(readlink "/proc/$pid/ns/$ns")"
		i=$((i + 1))
	done
}

@test "exec'd process is not pid 1 and sees the container's init" {
	start_container
	run runtime exec "$CID" /bin/fbhelper pid
	assert_success
	assert_output --regexp '^[0-9]+ 0$'
	refute_output --regexp '^1 '
	run runtime exec "$CID" /bin/fbhelper read /proc/1/cmdline
	assert_output --partial "fbhelper"
}

@test "exec --env, --cwd and --user set up the process" {
	start_container
	run runtime exec --env FOO=bar --cwd /bin "$CID" /bin/sh -c 'echo "$FOO"; pwd'
	assert_success
	assert_output "bar
/bin"
	run runtime exec --user 1000:1000 "$CID" /bin/fbhelper id
	assert_success
	assert_output "uid=1000 gid=1000 groups="
	run runtime exec -u 1000:1000 --additional-gids 5 "$CID" /bin/fbhelper id
	assert_output "uid=1000 gid=1000 groups=5"
}

@test "exec --process reads the process from a JSON file" {
	start_container
	jq -n '{"terminal": false, "user": {"uid": 0, "gid": 0}, "cwd": "/dev",
		"env": ["PATH=/bin", "X=from-process-json"], "args": ["/bin/sh", "-c", "echo $X; pwd"]}' \
		>"$BATS_TEST_TMPDIR/process.json"
	run runtime exec --process "$BATS_TEST_TMPDIR/process.json" "$CID"
	assert_success
	assert_output "from-process-json
/dev"
}

@test "exec exits 128+N when its process is killed by signal N" {
	start_container
	run runtime exec "$CID" /bin/fbhelper kill-self 9
	assert_failure 137
}

@test "exec does not leak fds beyond stdio into the container" {
	start_container
	run runtime exec "$CID" /bin/fbhelper fds
	assert_success
	run awk '{print $1}' <<<"$output"
	assert_output "0
1
2"
}

@test "exec into a created container runs the process (runc behaviour)" {
	create_container "$CID"
	run runtime exec "$CID" /bin/fbhelper echo in created
	assert_success
	assert_output "in created"
	run container_status "$CID"
	assert_output created
}

@test "exec --detach --pid-file runs in the background and writes its pid" {
	start_container
	runtime exec --detach --pid-file "$BATS_TEST_TMPDIR/exec.pid" "$CID" /bin/fbhelper sleep 100 \
		</dev/null >/dev/null 2>&1 3>&- 4>&-
	local pid
	pid=$(cat "$BATS_TEST_TMPDIR/exec.pid")
	pid_alive "$pid"
	# It lives in the container's pid namespace.
	assert_equal "$(readlink "/proc/$pid/ns/pid")" "$(readlink "/proc/$(container_pid "$CID")/ns/pid")"
}

@test "exec of a missing executable fails with a message" {
	start_container
	run --separate-stderr runtime exec "$CID" /bin/no-such-program
	assert_failure
	assert_stderr_contains "no-such-program"
}

@test "exec into an unknown container fails with 'does not exist'" {
	run --separate-stderr runtime exec no-such-container /bin/true
	assert_failure
	assert_stderr_contains "does not exist"
}

@test "exec into a stopped container fails" {
	"$FORKBOX" --root "$ROOT" run --keep --bundle "$BUNDLE" "$CID" </dev/null >/dev/null 2>&1 3>&- 4>&- &
	local run_pid=$!
	wait_for_status "$CID" running
	runtime kill "$CID" KILL
	wait "$run_pid" || true
	wait_for_status "$CID" stopped
	run --separate-stderr runtime exec "$CID" /bin/true
	assert_failure
	assert_stderr_not_empty
}

@test "exec --detach --tty without a console socket fails without hanging" {
	start_container
	run timeout 30 "$FORKBOX" --root "$ROOT" exec --detach --tty "$CID" /bin/true </dev/null 3>&- 4>&-
	assert_failure
	[ "$status" -ne 124 ] || fail "exec --detach --tty hung without a console socket"
}
