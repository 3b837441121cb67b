#!/usr/bin/env bats
# `delete`: stopped and created containers go; running ones need --force.

load helpers

@test "delete removes a stopped container and its state" {
	run runtime run --keep --bundle "$BUNDLE" "$CID"
	assert_success
	run runtime delete "$CID"
	assert_success
	assert_output ""
	run runtime state "$CID"
	assert_failure
	run runtime list -q
	assert_output ""
	[ ! -e "$ROOT/$CID" ]
}

@test "delete of a running container fails without --force and it keeps running" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run --separate-stderr runtime delete "$CID"
	assert_failure
	assert_stderr_contains "running"
	run container_status "$CID"
	assert_output running
}

@test "delete --force kills and removes a running container" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	local pid
	pid=$(container_pid "$CID")
	run runtime delete --force "$CID"
	assert_success
	wait_for_pid_gone "$pid"
	run runtime state "$CID"
	assert_failure
	[ ! -e "$ROOT/$CID" ]
}

@test "delete -f is --force" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	local pid
	pid=$(container_pid "$CID")
	pid_alive "$pid"
	run runtime delete -f "$CID"
	assert_success
	wait_for_pid_gone "$pid"
	run runtime list -q
	assert_output ""
}

@test "delete of a created container succeeds without --force and kills its init" {
	# runc behaviour, relied on by containerd's shim (see conformance/KNOWN.md).
	create_container "$CID"
	local pid
	pid=$(container_pid "$CID")
	run runtime delete "$CID"
	assert_success
	wait_for_pid_gone "$pid"
	run runtime state "$CID"
	assert_failure
}

@test "delete of an unknown container fails with 'does not exist'" {
	run --separate-stderr runtime delete no-such-container
	assert_failure
	assert_stderr_contains "does not exist"
}

@test "delete --force of an unknown container succeeds" {
	run runtime delete --force no-such-container
	assert_success
}

@test "delete of a container whose init was killed from outside succeeds" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	kill -KILL "$(container_pid "$CID")"
	wait_for_status "$CID" stopped
	run runtime delete "$CID"
	assert_success
	run runtime list -q
	assert_output ""
}

@test "delete removes the container's cgroup" {
	local cg=/$CID-cg dirs=()
	update_config '.linux.cgroupsPath = $p' --arg p "$cg"
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	local d
	for d in /sys/fs/cgroup/pids /sys/fs/cgroup/memory /sys/fs/cgroup/unified /sys/fs/cgroup; do
		[ -d "$d$cg" ] && dirs+=("$d$cg")
	done
	[ "${#dirs[@]}" -gt 0 ] || fail "no cgroup directory for $cg"
	runtime delete --force "$CID"
	for d in "${dirs[@]}"; do
		[ ! -d "$d" ] || fail "$d still exists after delete"
	done
}

@test "delete removes the cgroups made below the container's, as runc does" {
	# systemd or a nested runtime in the container, or `exec --cgroup`, make sub-cgroups.
	local cg=/$CID-cg dirs=()
	update_config '.linux.cgroupsPath = $p' --arg p "$cg"
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	local d
	for d in /sys/fs/cgroup/pids /sys/fs/cgroup/memory /sys/fs/cgroup/unified /sys/fs/cgroup; do
		[ -d "$d$cg" ] || continue
		dirs+=("$d$cg")
		mkdir -p "$d$cg/a/b/c" "$d$cg/d"
	done
	[ "${#dirs[@]}" -gt 0 ] || fail "no cgroup directory for $cg"
	run runtime delete --force "$CID"
	assert_success
	for d in "${dirs[@]}"; do
		[ ! -d "$d" ] || fail "$d still exists after delete"
	done
}

@test "delete --force of a container without a pid namespace kills what runs in its sub-cgroups too" {
	local cg=/$CID-cg
	remove_namespace pid
	run_with_sub_cgroup_process "$cg"
	local pid=$SUB_PID
	pid_alive "$pid"
	run runtime delete --force "$CID"
	assert_success
	wait_for_pid_gone "$pid"
	local d
	for d in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
		[ ! -d "$d$cg" ] || fail "$d$cg still exists after delete"
	done
}

