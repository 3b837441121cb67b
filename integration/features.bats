#!/usr/bin/env bats
# `features`: what the runtime supports, as runtime-spec features.md JSON.

load helpers

setup() {
	if is_runc && ! runtime features >/dev/null 2>&1; then
		skip "runc: this runc has no features verb"
	fi
}

@test "features prints JSON with ociVersionMin and ociVersionMax" {
	run runtime features
	assert_success
	local json=$output
	run jq -r '.ociVersionMin' <<<"$json"
	assert_output --regexp '^1\.0\.[0-9]+'
	run jq -r '.ociVersionMax' <<<"$json"
	assert_output --regexp '^1\.[0-9]+\.[0-9]+'
}

@test "features reports runtime-spec 1.3 as its maximum" {
	skip_if_runc "runc 1.1 implements runtime-spec 1.0.2"
	run jq -r '.ociVersionMax' < <(runtime features)
	assert_output --regexp '^1\.3\.'
}

@test "features lists every namespace type" {
	run jq -r '.linux.namespaces[]' < <(runtime features)
	local ns
	for ns in cgroup ipc mount network pid user uts; do
		assert_line "$ns"
	done
}

@test "features lists all six hook kinds" {
	run jq -r '.hooks[]' < <(runtime features)
	local hook
	for hook in prestart createRuntime createContainer startContainer poststart poststop; do
		assert_line "$hook"
	done
}

@test "features lists mount options and capabilities" {
	local json
	json=$(runtime features)
	run jq -r '.mountOptions[]' <<<"$json"
	assert_line ro
	assert_line nosuid
	assert_line bind
	run jq -r '.linux.capabilities[]' <<<"$json"
	assert_line CAP_SYS_ADMIN
	assert_line CAP_KILL
}
