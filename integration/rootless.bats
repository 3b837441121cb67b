#!/usr/bin/env bats
# Rootless containers (issue 13): an unprivileged user (fbrootless, see
# rootless-helpers.bash) runs the runtime with a clean environment and no --root, so the
# state goes to the default root $XDG_RUNTIME_DIR/<runtime>; the bundle comes from
# `spec --rootless` run by that user. The podman-like path, a runtime run as root of a
# user namespace the user made, is here too.
#
# The test user and its /etc/subuid and /etc/subgid lines stay after the run (made only
# when absent, reused next time); the XDG_RUNTIME_DIR is per run and emptied after each test.
#
# Validate against runc: FORKBOX=/usr/sbin/runc bats integration/rootless.bats

load helpers
load rootless-helpers

setup_file() {
	command -v setpriv >/dev/null && command -v unshare >/dev/null ||
		skip "setpriv and unshare (util-linux) are missing"
	rl_setup_file
}

setup() {
	rl_make_bundle "$BUNDLE" --rootless
}

teardown() {
	rl_teardown
}

# Every helpers.bash call that drives the runtime (run_detached, container_status,
# wait_for_status, run_sh...) runs it as the test user, in its default state root.
runtime() {
	rl_runtime "$@"
}

# cgroup_v2_only: the host mounts cgroup2 alone at /sys/fs/cgroup (no v1 controllers).
cgroup_v2_only() {
	[[ -e /sys/fs/cgroup/cgroup.controllers ]]
}

# multi_id_maps UIDHOST GIDHOST: root -> the test user, 1..65536 -> the given host ranges.
multi_id_maps() {
	local n=$((RL_SUBUID_COUNT < 65536 ? RL_SUBUID_COUNT : 65536))
	local m=$((RL_SUBGID_COUNT < 65536 ? RL_SUBGID_COUNT : 65536))
	update_config '
		.linux.uidMappings = [{containerID: 0, hostID: $uid, size: 1}, {containerID: 1, hostID: $uh, size: $n}]
		| .linux.gidMappings = [{containerID: 0, hostID: $gid, size: 1}, {containerID: 1, hostID: $gh, size: $m}]' \
		--argjson uid "$RL_UID" --argjson gid "$RL_GID" --argjson uh "$1" --argjson gh "$2" \
		--argjson n "$n" --argjson m "$m"
}

# assert_nothing_left: the test user has no container and no state for $CID.
assert_nothing_left() {
	run rl_runtime list -q
	assert_success
	assert_output ""
	[ ! -e "$RL_STATE/$CID" ]
}

@test "an unprivileged user runs a rootless bundle and gets its output and exit code" {
	run_sh 'echo hello from rootless; exit 42'
	assert_failure 42
	assert_output "hello from rootless"
}

@test "a rootless container's process is uid 0 inside, mapped to the user outside" {
	run_sh "id -u; id -g; $(map_lines_script /proc/self/uid_map); $(map_lines_script /proc/self/gid_map)"
	assert_success_stderr
	assert_equal "${lines[*]}" "0 0 0 $RL_UID 1 0 $RL_GID 1"
}

@test "a rootless user's state goes to \$XDG_RUNTIME_DIR/<runtime>, a directory of its own with mode 0700" {
	set_args /bin/fbhelper sleep 100
	start_detached "$CID"
	[ -d "$RL_STATE/$CID" ]
	[ ! -e "/run/$(basename "$RL_STATE")/$CID" ]
	run stat -c '%u %g' "$RL_STATE"
	assert_output "$RL_UID $RL_GID"
	local mode
	mode=$(stat -c %a "$RL_STATE")
	assert_equal "$(printf '%o' $((8#$mode & 8#777)))" 700
}

@test "the rootless state directory has the sticky bit, so XDG_RUNTIME_DIR cleanup leaves it" {
	# The XDG base directory spec: files in XDG_RUNTIME_DIR unused for 6 hours may be
	# removed unless they have the sticky bit; runc sets it (mode 1700).
	run rl_runtime run --bundle "$BUNDLE" "$CID"
	assert_success
	[ -d "$RL_STATE" ]
	[ -k "$RL_STATE" ]
}

