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

@test "exec --pidfd-socket sends a pidfd of the process it starts" {
	skip_if_runc "--pidfd-socket came with runc 1.2; Debian 12 has 1.1.5"
	start_container
	local sock=$BATS_TEST_TMPDIR/pidfd.sock result=$BATS_TEST_TMPDIR/pidfd.out
	python3 "$INTEGRATION_DIR/helper/pidfd_kill.py" "$sock" "$result" 15 3>&- 4>&- &
	FB_PIDS+=($!)
	wait_for_file "$sock.ready"
	runtime exec --detach --pidfd-socket "$sock" --pid-file "$BATS_TEST_TMPDIR/exec.pid" "$CID" /bin/fbhelper sleep 100 \
		</dev/null >/dev/null 2>&1 3>&- 4>&-
	wait_for_file "$result"
	local pid
	pid=$(cat "$BATS_TEST_TMPDIR/exec.pid")
	run cat "$result"
	assert_output "setns $pid"
	touch "$result.go"
	wait "${FB_PIDS[-1]}"
	# SIGTERM through the pidfd ended it; the container's init lives on.
	wait_for_pid_gone "$pid"
	run container_status "$CID"
	assert_output running
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

@test "exec racing its container's death fails with runc's words, never the kernel's ENOMEM" {
	# An exec that joined the pid namespace before init died gets ENOMEM from clone (the
	# kernel's answer for a dying pid namespace): the reliability stampede met it once in
	# 800 verbs; 30 deaths with 6 execs each meet it a few times when it is not handled.
	# (runc 1.1 fails this test: its nsexec reports the raw "failed to open /proc/PID/ns/ipc".)
	local i j pid id execs errs=$BATS_TEST_TMPDIR/race
	mkdir -p "$errs"
	for ((i = 0; i < 30; i++)); do
		id=$CID-$i
		run_detached "$id"
		pid=$(container_pid "$id")
		execs=()
		for ((j = 0; j < 6; j++)); do
			runtime exec "$id" /bin/fbhelper true </dev/null >/dev/null 2>"$errs/$i.$j" 3>&- 4>&- &
			execs+=($!)
		done
		sleep "0.00$((RANDOM % 9))"
		kill -KILL "$pid"
		wait "${execs[@]}" || true
		runtime delete --force "$id" </dev/null 3>&- 4>&-
	done
	run grep -hv "cannot exec in a stopped container" "$errs"/*
	[ -z "$output" ] || fail "unexpected exec errors: $output"
}

@test "exec --detach --tty without a console socket fails without hanging" {
	start_container
	run timeout 30 "$FORKBOX" --root "$ROOT" exec --detach --tty "$CID" /bin/true </dev/null 3>&- 4>&-
	assert_failure
	[ "$status" -ne 124 ] || fail "exec --detach --tty hung without a console socket"
}

@test "exec into a paused container fails cleanly instead of hanging" {
	start_container
	runtime pause "$CID"
	run --separate-stderr timeout 30 "$FORKBOX" --root "$ROOT" exec "$CID" /bin/true
	assert_failure
	[ "$status" -ne 124 ] || fail "exec into a paused container hung"
	assert_stderr_contains "paused"
	runtime resume "$CID"
}

@test "exec'd process is in the container's cgroups" {
	start_container
	runtime exec --detach --pid-file "$BATS_TEST_TMPDIR/exec.pid" "$CID" /bin/fbhelper sleep 100 \
		</dev/null >/dev/null 2>&1 3>&- 4>&-
	local pid init
	pid=$(cat "$BATS_TEST_TMPDIR/exec.pid")
	init=$(container_pid "$CID")
	# Same cgroup in every hierarchy as init (v1 controllers and the v2 mount).
	assert_equal "$(sort "/proc/$pid/cgroup")" "$(sort "/proc/$init/cgroup")"
}

# runc's --cgroup: [CONTROLLERS:]PATH, an existing sub-cgroup of the container's.
@test "exec --cgroup runs the process in sub-cgroups of the container's" {
	local cg=/$CID-cg
	update_config '.linux.cgroupsPath = $p' --arg p "$cg"
	start_container
	local made
	made=$(make_sub_cgroups "$cg" all)
	[ "$made" -gt 0 ] || fail "no cgroup directory for $cg"
	run runtime exec "$CID" /bin/fbhelper read /proc/self/cgroup
	assert_success
	local own=$output
	run runtime exec --cgroup all "$CID" /bin/fbhelper read /proc/self/cgroup
	assert_success
	assert_equal "$output" "${own//$cg/$cg/all}"
	if [ -d /sys/fs/cgroup/memory$cg ] && [ -d /sys/fs/cgroup/pids$cg ]; then
		# Per controller (cgroup v1); the other hierarchies keep the container's own.
		mkdir "/sys/fs/cgroup/memory$cg/mem"
		run runtime exec --cgroup memory:mem --cgroup pids:all "$CID" /bin/fbhelper read /proc/self/cgroup
		assert_success
		assert_line --regexp "^[0-9]+:memory:$cg/mem\$"
		assert_line --regexp "^[0-9]+:pids:$cg/all\$"
		assert_line --regexp "^[0-9]+:freezer:$cg\$"
	fi
}

@test "exec --cgroup refuses a missing sub-cgroup and paths that leave the container's" {
	start_container
	run --separate-stderr runtime exec --cgroup nosuch "$CID" /bin/true
	assert_failure 255
	assert_stderr_contains "--cgroup: no cgroup"
	run --separate-stderr runtime exec --cgroup ../escape "$CID" /bin/true
	assert_failure 255
	assert_stderr_contains "under the container's"
	run --separate-stderr runtime exec --cgroup a --cgroup memory:b "$CID" /bin/true
	assert_failure 255
	run --separate-stderr runtime exec --cgroup nosuchcontroller:x "$CID" /bin/true
	assert_failure 255
	assert_stderr_contains "nosuchcontroller"
	run runtime ps "$CID"
	assert_success
}

@test "kill --all reaches processes started by exec" {
	start_container
	runtime exec --detach --pid-file "$BATS_TEST_TMPDIR/exec.pid" "$CID" /bin/fbhelper sleep 100 \
		</dev/null >/dev/null 2>&1 3>&- 4>&-
	local pid
	pid=$(cat "$BATS_TEST_TMPDIR/exec.pid")
	runtime kill --all "$CID" KILL
	wait_for_pid_gone "$pid"
}

@test "exec applies the container's seccomp filter" {
	update_config '.linux.seccomp = {"defaultAction": "SCMP_ACT_ALLOW",
		"syscalls": [{"names": ["getcwd"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}'
	start_container
	run runtime exec "$CID" /bin/fbhelper pwd
	assert_failure
	assert_output --partial "Operation not permitted"
}

@test "exec --cap adds a capability and --no-new-privs sets NoNewPrivs" {
	start_container
	run runtime exec --cap CAP_SYS_ADMIN "$CID" /bin/fbhelper caps
	assert_success
	# bit 21 = CAP_SYS_ADMIN in the effective set
	local eff
	eff=$(awk '/^CapEff/ {print $2}' <<<"$output")
	(( (0x$eff >> 21) & 1 )) || fail "CAP_SYS_ADMIN missing from CapEff=$eff"
	run runtime exec --no-new-privs "$CID" /bin/fbhelper status-field NoNewPrivs
	assert_output 1
}

@test "exec --preserve-fds passes extra fds to the process" {
	start_container
	run runtime exec --preserve-fds 1 "$CID" /bin/fbhelper readlink /proc/self/fd/3 3<"$BATS_TEST_TMPDIR"
	assert_success
	run runtime exec "$CID" /bin/fbhelper readlink /proc/self/fd/3 3<"$BATS_TEST_TMPDIR"
	assert_failure
}

@test "exec command words that look like options belong to the command" {
	start_container
	run runtime exec "$CID" /bin/sh -c 'echo -e x'
	assert_success
	assert_output "x"
}

@test "exec --apparmor and --process-label are refused clearly on this host" {
	skip_if_runc "runc ignores AppArmor when the host has none"
	start_container
	run --separate-stderr runtime exec --apparmor some-profile "$CID" /bin/true
	assert_failure
	assert_stderr_contains "AppArmor"
	run --separate-stderr runtime exec --process-label system_u:system_r:foo_t "$CID" /bin/true
	assert_failure
	assert_stderr_contains "SELinux"
}

@test "exec --tty --console-socket hands the pty master to the socket" {
	start_container
	local sock=$BATS_TEST_TMPDIR/console.sock result=$BATS_TEST_TMPDIR/console.out
	python3 "$INTEGRATION_DIR/helper/recv_console.py" "$sock" "$result" 3>&- 4>&- &
	FB_PIDS+=($!)
	wait_for_file "$sock.ready"
	runtime exec --tty --detach --console-socket "$sock" "$CID" /bin/fbhelper readlink /proc/self/fd/1 \
		</dev/null >/dev/null 2>&1 3>&- 4>&-
	wait "${FB_PIDS[-1]}"
	run cat "$result"
	assert_line --index 0 "isatty=True"
	assert_line --index 1 --regexp '^/dev/pts/[0-9]+.?$'
}

@test "exec --tty in the foreground uses the caller's terminal" {
	start_container
	run script -qec "$FORKBOX --root $ROOT exec -t $CID /bin/sh -c 'tty; exit 3'" /dev/null </dev/null
	assert_failure 3
	assert_output --regexp '/dev/pts/[0-9]+'
}

@test "exec exits 255 when exec itself fails before the process runs (a --pid-file in a missing directory)" {
	start_container
	run --separate-stderr runtime exec --pid-file "$BATS_TEST_TMPDIR/no/such/dir/pid" "$CID" /bin/true
	assert_failure 255
	assert_stderr_not_empty
}

@test "exec --ignore-paused into a paused container runs the process once it is resumed" {
	start_container
	runtime pause "$CID"
	"$FORKBOX" --root "$ROOT" exec --ignore-paused "$CID" /bin/fbhelper echo after-resume \
		</dev/null >"$BATS_TEST_TMPDIR/exec.out" 2>&1 3>&- 4>&- &
	local exec_pid=$!
	FB_PIDS+=("$exec_pid")
	sleep 0.5
	pid_alive "$exec_pid" || fail "exec returned while the container was paused: $(cat "$BATS_TEST_TMPDIR/exec.out")"
	runtime resume "$CID"
	wait "$exec_pid"
	run cat "$BATS_TEST_TMPDIR/exec.out"
	assert_output after-resume
}
