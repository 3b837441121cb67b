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
