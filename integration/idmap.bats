#!/usr/bin/env bats
# Idmapped bind mounts (runtime-spec 1.2: the idmap and ridmap options, a mount's own
# uidMappings and gidMappings): the files of a host directory seen with other owners inside
# the container, with no chown on the host.

load helpers

# The source: a file of host root's, one of host uid 1000's, and a submount (a tmpfs, so
# a plain rbind carries it) with a file of uid 1000's. fb_teardown unmounts the tmpfs.
setup() {
	setup_bundle
	open_path_for_others
	SRC=$BATS_TEST_TMPDIR/src
	mkdir -p "$SRC/sub" "$BUNDLE/rootfs/m" "$BUNDLE/rootfs/n"
	echo root-file >"$SRC/root-file"
	echo user-file >"$SRC/user-file"
	chown 1000:1000 "$SRC/user-file"
	mount -t tmpfs -o size=1m tmpfs "$SRC/sub"
	echo sub-file >"$SRC/sub/sub-file"
	chown 1000:1000 "$SRC/sub/sub-file"
}

# user_namespace: container root is host uid/gid 100000.
user_namespace() {
	update_config '.linux.namespaces += [{"type": "user"}]
		| .linux.uidMappings = [{"containerID": 0, "hostID": 100000, "size": 65536}]
		| .linux.gidMappings = [{"containerID": 0, "hostID": 100000, "size": 65536}]'
}

# bind_source DEST OPTIONS_JSON [MOUNT_JQ]: a bind of $SRC at DEST, MOUNT_JQ edits the entry.
bind_source() {
	update_config ".mounts += [{\"destination\": \$d, \"type\": \"bind\", \"source\": \$s, \"options\": $2} | ${3:-.}]" \
		--arg d "$1" --arg s "$SRC"
}

owners() { # PATH...: "UID GID" of each, from inside
	local p script=
	for p in "$@"; do
		script+="/bin/fbhelper stat $p | cut -d' ' -f3,4; "
	done
	echo "$script"
}

@test "features claims idmapped mounts" {
	skip_if_runc "runc 1.1 in Debian 12 has no idmapped mounts"
	run runtime features
	assert_success
	run jq -r '.linux.mountExtensions.idmap.enabled' <<<"$output"
	assert_output true
}

@test "idmap takes the container's maps: host root's files are the container root's, and its writes are host root's" {
	skip_if_runc "runc 1.1 in Debian 12 has no idmapped mounts"
	user_namespace
	bind_source /m '["bind", "idmap"]'
	bind_source /n '["bind"]'
	run_sh "$(owners /m/root-file /n/root-file) echo new >/m/written && /bin/fbhelper id"
	assert_success
	assert_line --index 0 "0 0"
	# The same directory bound plainly: host root is unmapped in the container.
	assert_line --index 1 "65534 65534"
	assert_line --index 2 --regexp '^uid=0 gid=0'
	run stat -c '%u %g' "$SRC/written"
	assert_output "0 0"
}

@test "a mount's own uidMappings and gidMappings: host uid 1000's files are the container root's" {
	skip_if_runc "runc 1.1 in Debian 12 has no idmapped mounts"
	user_namespace
	bind_source /m '["bind"]' '.uidMappings = [{"containerID": 1000, "hostID": 100000, "size": 1}]
		| .gidMappings = [{"containerID": 1000, "hostID": 100000, "size": 1}]'
	run_sh "$(owners /m/user-file /m/root-file)"
	assert_success
	assert_line --index 0 "0 0"
	assert_line --index 1 "65534 65534"
}

@test "a mount's own maps need no user namespace in the container" {
	skip_if_runc "runc 1.1 in Debian 12 has no idmapped mounts"
	# Host root's container: on-disk uid 1000 is shown as 0, on-disk 0 is unmapped.
	bind_source /m '["bind"]' '.uidMappings = [{"containerID": 1000, "hostID": 0, "size": 1}]
		| .gidMappings = [{"containerID": 1000, "hostID": 0, "size": 1}]'
	run_sh "$(owners /m/user-file /m/root-file)"
	assert_success
	assert_line --index 0 "0 0"
	assert_line --index 1 "65534 65534"
}

@test "ridmap maps the submounts of an rbind too, idmap its top mount only" {
	skip_if_runc "runc 1.1 in Debian 12 has no idmapped mounts"
	user_namespace
	local maps='.uidMappings = [{"containerID": 1000, "hostID": 100000, "size": 1}]
		| .gidMappings = [{"containerID": 1000, "hostID": 100000, "size": 1}]'
	bind_source /m '["rbind", "ridmap"]' "$maps"
	bind_source /n '["rbind", "idmap"]' "$maps"
	run_sh "$(owners /m/sub/sub-file /n/sub/sub-file /n/user-file)"
	assert_success
	assert_line --index 0 "0 0"
	assert_line --index 1 "65534 65534"
	assert_line --index 2 "0 0"
}