@test "a rootless user runs -d, sees state and list, execs, kills and deletes its container" {
	set_args /bin/fbhelper sleep 100
	start_detached "$CID"
	run container_status "$CID"
	assert_success
	assert_output running
	run rl_runtime list -q
	assert_success
	assert_output "$CID"
	run rl_runtime exec "$CID" /bin/fbhelper echo inside
	assert_success
	assert_output inside
	run rl_runtime kill "$CID" KILL
	assert_success
	wait_for_status "$CID" stopped
	run rl_runtime delete "$CID"
	assert_success
	run rl_runtime state "$CID"
	assert_failure
	assert_nothing_left
}

@test "a rootless container's /dev has null, zero, random, urandom, tty and full" {
	run_sh 'for n in null zero random urandom tty full; do [ -c /dev/$n ] && echo "$n char" || echo "$n missing"; done'
	assert_success_stderr
	assert_equal "${lines[*]}" "null char zero char random char urandom char tty char full char"
}

@test "a rootless container writes to /dev/null and reads /dev/zero" {
	# In a user namespace these are bind mounts of the host's nodes, not mknod'ed.
	run_sh 'echo data >/dev/null && echo wrote; head -c 5 /dev/zero | wc -c'
	assert_success_stderr
	assert_equal "${lines[*]}" "wrote 5"
}

@test "a rootless container's /sys is read-only" {
	run_helper write /sys/fbtest x
	assert_failure 1
	assert_stderr_contains "fbhelper: write /sys/fbtest: Read-only file system"
}

@test "a rootless container with no cgroupsPath and no resources runs" {
	update_config 'del(.linux.cgroupsPath, .linux.resources)'
	run_helper echo no cgroups needed
	assert_success_stderr
	assert_output "no cgroups needed"
}

@test "a rootless container with no cgroupsPath and no resources stays in its caller's cgroups" {
	update_config 'del(.linux.cgroupsPath, .linux.resources)'
	set_args /bin/fbhelper sleep 100
	start_detached "$CID"
	local pid
	pid=$(container_pid "$CID")
	# The runtime is this shell's child and joins no cgroup; neither does the container.
	assert_equal "$(cat "/proc/$pid/cgroup")" "$(cat /proc/self/cgroup)"
}

@test "a rootless container with resources and no permission for cgroups fails to create, with a message" {
	update_config '.linux.resources = {memory: {limit: 67108864}}'
	rl_try_create --bundle "$BUNDLE" "$CID"
	assert_failure
	# runc's words: its cgroup v2 manager refuses up front; the v1 one (this hybrid
	# host's controllers) fails to set the first limit it has no cgroup for. forkbox says
	# the v2 words on every host: it refuses before any cgroup is touched.
	if cgroup_v2_only || ! is_runc; then
		assert_stderr_contains "rootless needs no limits + no cgrouppath when no permission is granted for cgroups"
	else
		assert_stderr_contains "cannot set memory limit: container could not join or create cgroup"
	fi
	assert_nothing_left
}

@test "a rootless container with a cgroupsPath and no permission for cgroups fails with permission denied" {
	update_config '.linux.cgroupsPath = $p' --arg p "/$CID"
	rl_try_create --bundle "$BUNDLE" "$CID"
	assert_failure
	# Managers match it case-insensitively (podman: "(?i)permission denied").
	[[ ${stderr,,} == *"permission denied"* ]] || fail "stderr: $stderr"
	assert_nothing_left
}

@test "a rootless config without a user namespace fails before running anything" {
	remove_namespace user
	set_args /bin/fbhelper write /tmp/ran yes
	rl_try_create --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "rootless container requires user namespaces"
	[ ! -e "$BUNDLE/rootfs/tmp/ran" ]
	assert_nothing_left
}

@test "a rootless mount with a uid= option for an unmapped uid is refused" {
	update_config '.mounts += [{destination: "/mnt", type: "tmpfs", source: "tmpfs", options: ["uid=1000"]}]'
	rl_try_create --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "cannot specify uid= mount options for unmapped uid in rootless containers"
	assert_nothing_left
}

@test "a rootless mount with a gid= option for an unmapped gid is refused" {
	update_config '.mounts += [{destination: "/mnt", type: "tmpfs", source: "tmpfs", options: ["gid=1000"]}]'
	rl_try_create --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "cannot specify gid= mount options for unmapped gid in rootless containers"
	assert_nothing_left
}

