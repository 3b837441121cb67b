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