@test "an idmapped bind keeps its other options: ro" {
	skip_if_runc "runc 1.1 in Debian 12 has no idmapped mounts"
	user_namespace
	bind_source /m '["bind", "idmap", "ro"]'
	run_sh "$(owners /m/root-file) echo x >/m/root-file"
	assert_failure
	assert_line --index 0 "0 0"
	[[ $stderr == *"Read-only file system"* ]] || fail "no EROFS: $stderr"
	run cat "$SRC/root-file"
	assert_output root-file
}

@test "idmap without maps of its own and no user namespace is refused, and nothing is left" {
	bind_source /m '["bind", "idmap"]'
	run_sh true
	assert_failure
	is_runc || assert_stderr_contains "mounts[$(jq '.mounts | length - 1' "$BUNDLE/config.json")]: idmap without uidMappings and gidMappings"
	run runtime list -q
	assert_output ""
}

@test "idmap of a mount that is not a bind, or uidMappings without gidMappings, are refused" {
	user_namespace
	update_config '.mounts += [{"destination": "/m", "type": "tmpfs", "source": "tmpfs", "options": ["idmap"]}]'
	run_sh true
	assert_failure
	is_runc || assert_stderr_contains "idmapped mounts are supported only for bind mounts"
	update_config '.mounts |= map(select(.destination != "/m"))'
	bind_source /m '["bind"]' '.uidMappings = [{"containerID": 0, "hostID": 100000, "size": 1}]'
	run_sh true
	assert_failure
	is_runc || assert_stderr_contains "uidMappings and gidMappings go together"
	run runtime list -q
	assert_output ""
}

@test "the processes that own a mount's user namespaces do not outlive create" {
	skip_if_runc "runc 1.1 in Debian 12 has no idmapped mounts"
	bind_source /m '["bind"]' '.uidMappings = [{"containerID": 1000, "hostID": 0, "size": 1}]
		| .gidMappings = [{"containerID": 1000, "hostID": 0, "size": 1}]'
	set_args /bin/fbhelper sleep 100
	create_container "$CID"
	run runtime state "$CID"
	assert_success
	# The container itself has no user namespace: any process with that map is an owner left.
	run bash -c "grep -lsE '^ +1000 +0 +1\$' /proc/[0-9]*/uid_map"
	assert_output ""
}

@test "binds taking the container's maps are idmapped with its own user namespace, after create writes its maps" {
	skip_if_runc "FORKBOX_TRACE is forkbox's"
	user_namespace
	bind_source /m '["bind", "idmap"]'
	local trace=$BATS_TEST_TMPDIR/trace
	FORKBOX_TRACE=$trace run_sh "$(owners /m/root-file)"
	assert_success
	assert_output "0 0"
	grep -q 'create: binds idmapped$' "$trace" || fail "no 'create: binds idmapped' in the trace: $(cat "$trace")"
}

@test "idmap with the container's maps on the intermediate path (a namespace joined by path)" {
	skip_if_runc "runc 1.1 in Debian 12 has no idmapped mounts"
	user_namespace
	# Joining any namespace by path makes init's user namespace in an intermediate process.
	update_config '.linux.namespaces |= map(select(.type != "uts")) + [{"type": "uts", "path": $p}] | del(.hostname)' \
		--arg p "/proc/$$/ns/uts"
	bind_source /m '["bind", "idmap"]'
	run_sh "$(owners /m/root-file /m/user-file)"
	assert_success
	assert_line --index 0 "0 0"
	assert_line --index 1 "1000 1000"
}

@test "a filesystem that cannot be idmapped fails create with the reason, and leaves no process or container" {
	skip_if_runc "runc 1.1 in Debian 12 has no idmapped mounts"
	user_namespace
	# sysfs does not allow idmapped mounts: the refusal comes once init's maps are written.
	update_config '.mounts += [{"destination": "/m", "type": "bind", "source": "/sys/kernel", "options": ["rbind", "idmap"]}]'
	run_sh true
	assert_failure
	assert_stderr_contains "idmap the bind mount /sys/kernel on /m"
	assert_stderr_contains "support idmapped mounts?"
	run runtime list -q
	assert_output ""
	# Init was in the user namespace with these maps: no process is left in one.
	run bash -c "grep -lsE '^ +0 +100000 +65536\$' /proc/[0-9]*/uid_map"
	assert_output ""
}
