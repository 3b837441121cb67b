#!/usr/bin/env bats
# `state`: the runtime-spec state JSON plus runc's rootfs/created/owner fields.

load helpers

@test "state of a created container reports id, pid, status, bundle and rootfs" {
	create_container "$CID"
	run runtime state "$CID"
	assert_success
	local json=$output
	run jq -r '.ociVersion' <<<"$json"
	assert_output --regexp '^1\.[0-9]+\.[0-9]+'
	run jq -r '.id' <<<"$json"
	assert_output "$CID"
	run jq -r '.status' <<<"$json"
	assert_output created
	run jq -r '.pid' <<<"$json"
	[ "$output" -gt 0 ]
	pid_alive "$output"
	run jq -r '.bundle' <<<"$json"
	assert_output "$BUNDLE"
	run jq -r '.rootfs' <<<"$json"
	assert_output "$BUNDLE/rootfs"
}

@test "state reports the creation time in RFC 3339 UTC" {
	create_container "$CID"
	run jq -r '.created' < <(runtime state "$CID")
	assert_output --regexp '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$'
}

@test "state of a running container says running" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run container_status "$CID"
	assert_output running
}

@test "state of a stopped container says stopped with pid 0" {
	run runtime run --keep --bundle "$BUNDLE" "$CID"
	assert_success
	run runtime state "$CID"
	assert_success
	local json=$output
	run jq -r '.status' <<<"$json"
	assert_output stopped
	run jq -r '.pid' <<<"$json"
	assert_output 0
}

@test "state says stopped once a started container exits" {
	set_args /bin/fbhelper exit 0
	create_container "$CID"
	runtime start "$CID"
	wait_for_status "$CID" stopped
}

@test "state says stopped when the container's init is killed from outside" {
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	local pid
	pid=$(container_pid "$CID")
	kill -KILL "$pid"
	wait_for_status "$CID" stopped
}

@test "state of an unknown container fails with 'does not exist'" {
	run --separate-stderr runtime state no-such-container
	assert_failure 1
	assert_stderr_contains "does not exist"
	assert_output ""
}

@test "state includes annotations from config.json" {
	update_config '.annotations = {"org.example.key": "value", "org.example.other": "2"}'
	create_container "$CID"
	run jq -c '.annotations' < <(runtime state "$CID")
	assert_output '{"org.example.key":"value","org.example.other":"2"}'
}

@test "state reports an absolute bundle path when --bundle was relative" {
	cd "$BATS_TEST_TMPDIR"
	runtime create --bundle bundle "$CID" </dev/null >/dev/null 2>&1 3>&- 4>&-
	cd /
	run jq -r '.bundle' < <(runtime state "$CID")
	assert_output "$BUNDLE"
}

@test "state of a container whose id prefixes another reports the right one" {
	create_container "$CID"
	create_container "$CID-2"
	run jq -r '.id' < <(runtime state "$CID")
	assert_output "$CID"
	run jq -r '.id' < <(runtime state "$CID-2")
	assert_output "$CID-2"
}

@test "a hook may call state during create: no deadlock, and the status is creating" {
	skip_if_runc "runc has no 'creating' status in state"
	local out=$BATS_TEST_TMPDIR/hook-state.json
	update_config '.hooks.createRuntime = [{"path": "/bin/sh", "args": ["sh", "-c", $cmd], "timeout": 20}]' \
		--arg cmd "\"$FORKBOX\" --root \"$ROOT\" state \"$CID\" > \"$out\""
	create_container "$CID"
	run jq -r '.status' "$out"
	assert_output creating
	run runtime state "$CID"
	assert_success
}