@test "delete removes a container's default cgroup and keeps the parent /forkbox for the next one" {
	# No cgroupsPath: /forkbox/$CID in every hierarchy. The parent stays (as runc leaves the
	# parents it makes): removing the last cpuset cgroup patches the kernel's text.
	update_config 'del(.linux.cgroupsPath)'
	# So that this container's create makes the parent (rmdir leaves one in use alone).
	rmdir /sys/fs/cgroup/*/forkbox /sys/fs/cgroup/forkbox 2>/dev/null || true
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	local d dirs=()
	for d in /sys/fs/cgroup/cpuset /sys/fs/cgroup/pids /sys/fs/cgroup/unified /sys/fs/cgroup; do
		[ -d "$d/forkbox/$CID" ] && dirs+=("$d")
	done
	[ "${#dirs[@]}" -gt 0 ] || fail "no cgroup directory for /forkbox/$CID"
	run runtime delete --force "$CID"
	assert_success
	for d in "${dirs[@]}"; do
		[ ! -d "$d/forkbox/$CID" ] || fail "$d/forkbox/$CID still exists after delete"
		[ -d "$d/forkbox" ] || fail "$d/forkbox was removed with the last container"
	done
}

@test "delete --force ends a create stuck in a hook that never returns, and leaves nothing" {
	skip_if_runc "runc takes no lock for a delete to wait on"
	local cg=/$CID-cg
	update_config '.linux.cgroupsPath = $p | .hooks.createRuntime = [{"path": "/bin/sleep", "args": ["sleep", "1000"]}]' \
		--arg p "$cg"
	set_args /bin/fbhelper sleep 100
	"$FORKBOX" --root "$ROOT" create --bundle "$BUNDLE" "$CID" </dev/null >"$BATS_TEST_TMPDIR/c.out" 2>"$BATS_TEST_TMPDIR/c.err" 3>&- 4>&- &
	local create=$! hook="" i
	for ((i = 0; i < 200; i++)); do
		hook=$(pgrep -P "$create" -x sleep || true)
		[ -z "$hook" ] || break
		sleep 0.05
	done
	[ -n "$hook" ] || fail "the createRuntime hook never ran: $(cat "$BATS_TEST_TMPDIR/c.err"; ps -o pid,ppid,comm --ppid "$create")"
	local kids
	kids=$(cat "/proc/$create/task/$create/children")
	# A delete waits for a verb that holds the container; one stuck for 10 s is killed.
	# (The timeout only turns a delete that waits forever into a failure, not a hung suite.)
	run --separate-stderr timeout 120 "$FORKBOX" --root "$ROOT" delete --force "$CID"
	assert_success
	assert_stderr_contains "killing forkbox process $create"
	local rc=0
	wait "$create" || rc=$?
	[ "$rc" -eq 137 ] || fail "create exited $rc, not killed"
	local p
	for p in $hook $kids; do wait_for_pid_gone "$p"; done
	[ ! -e "$ROOT/$CID" ] || fail "state dir left"
	local d
	for d in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
		[ ! -d "$d${cg#/}" ] || fail "cgroup $d${cg#/} left"
	done
	run runtime list -q
	assert_output ""
}

# A create killed between its mkdir and the rename of its state directory leaves a staging
# directory ("~..."): delete --force, and run's own delete, sweep those older than a minute.
@test "delete --force and run remove the staging directories crashed creates left" {
	skip_if_runc "forkbox's state directories"
	mkdir -p "$ROOT"
	mkdir "$ROOT/~crashed-1" "$ROOT/~crashed-2" "$ROOT/~young"
	: >"$ROOT/~crashed-1/lock"
	touch -d '-2 minutes' "$ROOT/~crashed-1" "$ROOT/~crashed-2"
	set_args /bin/fbhelper true
	run runtime run --bundle "$BUNDLE" "$CID"
	assert_success
	[ ! -e "$ROOT/~crashed-1" ] && [ ! -e "$ROOT/~crashed-2" ]
	# Young: maybe a create between its mkdir and its lock.
	[ -d "$ROOT/~young" ]
	touch -d '-2 minutes' "$ROOT/~young"
	run runtime delete --force no-such-container
	assert_success
	[ ! -e "$ROOT/~young" ]
}
