#!/usr/bin/env bats
# linux.netDevices (runtime-spec 1.3): host network devices moved into the container's
# network namespace, named as it asks, with their addresses and up state, and back at delete.

load helpers

# A veth pair per test: $DEV (moved) and its peer $PEER (stays), both removed by teardown.
setup() {
	setup_bundle
	DEV=fbn$$a
	PEER=fbn$$b
	ip link add "$DEV" type veth peer name "$PEER" || skip "no veth devices here"
	ip addr add 10.231.7.1/24 dev "$DEV"
	ip link set "$DEV" up
	update_config '.linux.netDevices = {($d): {"name": "eth9"}}' --arg d "$DEV"
}

teardown() {
	fb_teardown
	ip link del "$DEV" 2>/dev/null || true
	ip link del "$PEER" 2>/dev/null || true
}

@test "features claims netDevices" {
	skip_if_runc "runc 1.1 in Debian 12 predates runtime-spec 1.3"
	run bash -c "$FORKBOX features | jq -r .linux.netDevices.enabled"
	assert_output true
}

@test "a device moves in under its container name with its address and up state, and delete gives it back" {
	skip_if_runc "runc 1.1 in Debian 12 predates runtime-spec 1.3's netDevices"
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run ip link show "$DEV"
	assert_failure
	run runtime exec "$CID" /bin/sh -c 'ip -o -4 addr show eth9; cat /sys/class/net/eth9/flags'
	assert_success
	assert_line --index 0 --partial "eth9    inet 10.231.7.1/24"
	((${lines[1]} & 1)) || fail "eth9 is not up: ${lines[1]}"
	run jq -r ".netDevices[\"$DEV\"]" "$ROOT/$CID/state.json"
	assert_output eth9
	run runtime delete --force "$CID"
	assert_success
	run ip -o -4 addr show "$DEV"
	assert_output --partial "inet 10.231.7.1/24"
	local flags
	flags=$(cat "/sys/class/net/$DEV/flags")
	((flags & 1)) || fail "$DEV came back down: $flags"
}

@test "without a name the device keeps its host name inside" {
	skip_if_runc "runc 1.1 in Debian 12 predates runtime-spec 1.3's netDevices"
	update_config '.linux.netDevices = {($d): {}}' --arg d "$DEV"
	run_sh "ip -o -4 addr show $DEV"
	assert_success
	assert_output --partial "inet 10.231.7.1/24"
}

@test "a missing device, or a name the container has, fails the create before any device moves" {
	skip_if_runc "runc 1.1 in Debian 12 predates runtime-spec 1.3's netDevices"
	update_config '.linux.netDevices += {"fbnone0": {}}'
	run_helper true
	assert_failure
	assert_stderr_contains "linux.netDevices: no network device fbnone0"
	run ip -o -4 addr show "$DEV"
	assert_output --partial "inet 10.231.7.1/24"
	update_config '.linux.netDevices = {($d): {"name": "lo"}}' --arg d "$DEV"
	run_helper true
	assert_failure
	assert_stderr_contains "the container's network namespace has a device lo"
	run ip -o -4 addr show "$DEV"
	assert_output --partial "inet 10.231.7.1/24"
	run runtime list -q
	assert_output ""
}

@test "a create that fails after the move (a createRuntime hook) gives the device back" {
	skip_if_runc "runc 1.1 in Debian 12 predates runtime-spec 1.3's netDevices"
	update_config '.hooks.createRuntime = [{"path": "/bin/false"}]'
	set_args /bin/fbhelper sleep 100
	run create_container "$CID"
	assert_failure
	run ip -o -4 addr show "$DEV"
	assert_output --partial "inet 10.231.7.1/24"
	run runtime list -q
	assert_output ""
}

@test "a container that ends before delete takes a virtual device with its namespace, as the kernel does" {
	skip_if_runc "runc 1.1 in Debian 12 predates runtime-spec 1.3's netDevices"
	run_helper true
	assert_success
	run ip link show "$DEV"
	assert_failure
}

@test "netDevices without a network namespace of the container's own is refused" {
	remove_namespace network
	run_helper true
	assert_failure
	is_runc || assert_stderr_contains "linux.netDevices: unable to move network devices without a private network namespace"
	run ip -o -4 addr show "$DEV"
	assert_output --partial "inet 10.231.7.1/24"
}

@test "netDevices into a joined namespace that is the host's own is refused" {
	skip_if_runc "runc 1.1 in Debian 12 predates runtime-spec 1.3's netDevices"
	update_config '.linux.namespaces |= map(if .type == "network" then .path = $p else . end)' --arg p "/proc/$$/ns/net"
	run_helper true
	assert_failure
	assert_stderr_contains "the container's network namespace is the host's"
	run ip -o -4 addr show "$DEV"
	assert_output --partial "inet 10.231.7.1/24"
	run runtime list -q
	assert_output ""
}
