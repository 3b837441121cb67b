#!/usr/bin/env bats
# The systemd cgroup driver (--systemd-cgroup), against a real systemd: the fixture of
# systemd-helpers.bash boots systemd as PID 1 of fresh namespaces once per file, and every
# runtime call runs inside it (runtime() is sd_exec'd).

load helpers
load systemd-helpers

setup_file() {
	sd_boot
}

teardown_file() {
	sd_shutdown
}

# Every runtime call runs inside the fixture, from its fbx-caller cgroup.
runtime() {
	sd_exec "$FORKBOX" --root "$ROOT" "$@"
}

setup() {
	[[ -n ${SD_PID:-} ]] || skip "no systemd fixture"
	setup_bundle
}

teardown() {
	fb_teardown
	# Units a failed test left: stopped and forgotten, so the next test starts clean.
	local unit
	for unit in $(sd_systemctl list-units --all --plain --no-legend "*$CID*" 2>/dev/null | awk '{print $1}'); do
		sd_systemctl stop "$unit" >/dev/null 2>&1
		sd_systemctl reset-failed "$unit" >/dev/null 2>&1
	done
}

# scope_of PID: the cgroup of PID inside the fixture, in the hierarchy mounted at
# /sys/fs/cgroup/HIERARCHY (the second argument, default name=systemd's "systemd").
cgroup_of() {
	local pid=$1 hierarchy=${2:-systemd} ctl
	case $hierarchy in
	unified) ctl= ;;
	systemd) ctl=name=systemd ;;
	*) ctl=$hierarchy ;;
	esac
	sd_exec awk -F: -v c="$ctl" '$2 == c { print $3 }' "/proc/$pid/cgroup"
}

@test "fixture: systemd runs as PID 1 of its own namespaces, with private /run, /dev and cgroups" {
	run sd_systemctl is-system-running
	assert_output running
	# Its cgroup namespace's root is the fixture's cgroup: what it sees as / is ours.
	run sd_exec cat /proc/1/cgroup
	assert_line "1:cpu:/init.scope"
	[[ -d $(sd_cgroup_dir cpu)/init.scope ]]
	# Nothing of the boot sequence ran: no tmpfiles, no journal, no udev.
	run sd_systemctl list-units --no-legend --plain --state=active '*.service'
	refute_output --partial tmpfiles
	refute_output --partial journald
	run sd_systemctl is-enabled systemd-tmpfiles-setup.service
	assert_output masked-runtime
	# /proc/sys and /sys are read-only inside; /run and /dev are its own.
	run sd_exec sh -c 'echo 1 >/proc/sys/kernel/sysrq'
	assert_failure
	run sd_exec touch /sys/kernel/fbx-test
	assert_failure
	run sd_exec findmnt -n -o FSTYPE /run
	assert_output tmpfs
	run sd_exec findmnt -n -o SOURCE /dev/console
	assert_output --partial "$SD_NAME/systemd.log"
}

@test "fixture: its system bus starts on demand and stops again" {
	sd_start_dbus
	run sd_exec busctl --system call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
		org.freedesktop.DBus.Properties Get ss org.freedesktop.systemd1.Manager Version
	assert_success
	assert_output --partial 'v s "252'
	sd_stop_dbus
	run sd_exec busctl --system status
	assert_failure
}

@test "fixture: runc --systemd-cgroup run inside gets a delegated scope with its limits" {
	[[ -x /usr/sbin/runc ]] || skip "no /usr/sbin/runc"
	update_config '.linux.cgroupsPath = $p | .linux.resources.memory = {limit: 67108864} | .linux.resources.pids = {limit: 33}' \
		--arg p "system.slice:fbx:$CID"
	set_args /bin/sh -c 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes; sleep 100'
	sd_exec /usr/sbin/runc --root "$ROOT-runc" --systemd-cgroup run -d --bundle "$BUNDLE" "$CID" \
		</dev/null >"$BATS_TEST_TMPDIR/$CID.out" 2>&1 3>&- 4>&-
	run sd_unit_property "fbx-$CID.scope" Delegate
	assert_output yes
	run sd_unit_property "fbx-$CID.scope" MemoryLimit
	assert_output 67108864
	run sd_unit_property "fbx-$CID.scope" TasksMax
	assert_output 33
	wait_for_output "$CID" 67108864
	sd_exec /usr/sbin/runc --root "$ROOT-runc" delete --force "$CID"
	rm -rf "$ROOT-runc"
}
