#!/usr/bin/env bats
# update: new cgroup limits for a live container, from runc's flags or a resources file.

load helpers

# cgroup_file NAME: the container's file NAME in whichever hierarchy holds it (v1 or v2).
cgroup_file() {
	local cg=$1 name=$2 ctrl=${2%%.*} f
	for f in "/sys/fs/cgroup/$ctrl$cg/$name" "/sys/fs/cgroup/unified$cg/$name" "/sys/fs/cgroup$cg/$name"; do
		if [ -f "$f" ]; then
			cat "$f"
			return
		fi
	done
	echo "no $name for $cg" >&2
	return 1
}

setup() {
	setup_bundle
	CG=/$CID-upd
	update_config '.linux.cgroupsPath = $p | .linux.resources.pids = {"limit": 42}' --arg p "$CG"
	set_args /bin/fbhelper sleep 100
}

@test "update --pids-limit changes pids.max of a running container" {
	run_detached "$CID"
	run cgroup_file "$CG" pids.max
	assert_output 42
	run runtime update --pids-limit 100 "$CID"
	assert_success
	run cgroup_file "$CG" pids.max
	assert_output 100
}

@test "update --memory takes sizes with units and --cpu-quota/--cpu-period set the CFS limits" {
	run_detached "$CID"
	run runtime update --memory 64m --cpu-period 100000 --cpu-quota 50000 "$CID"
	assert_success
	if [ -f "/sys/fs/cgroup/memory$CG/memory.limit_in_bytes" ]; then
		run cgroup_file "$CG" memory.limit_in_bytes
		assert_output 67108864
		run cgroup_file "$CG" cpu.cfs_quota_us
		assert_output 50000
	else
		run cgroup_file "$CG" memory.max
		assert_output 67108864
		run cgroup_file "$CG" cpu.max
		assert_output "50000 100000"
	fi
}

@test "update -r - reads a linux.resources document from stdin" {
	run_detached "$CID"
	run runtime update -r - "$CID" <<<'{"pids": {"limit": 7}}'
	assert_success
	run cgroup_file "$CG" pids.max
	assert_output 7
}

@test "update with a malformed resources document fails and changes nothing" {
	run_detached "$CID"
	run runtime update -r - "$CID" <<<'{"pids": {"limit": "many"}}'
	assert_failure
	run cgroup_file "$CG" pids.max
	assert_output 42
}

@test "update of a stopped container fails" {
	set_args /bin/true
	run_detached "$CID"
	wait_for_status "$CID" stopped
	run runtime update --pids-limit 5 "$CID"
	assert_failure
}

@test "update of an unknown container fails" {
	run runtime update --pids-limit 5 no-such-container
	assert_failure
}

# Kubernetes' in-place resize on cgroup v1 (containerd CRI sends memory and memsw equal):
# the kernel keeps memory.limit_in_bytes <= memory.memsw.limit_in_bytes at every moment.
@test "update raises and lowers memory with memsw on cgroup v1 in the order the kernel accepts" {
	[ -f /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes ] || skip "no v1 memsw accounting on this host"
	update_config '.linux.resources.memory = {"limit": 67108864, "swap": 67108864}'
	run_detached "$CID"
	run runtime update --memory 134217728 --memory-swap 134217728 "$CID"
	assert_success
	run cgroup_file "$CG" memory.limit_in_bytes
	assert_output 134217728
	run cgroup_file "$CG" memory.memsw.limit_in_bytes
	assert_output 134217728
	run runtime update --memory 33554432 --memory-swap 33554432 "$CID"
	assert_success
	run cgroup_file "$CG" memory.limit_in_bytes
	assert_output 33554432
	run cgroup_file "$CG" memory.memsw.limit_in_bytes
	assert_output 33554432
}

@test "update --memory -1 makes memory (and memsw, when unsaid) unlimited" {
	[ -f /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes ] || skip "no v1 memsw accounting on this host"
	update_config '.linux.resources.memory = {"limit": 67108864, "swap": 67108864}'
	run_detached "$CID"
	run runtime update --memory -1 "$CID"
	assert_success
	local unlimited
	unlimited=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)
	run cgroup_file "$CG" memory.limit_in_bytes
	assert_output "$unlimited"
	run cgroup_file "$CG" memory.memsw.limit_in_bytes
	assert_output "$unlimited"
}

