#!/usr/bin/env bats
# `spec`: the config.json template.

load helpers

setup() {
	SPECDIR=$BATS_TEST_TMPDIR/spec
	mkdir -p "$SPECDIR"
}

@test "spec writes a config.json template in the current directory" {
	cd "$SPECDIR"
	run runtime spec
	assert_success
	[ -f "$SPECDIR/config.json" ]
	run jq -r '.ociVersion' "$SPECDIR/config.json"
	assert_output --regexp '^1\.[0-9]+\.[0-9]+'
}

@test "spec --bundle writes config.json into the bundle directory" {
	run runtime spec --bundle "$SPECDIR"
	assert_success
	jq -e . "$SPECDIR/config.json" >/dev/null
}

@test "spec -b is --bundle" {
	run runtime spec -b "$SPECDIR"
	assert_success
	[ -f "$SPECDIR/config.json" ]
}

@test "spec template runs sh in a terminal on a read-only rootfs" {
	runtime spec --bundle "$SPECDIR"
	run jq -c '[.process.terminal, .process.args, .process.cwd, .process.user.uid, .process.user.gid, .root.path, .root.readonly]' "$SPECDIR/config.json"
	assert_output '[true,["sh"],"/",0,0,"rootfs",true]'
}

@test "spec template creates pid, network, ipc, uts and mount namespaces" {
	runtime spec --bundle "$SPECDIR"
	run jq -r '.linux.namespaces[].type' "$SPECDIR/config.json"
	local ns
	for ns in pid network ipc uts mount; do
		assert_line "$ns"
	done
	refute_line user
}

@test "spec template masks and write-protects /proc and /sys paths" {
	runtime spec --bundle "$SPECDIR"
	run jq -r '.linux.maskedPaths[]' "$SPECDIR/config.json"
	assert_line /proc/kcore
	assert_line /proc/keys
	assert_line /sys/firmware
	run jq -r '.linux.readonlyPaths[]' "$SPECDIR/config.json"
	assert_line /proc/sys
	assert_line /proc/sysrq-trigger
}

@test "spec template mounts proc, dev, devpts, shm, mqueue and sysfs" {
	runtime spec --bundle "$SPECDIR"
	run jq -r '.mounts[] | "\(.destination) \(.type)"' "$SPECDIR/config.json"
	assert_line "/proc proc"
	assert_line "/dev tmpfs"
	assert_line "/dev/pts devpts"
	assert_line "/dev/shm tmpfs"
	assert_line "/dev/mqueue mqueue"
	assert_line "/sys sysfs"
}

@test "spec template sets noNewPrivileges and a NOFILE rlimit" {
	runtime spec --bundle "$SPECDIR"
	run jq -c '[.process.noNewPrivileges, (.process.rlimits[] | select(.type == "RLIMIT_NOFILE") | .soft)]' "$SPECDIR/config.json"
	assert_output '[true,1024]'
}

@test "spec refuses to overwrite an existing config.json" {
	echo '{"keep": "me"}' >"$SPECDIR/config.json"
	run --separate-stderr runtime spec --bundle "$SPECDIR"
	assert_failure
	assert_stderr_contains "config.json"
	run cat "$SPECDIR/config.json"
	assert_output '{"keep": "me"}'
}

@test "spec --bundle of a missing directory fails" {
	run --separate-stderr runtime spec --bundle "$SPECDIR/missing"
	assert_failure
	assert_stderr_not_empty
	[ ! -e "$SPECDIR/missing" ]
}

@test "spec --rootless adds a user namespace mapping the caller's ids" {
	run runtime spec --rootless --bundle "$SPECDIR"
	assert_success
	run jq -r '.linux.namespaces[].type' "$SPECDIR/config.json"
	assert_line user
	refute_line network
	run jq -c '[.linux.uidMappings, .linux.gidMappings]' "$SPECDIR/config.json"
	assert_output "[[{\"containerID\":0,\"hostID\":$(id -u),\"size\":1}],[{\"containerID\":0,\"hostID\":$(id -g),\"size\":1}]]"
}

@test "a bundle from the spec template runs once terminal is off" {
	make_bundle "$BATS_TEST_TMPDIR/b" /bin/fbhelper echo template ok
	BUNDLE=$BATS_TEST_TMPDIR/b
	run runtime run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_output "template ok"
}

@test "spec template has a default seccomp profile without mount, unshare or ptrace" {
	skip_if_runc "runc's spec has no seccomp profile"
	runtime spec --bundle "$SPECDIR"
	run jq -c '.linux.seccomp | [.defaultAction, .defaultErrnoRet]' "$SPECDIR/config.json"
	assert_output '["SCMP_ACT_ERRNO",1]'
	run jq -r '.linux.seccomp.syscalls[] | select(.action == "SCMP_ACT_ALLOW") | .names[]' "$SPECDIR/config.json"
	assert_line read
	assert_line execve
	refute_line mount
	refute_line unshare
	refute_line ptrace
	refute_line kexec_load
	run jq -c '.linux.seccomp.syscalls[] | select(.names == ["clone3"]) | [.action, .errnoRet]' "$SPECDIR/config.json"
	assert_output '["SCMP_ACT_ERRNO",38]'
}
