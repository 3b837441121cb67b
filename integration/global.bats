#!/usr/bin/env bats
# Global flags: --help, --root, --log, --log-format; errors and exit codes.

load helpers

setup() { :; }

@test "--help lists the verbs and exits 0" {
	run runtime --help
	assert_success
	local verb
	for verb in create start run state kill delete list spec features; do
		assert_output --regexp "(^|[[:space:]])$verb([[:space:],]|\$)"
	done
}

@test "VERB --help describes the verb and exits 0" {
	run runtime create --help
	assert_success
	assert_output --partial "--bundle"
	assert_output --partial "--pid-file"
	assert_output --partial "--console-socket"
	run runtime run --help
	assert_success
	assert_output --partial "--detach"
	run runtime kill --help
	assert_success
}

@test "an unknown verb fails with a message" {
	run --separate-stderr runtime no-such-verb
	assert_failure
	assert_stderr_contains "no-such-verb"
}

@test "a verb missing its container id fails with a message" {
	run --separate-stderr runtime state
	assert_failure
	assert_stderr_not_empty
}

@test "an error exits 1 and is printed on stderr, not stdout" {
	run --separate-stderr runtime state no-such-container
	assert_failure 1
	assert_output ""
	assert_stderr_contains "does not exist"
}

@test "--log with --log-format json writes an error as a JSON line with level, msg and time" {
	local log=$BATS_TEST_TMPDIR/log.json
	run --separate-stderr runtime --log "$log" --log-format json state no-such-container
	assert_failure 1
	# The message still goes to stderr for a human.
	assert_stderr_contains "does not exist"
	[ -s "$log" ]
	# Every line is one JSON object.
	run jq -e -c 'select(type == "object") | has("level") and has("msg") and has("time")' "$log"
	assert_success
	refute_line false
	run jq -r 'select(.level == "error") | .msg' "$log"
	assert_output --partial "does not exist"
	run jq -r 'select(.level == "error") | .time' "$log"
	assert_output --regexp '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}'
}

@test "a --log file that cannot be opened is said on stderr, and errors still read forkbox: MESSAGE there" {
	skip_if_runc "runc's words differ"
	run --separate-stderr runtime --log "$BATS_TEST_TMPDIR/no/such/dir/log.json" --log-format json state no-such-container
	assert_failure 1
	assert_stderr_contains "log file $BATS_TEST_TMPDIR/no/such/dir/log.json: No such file or directory"
	assert_stderr_contains "forkbox: container no-such-container does not exist"
}

@test "--log appends: two errors give two JSON lines" {
	local log=$BATS_TEST_TMPDIR/log.json
	runtime --log "$log" --log-format json state no-such-1 2>/dev/null || true
	runtime --log "$log" --log-format json state no-such-2 2>/dev/null || true
	run jq -s -r 'map(select(.level == "error")) | length' "$log"
	assert_output 2
}

@test "--log of a failed create records the error for a shim to read" {
	local log=$BATS_TEST_TMPDIR/log.json
	setup_bundle
	rm -rf "$BUNDLE/rootfs"
	local rc=0
	runtime --log "$log" --log-format json create --bundle "$BUNDLE" "$CID" </dev/null >/dev/null 2>&1 3>&- 4>&- || rc=$?
	[ "$rc" -ne 0 ] || fail "create without a rootfs succeeded"
	run jq -r 'select(.level == "error") | .msg' "$log"
	assert_success
	[ -n "$output" ]
}

@test "--log without --log-format writes text lines with level=error" {
	local log=$BATS_TEST_TMPDIR/log.txt
	run runtime --log "$log" state no-such-container
	assert_failure
	run cat "$log"
	assert_output --partial "level=error"
	assert_output --partial "does not exist"
}

@test "--log-format with an unknown value fails" {
	run --separate-stderr runtime --log-format yaml state no-such-container
	assert_failure
	assert_stderr_contains "yaml"
}

@test "--root keeps state in the given directory, created when missing" {
	setup_bundle
	ROOT=$BATS_TEST_TMPDIR/nested/state/root
	create_container "$CID"
	[ -d "$ROOT/$CID" ]
	run runtime list -q
	assert_output "$CID"
}

@test "containers in different --root directories do not see each other" {
	setup_bundle
	create_container "$CID"
	run runtime list -q
	assert_output "$CID"
	run "$FORKBOX" --root "$BATS_TEST_TMPDIR/other-root" list -q
	assert_success
	assert_output ""
}
