#!/usr/bin/env bats
# The systemd cgroup driver on a pure cgroup v2 host, the layout most users run: the fixture of
# systemd-helpers.bash with SD_CGROUP2_ONLY=1 mounts the host's cgroup2 hierarchy alone at its
# /sys/fs/cgroup, so systemd runs in unified mode and the runtime detects v2. On this hybrid
# machine that hierarchy holds no controller but hugetlb (the others are bound to v1), so
# these tests check the placement, the delegation and the device policy (a BPF program, which
# needs no controller), not memory or cpu limits (the unit tests pin the v2 properties sent).

load helpers
load systemd-helpers

setup_file() {
	SD_CGROUP2_ONLY=1 sd_boot
}

teardown_file() {
	sd_shutdown
}

runtime() {
	sd_exec "$FORKBOX" --root "$ROOT" "$@"
}

setup() {
	[[ -n ${SD_PID:-} ]] || skip "no systemd fixture"
	setup_bundle
}

teardown() {
	fb_teardown
	sd_forget_units "$CID"
}

@test "v2 fixture: systemd runs in unified mode on a cgroup2 /sys/fs/cgroup" {
	run sd_systemctl is-system-running
	assert_output running
	run sd_exec stat -fc %T /sys/fs/cgroup
	assert_output cgroup2fs
	# The kernel still lists the v1 hierarchies, which nothing here mounts.
	run sd_exec cat /proc/1/cgroup
	assert_line "0::/init.scope"
	run sd_exec grep -c " - cgroup " /proc/self/mountinfo
	assert_output 0
}

@test "v2: create, start, exec, kill and delete: every process in a delegated scope, gone after delete" {
	set_cgroups_path "system.slice:fbx:$CID"
	set_args /bin/sh -c 'echo started; exec sleep 100'
	sd_create "$CID" || fail "create: $(container_err "$CID")"
	local unit=fbx-$CID.scope
	run sd_unit_property "$unit" ActiveState
	assert_output active
	run sd_unit_property "$unit" Delegate
	assert_output yes
	run sd_unit_property "$unit" ControlGroup
	assert_output "/system.slice/$unit"
	runtime start "$CID"
	wait_for_output "$CID" started
	local pid
	pid=$(container_pid "$CID")
	run sd_exec cat "/proc/$pid/cgroup"
	assert_line "0::/system.slice/$unit"
	[[ -f $(sd_cgroup_dir unified)/system.slice/$unit/cgroup.procs ]]
	# An exec'd process: at the root of the container's cgroup namespace, which is the scope.
	run runtime exec "$CID" cat /proc/self/cgroup
	assert_success
	assert_line "0::/"
	# The exec'd process is gone; init alone is left in the scope.
	run sd_exec cat "/sys/fs/cgroup/system.slice/$unit/cgroup.procs"
	assert_success
	assert_output "$pid"
	runtime kill "$CID" KILL
	wait_for_status "$CID" stopped
	runtime delete "$CID"
	assert_unit_gone "$unit"
	assert_no_cgroups_left "$unit"
}

@test "v2: the device rules are the unit's DevicePolicy and DeviceAllow; a device outside them is refused" {
	set_cgroups_path "system.slice:fbx:$CID"
	update_config '.linux.devices += [{path: "/dev/tty0", type: "c", major: 4, minor: 0, fileMode: 438}]'
	set_args /bin/sh -c 'head -c1 /dev/tty0; echo opened; exec sleep 100'
	sd_create "$CID" || fail "create: $(container_err "$CID")"
	local unit=fbx-$CID.scope
	run sd_unit_property "$unit" DevicePolicy
	assert_output strict
	run sd_unit_property "$unit" DeviceAllow
	assert_output --partial "/dev/char/1:3 rwm"
	runtime start "$CID"
	run runtime exec "$CID" sh -c 'head -c1 /dev/tty0'
	assert_failure
	assert_output --partial "Operation not permitted"
	run runtime exec "$CID" sh -c 'head -c1 /dev/zero | wc -c'
	assert_output 1
	wait_for_output "$CID" opened
	run container_err "$CID"
	assert_output --partial "/dev/tty0: Operation not permitted"
}

@test "v2: a limit whose controller the cgroup2 hierarchy lacks fails create clearly, leaving no unit, cgroup or state" {
	set_cgroups_path "system.slice:fbx:$CID"
	update_config '.linux.resources.memory = {limit: 67108864}'
	run sd_create "$CID"
	assert_failure
	run container_err "$CID"
	assert_output --partial "memory"
	assert_unit_gone "fbx-$CID.scope"
	assert_no_cgroups_left "fbx-$CID.scope"
	[[ ! -d $ROOT/$CID ]]
}