@test "a rootless mount with uid= and gid= options for mapped ids is accepted" {
	update_config '.mounts += [{destination: "/mnt", type: "tmpfs", source: "tmpfs", options: ["uid=0", "gid=0", "mode=0750"]}]'
	run_helper stat /mnt
	assert_success_stderr
	assert_output "directory 0750 0 0"
}

@test "root of a user namespace made by the user (unshare -r) runs a plain spec without user or network namespace" {
	userns_spec
	set_args /bin/sh -c "echo hello from the userns; id -u; $(map_lines_script /proc/self/uid_map)"
	run --separate-stderr userns_runtime run --bundle "$BUNDLE" "$CID"
	assert_success_stderr
	# The container is in the caller's user namespace: root there is the test user.
	assert_equal "${lines[*]}" "hello from the userns 0 0 $RL_UID 1"
}

@test "root of a user namespace, with USER unset, keeps its state in \$XDG_RUNTIME_DIR/<runtime>, not /run" {
	userns_spec
	set_args /bin/fbhelper sleep 100
	userns_runtime run --detach --bundle "$BUNDLE" "$CID" \
		</dev/null >"$BATS_TEST_TMPDIR/$CID.out" 2>"$BATS_TEST_TMPDIR/$CID.err" 3>&- 4>&- ||
		fail "run --detach failed: $(container_err "$CID")"
	[ -d "$RL_STATE/$CID" ]
	[ ! -e "/run/$(basename "$RL_STATE")/$CID" ]
	run userns_runtime state "$CID"
	assert_success
	assert_equal "$(jq -r .status <<<"$output")" running
	run userns_runtime delete --force "$CID"
	assert_success
	[ ! -e "$RL_STATE/$CID" ]
}

@test "a rootless container with a multi-id mapping (newuidmap/newgidmap) runs its process as uid 1000" {
	skip_without_newidmap
	[[ ${RL_SUBUID_COUNT:-0} -gt 1000 && ${RL_SUBGID_COUNT:-0} -gt 1000 ]] ||
		skip "$RL_USER has no subuid/subgid range of more than 1000 ids"
	multi_id_maps "$RL_SUBUID_START" "$RL_SUBGID_START"
	update_config '.process.user = {uid: 1000, gid: 1000}'
	run_sh "$(map_lines_script /proc/self/uid_map); $(map_lines_script /proc/self/gid_map); fbhelper id"
	assert_success_stderr
	local n=$((RL_SUBUID_COUNT < 65536 ? RL_SUBUID_COUNT : 65536))
	local m=$((RL_SUBGID_COUNT < 65536 ? RL_SUBGID_COUNT : 65536))
	assert_equal "${lines[0]}" "0 $RL_UID 1"
	assert_equal "${lines[1]}" "1 $RL_SUBUID_START $n"
	assert_equal "${lines[2]}" "0 $RL_GID 1"
	assert_equal "${lines[3]}" "1 $RL_SUBGID_START $m"
	assert_regex "${lines[4]}" '^uid=1000 gid=1000 '
}

@test "a uid mapping outside the user's subuid range fails with newuidmap's message and leaves nothing" {
	skip_without_newidmap
	local h
	h=$(rl_subid_outside /etc/subuid)
	multi_id_maps "$h" "$RL_SUBGID_START"
	run --separate-stderr rl_runtime run --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "newuidmap: uid range [1-65537) -> [$h-$((h + 65536))) not allowed"
	assert_nothing_left
}

@test "a gid mapping outside the user's subgid range fails with newgidmap's message and leaves nothing" {
	skip_without_newidmap
	local h
	h=$(rl_subid_outside /etc/subgid)
	multi_id_maps "$RL_SUBUID_START" "$h"
	run --separate-stderr rl_runtime run --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "newgidmap: gid range [1-65537) -> [$h-$((h + 65536))) not allowed"
	assert_nothing_left
}

@test "a multi-id mapping without newuidmap in PATH fails with a message and leaves nothing" {
	multi_id_maps "$RL_SUBUID_START" "$RL_SUBGID_START"
	run --separate-stderr as_user env PATH=/nonexistent "$FORKBOX" run --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_not_empty
	assert_nothing_left
}

