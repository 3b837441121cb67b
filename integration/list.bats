#!/usr/bin/env bats
# `list`: table, -q, --format json.

load helpers

HEADER_RE='^ID +PID +STATUS +BUNDLE +CREATED +OWNER$'

@test "list with no containers prints only the table header" {
	run runtime list
	assert_success
	assert_output --regexp "$HEADER_RE"
}

@test "list with a missing --root prints only the table header" {
	run "$FORKBOX" --root "$BATS_TEST_TMPDIR/no-such-root" list
	assert_success
	assert_output --regexp "$HEADER_RE"
}

@test "list shows each container with its pid, status and bundle" {
	create_container "$CID"
	set_args /bin/fbhelper sleep 100
	run_detached "$CID-run"
	local pid1 pid2
	pid1=$(container_pid "$CID")
	pid2=$(container_pid "$CID-run")
	run runtime list
	assert_success
	assert_line --index 0 --regexp "$HEADER_RE"
	assert_line --regexp "^$CID +$pid1 +created +$BUNDLE +[0-9T:.Z-]+ +root\$"
	assert_line --regexp "^$CID-run +$pid2 +running +$BUNDLE +[0-9T:.Z-]+ +root\$"
	[ "${#lines[@]}" -eq 3 ]
}

@test "list shows a stopped container with pid 0" {
	run runtime run --keep --bundle "$BUNDLE" "$CID"
	assert_success
	run runtime list
	assert_line --regexp "^$CID +0 +stopped +$BUNDLE "
}

@test "list -q prints only the ids" {
	create_container "$CID-a"
	create_container "$CID-b"
	run runtime list -q
	assert_success
	run sort <<<"$output"
	assert_output "$CID-a
$CID-b"
}

@test "list --quiet is -q" {
	create_container "$CID"
	run runtime list --quiet
	assert_success
	assert_output "$CID"
}

@test "list --format json prints an array of container states" {
	create_container "$CID"
	local pid
	pid=$(container_pid "$CID")
	run runtime list --format json
	assert_success
	local json=$output
	run jq -r 'length' <<<"$json"
	assert_output 1
	run jq -r '.[0] | [.id, .pid, .status, .bundle, .rootfs, .owner] | @tsv' <<<"$json"
	assert_output "$CID	$pid	created	$BUNDLE	$BUNDLE/rootfs	root"
	run jq -r '.[0].created' <<<"$json"
	assert_output --regexp '^[0-9]{4}-[0-9]{2}-[0-9]{2}T'
}

@test "list -f json with no containers prints an empty JSON value" {
	# runc prints null; [] is as good to every JSON client.
	run runtime list -f json
	assert_success
	run jq -r 'length' <<<"$output"
	assert_success
	assert_output 0
}

@test "list with an unknown --format fails" {
	run --separate-stderr runtime list --format yaml
	assert_failure
	assert_stderr_not_empty
}