# A pod cgroup someone else made in the v1 cpuset hierarchy may have empty cpus and mems:
# no task can join it (ENOSPC) until they are filled from its parent, as runc does.
@test "a container under an existing, empty v1 cpuset parent gets the parent's cpus and mems" {
	[ -d /sys/fs/cgroup/cpuset ] || skip "no v1 cpuset hierarchy"
	mkdir "/sys/fs/cgroup/cpuset/$CID-pod"
	update_config '.linux.cgroupsPath = $p' --arg p "/$CID-pod/ctr"
	run_detached "$CID"
	[ "$(container_status "$CID")" = running ]
	assert_equal "$(cat "/sys/fs/cgroup/cpuset/$CID-pod/cpuset.cpus")" "$(cat /sys/fs/cgroup/cpuset/cpuset.cpus)"
	runtime delete --force "$CID"
	find /sys/fs/cgroup -maxdepth 2 -type d -name "$CID-pod" -exec rmdir {} + 2>/dev/null || true
}

@test "update takes runc's flag names: --cpu-share sets the CPU shares" {
	run_detached "$CID"
	run runtime update --cpu-share 512 "$CID"
	assert_success
	if [ -f "/sys/fs/cgroup/cpu$CG/cpu.shares" ]; then
		run cgroup_file "$CG" cpu.shares
		assert_output 512
	fi
}

@test "update --l3-cache-schema and --mem-bw-schema are refused with a message (no Intel RDT here)" {
	run_detached "$CID"
	run --separate-stderr runtime update --l3-cache-schema "L3:0=f" "$CID"
	assert_failure
	assert_stderr_not_empty
	run --separate-stderr runtime update --mem-bw-schema "MB:0=50" "$CID"
	assert_failure
	assert_stderr_not_empty
}

@test "updates that leave the device rules alone never deny an allowed device meanwhile" {
	update_config '.linux.resources.devices = [{"allow": false, "access": "rwm"}]'
	set_args /bin/sh -c 'while :; do cat /dev/null || echo EPERM; done >/dev/shm/reads 2>&1'
	run_detached "$CID"
	local i
	for ((i = 0; i < 30; i++)); do
		runtime update --pids-limit $((100 + i)) "$CID"
	done
	run runtime exec "$CID" /bin/sh -c 'grep -c EPERM /dev/shm/reads || true'
	assert_success
	assert_output 0
}

# runc's update cannot change device rules (its resources document has no devices); forkbox
# takes them from `update -r`. Either way a device allowed before and after (/dev/null) must
# stay allowed throughout: v1 needs the minimal transition from devices.list, not a deny-all
# and the allow list again.
@test "updates that change the device rules never deny a device allowed before and after" {
	local deny='{"allow": false, "access": "rwm"}' kmsg='{"allow": true, "type": "c", "major": 1, "minor": 11, "access": "rw"}'
	update_config ".linux.resources.devices = [$deny]"
	# The redirection opens /dev/null in the shell itself (no fork), so the loop is tight;
	# head reads it as well.
	set_args /bin/sh -c 'exec 2>>/dev/shm/reads; while :; do : </dev/null || echo DENIED >&2; head -c1 /dev/null || echo DENIED >&2; done'
	run_detached "$CID"
	local with=$BATS_TEST_TMPDIR/with-kmsg.json without=$BATS_TEST_TMPDIR/without-kmsg.json list=
	echo "{\"devices\": [$deny, $kmsg]}" >"$with"
	echo "{\"devices\": [$deny]}" >"$without"
	local devices_list=/sys/fs/cgroup/devices$CG/devices.list
	[[ -f $devices_list ]] && list=$(cat "$devices_list")
	local i
	for ((i = 0; i < 30; i++)); do
		if ((i % 2 == 0)); then
			runtime update -r "$with" "$CID"
			if [[ -n $list ]] && ! is_runc; then
				grep -qx 'c 1:11 rw' "$devices_list"
			fi
		else
			runtime update -r "$without" "$CID"
			if [[ -n $list ]] && ! is_runc; then
				# Back where create left it, exception for exception.
				assert_equal "$(sort "$devices_list")" "$(sort <<<"$list")"
			fi
		fi
	done
	[[ $(container_status "$CID") == running ]]
	run runtime exec "$CID" /bin/sh -c 'head -c1 /dev/null && cat /dev/shm/reads'
	assert_success
	assert_output ''
}