@test "a multi-id mapping without newuidmap in PATH fails naming newuidmap" {
	skip_if_runc "runc says only 'mapping tool not present'"
	multi_id_maps "$RL_SUBUID_START" "$RL_SUBGID_START"
	run --separate-stderr as_user env PATH=/nonexistent "$FORKBOX" run --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "newuidmap"
}

@test "a user's zygote daemon serves that user's --zygote run warm, in the user's runtime dir" {
	skip_if_runc "runc has no zygote mode"
	set_args /bin/fbhelper echo warm
	as_user_exec "$FORKBOX" daemon --pool 2 </dev/null >"$BATS_TEST_TMPDIR/daemon.log" 2>&1 3>&- 4>&- &
	local daemon=$!
	FB_PIDS+=("$daemon")
	local i
	for ((i = 0; i < 200; i++)); do
		[[ -S $RL_XDG/forkbox/forkbox.sock ]] && break
		sleep 0.05
	done
	[[ -S $RL_XDG/forkbox/forkbox.sock ]] || fail "no socket: $(cat "$BATS_TEST_TMPDIR/daemon.log")"
	run stat -c '%u %a' "$RL_XDG/forkbox/forkbox.sock"
	assert_output "$RL_UID 600"
	# The first request for a kind of container is a miss (cold); the next ones are served.
	for i in 1 2 3; do
		run --separate-stderr rl_runtime --zygote run --bundle "$BUNDLE" "$CID-$i"
		assert_success_stderr
		assert_output warm
	done
	run rl_runtime daemon --stats
	assert_success
	[[ $output =~ served=([0-9]+) ]] && ((BASH_REMATCH[1] >= 1)) || fail "no template served: $output"
	kill -TERM "$daemon"
	wait "$daemon" || true
	assert_nothing_left
}

@test "an unprivileged CI user runs BUNDLE/ (a generated id, --timeout) and nothing is left" {
	skip_if_runc "runc takes an id, not a bundle path"
	set_args /bin/fbhelper echo from a rootless bundle
	run --separate-stderr rl_runtime run "$BUNDLE/"
	assert_success_stderr
	assert_output "from a rootless bundle"
	set_args /bin/fbhelper sleep 100
	run --separate-stderr rl_runtime run --timeout 300ms "$BUNDLE/"
	assert_failure 124
	run rl_runtime list -q
	assert_output ""
	run find "$RL_STATE" -mindepth 1 -maxdepth 1 -type d
	assert_output ""
}

@test "a rootless idmapped bind is refused with the reason, and nothing is left" {
	skip_if_runc "runc 1.1 in Debian 12 has no idmapped mounts"
	update_config '.mounts += [{"destination": "/m", "type": "bind", "source": "/tmp", "options": ["rbind", "idmap"]}]'
	run_sh true
	assert_failure
	assert_stderr_contains "idmapped mounts need root of the initial user namespace"
	assert_nothing_left
}

@test "a rootless create with linux.netDevices is refused with the reason, and nothing is left" {
	skip_if_runc "runc 1.1 in Debian 12 predates runtime-spec 1.3's netDevices"
	update_config '.linux.netDevices = {"fbnone0": {}}
		| if any(.linux.namespaces[]; .type == "network") then . else .linux.namespaces += [{"type": "network"}] end'
	run_sh true
	assert_failure
	assert_stderr_contains "linux.netDevices: moving the host's network devices needs root of the initial user namespace"
	assert_nothing_left
}

# CVE-2023-25809 class: a rootless container binds the host's /sys (it cannot mount sysfs
# without a network namespace of its own); a cgroup hierarchy under it left writable let the
# container write a delegated cgroup of its user's. Every mount under /sys is read-only.
@test "every mount under a rootless container's /sys is read-only (CVE-2023-25809)" {
	run_sh 'grep " /sys" /proc/self/mountinfo'
	assert_success
	[ -n "$output" ] || fail "no /sys mount seen"
	local line
	while read -r line; do
		# Field 6: the mount's own options.
		[[ $(awk '{print $6}' <<<"$line") =~ (^|,)ro(,|$) ]] || fail "writable: $line"
	done <<<"$output"
}
