#!/usr/bin/env bats
# --version / -v.

load helpers

setup() { :; }

@test "--version prints the runtime version and the spec version" {
	run runtime --version
	assert_success
	assert_line --index 0 --regexp '^(forkbox|runc) version [0-9]+\.[0-9]+'
	assert_line --regexp '^spec: 1\.[0-9]+\.[0-9]+'
}

@test "-v is --version" {
	run runtime -v
	assert_success
	assert_line --index 0 --regexp ' version [0-9]'
	local short=$output
	run runtime --version
	assert_output "$short"
}

@test "--version reports the VERSION file and a commit line" {
	skip_if_runc "forkbox-specific version source"
	run runtime --version
	assert_line --index 0 "forkbox version $(cat "$REPO_DIR/VERSION")"
	assert_line --regexp '^commit: '
}

@test "--version reports runtime-spec 1.3" {
	skip_if_runc "runc 1.1 implements runtime-spec 1.0.2"
	run runtime --version
	assert_line --regexp '^spec: 1\.3\.[0-9]+'
}

@test "forkbox starts at its own entry point, which maps its pages before glibc's start-up" {
	skip_if_runc "forkbox's start-up"
	command -v readelf >/dev/null || skip "readelf (binutils) missing"
	local entry symbol
	entry=$(readelf -h "$FORKBOX" | awk '/Entry point address/ {print $NF}')
	symbol=$(readelf -sW "$FORKBOX" | awk '$NF == "forkbox_entry" {print $2}')
	[ -n "$symbol" ] || skip "$FORKBOX has no symbol table"
	[ "$((entry))" -eq "$((16#$symbol))" ]
	run runtime --version
	assert_success
}
