# shellcheck shell=bash
# Helpers for rootless.bats: an unprivileged test user, runtime calls made as that user
# with a clean environment, and bundles that user owns. Load after helpers.bash.
#
# The test user (fbrootless, uid/gid 23456) and its /etc/subuid and /etc/subgid ranges
# are made once and kept: rl_setup_user reuses them on the next run (it is idempotent),
# and nothing else on the host needs them gone.
#
# Per bats file (rl_setup_file):
#   $RL_DIR        a directory the test user can traverse, under the bats run tmpdir
#   $RL_XDG        the user's XDG_RUNTIME_DIR ($RL_DIR/xdg, its own, mode 0700)
#   $RL_HOME       the user's HOME ($RL_DIR/home)
#   $RL_STATE      where the runtime keeps its state by default: $RL_XDG/runc for runc,
#                  $RL_XDG/forkbox for forkbox (both ignore the name they are run by)
# Per test: $BUNDLE (helpers.bash) is owned by the test user, its path open for traversal.

RL_USER_NAME=fbrootless
RL_WANT_ID=23456
RL_SUB_START=300000 # the subordinate range added when the user has none
RL_SUB_COUNT=65536

# rl_setup_user: the test user and group, and a subuid/subgid range for it; each is
# added only when absent, so a user (of that name, or of that uid) made before is reused.
# Exports RL_USER, RL_UID, RL_GID.
rl_setup_user() {
	local name=$RL_USER_NAME
	if ! getent passwd "$name" >/dev/null; then
		# The uid may belong to a user of another name: reuse it.
		local other
		other=$(getent passwd "$RL_WANT_ID" | cut -d: -f1)
		if [[ -n $other ]]; then
			name=$other
		else
			if ! getent group "$RL_USER_NAME" >/dev/null && ! getent group "$RL_WANT_ID" >/dev/null; then
				groupadd --gid "$RL_WANT_ID" "$RL_USER_NAME" || getent group "$RL_USER_NAME" >/dev/null || return 1
			fi
			local group=$RL_USER_NAME
			getent group "$group" >/dev/null || group=$RL_WANT_ID
			# A concurrent run may have added it first.
			useradd --uid "$RL_WANT_ID" --gid "$group" --no-create-home --home-dir /nonexistent \
				--shell /usr/sbin/nologin "$RL_USER_NAME" || getent passwd "$RL_USER_NAME" >/dev/null || return 1
		fi
	fi
	export RL_USER=$name
	RL_UID=$(id -u "$name") && RL_GID=$(id -g "$name") || return 1
	export RL_UID RL_GID
	local f
	for f in /etc/subuid /etc/subgid; do
		# Under a lock on the file itself: a concurrent run must not add a second line.
		(
			flock 9
			if ! grep -qE "^($RL_USER|$RL_UID):" "$f"; then
				echo "$RL_USER:$RL_SUB_START:$RL_SUB_COUNT" >&9
			fi
		) 9>>"$f" || return 1
	done
}

# rl_subid_range FILE: "START COUNT" of the test user's first range in FILE.
rl_subid_range() {
	awk -F: -v n="$RL_USER" -v u="$RL_UID" '($1 == n || $1 == u) { print $2, $3; exit }' "$1"
}

# rl_subid_outside FILE: a host id just past every range FILE gives the test user.
rl_subid_outside() {
	awk -F: -v n="$RL_USER" -v u="$RL_UID" \
		'($1 == n || $1 == u) && $2 + $3 > m { m = $2 + $3 } END { print m + 0 }' "$1"
}

# rl_open_path DIR: o+x on DIR and every parent up to /tmp (the bats tmpdirs are 0700
# root), like open_path_for_others for $BUNDLE.
rl_open_path() {
	BUNDLE=$1 open_path_for_others
}

# rl_setup_file: call from setup_file.
rl_setup_file() {
	rl_setup_user || return 1
	export RL_DIR=$BATS_FILE_TMPDIR/rootless
	export RL_XDG=$RL_DIR/xdg RL_HOME=$RL_DIR/home
	mkdir -p "$RL_XDG" "$RL_HOME"
	chown "$RL_UID:$RL_GID" "$RL_XDG" "$RL_HOME"
	chmod 0700 "$RL_XDG" "$RL_HOME"
	rl_open_path "$RL_DIR"
	local name=forkbox
	is_runc && name=runc
	export RL_STATE=$RL_XDG/$name
	# The user's PATH is fixed; where root finds newuidmap/newgidmap (a copy outside the
	# usual directories, say), the user finds them too.
	local path=/usr/sbin:/usr/bin:/sbin:/bin tool dir
	for tool in newuidmap newgidmap; do
		dir=$(dirname "$(command -v "$tool" 2>/dev/null || echo /usr/bin/x)")
		[[ :$path: == *:"$dir":* ]] || path=$dir:$path
	done
	export RL_PATH=$path
	read -r RL_SUBUID_START RL_SUBUID_COUNT < <(rl_subid_range /etc/subuid)
	read -r RL_SUBGID_START RL_SUBGID_COUNT < <(rl_subid_range /etc/subgid)
	export RL_SUBUID_START RL_SUBUID_COUNT RL_SUBGID_START RL_SUBGID_COUNT
}

# as_user CMD...: CMD as the test user, with a clean environment (no USER=root,
# XDG_RUNTIME_DIR or HOME of root's leak into the runtime's defaults).
# In the background (`as_user CMD &`) $! is a subshell's pid, not CMD's: exec as_user_exec
# there instead, so $! is CMD's own pid and can be signalled.
as_user() {
	env -i PATH="$RL_PATH" HOME="$RL_HOME" USER="$RL_USER" XDG_RUNTIME_DIR="$RL_XDG" \
		setpriv --reuid "$RL_UID" --regid "$RL_GID" --init-groups "$@"
}

# as_user_exec CMD...: as_user that replaces the calling (sub)shell.
as_user_exec() {
	exec env -i PATH="$RL_PATH" HOME="$RL_HOME" USER="$RL_USER" XDG_RUNTIME_DIR="$RL_XDG" \
		setpriv --reuid "$RL_UID" --regid "$RL_GID" --init-groups "$@"
}

# rl_runtime ARGS...: the runtime under test as the test user, without --root: its state
# goes to the default root, $RL_STATE.
rl_runtime() {
	as_user "$FORKBOX" "$@"
}

# userns_runtime ARGS...: the podman-like path: the test user makes a user namespace where
# it is root (`unshare --map-root-user`, uid/gid 0 -> $RL_UID/$RL_GID) and runs the
# runtime there, with USER unset and XDG_RUNTIME_DIR set.
userns_runtime() {
	as_user unshare --map-root-user env -u USER "$FORKBOX" "$@"
}

# have_newidmap: newuidmap and newgidmap are where the test user looks for them.
have_newidmap() {
	as_user sh -c 'command -v newuidmap && command -v newgidmap' >/dev/null
}

# skip_without_newidmap: multi-id mappings go through newuidmap/newgidmap (setuid root).
skip_without_newidmap() {
	have_newidmap || skip "newuidmap/newgidmap missing (Debian package uidmap; the Makefile installs it)"
}

# rl_make_bundle DIR [SPEC FLAGS...]: a bundle the test user owns: base_rootfs, and the
# config of `$FORKBOX spec FLAGS` run by the test user in DIR, with terminal=false and
# process.args=/bin/fbhelper true.
rl_make_bundle() {
	local dir=$1 base
	shift
	base=$(base_rootfs) || return 1
	mkdir -p "$dir"
	rl_open_path "$dir"
	rm -rf "$dir/rootfs" "$dir/config.json"
	cp -a "$base" "$dir/rootfs"
	chown -R "$RL_UID:$RL_GID" "$dir"
	(cd "$dir" && as_user "$FORKBOX" spec "$@") ||
		{ echo "rl_make_bundle: '$FORKBOX spec $*' as $RL_USER in $dir failed" >&2; return 1; }
	jq_edit "$dir/config.json" '.process.terminal = false | .process.args = ["/bin/fbhelper", "true"]'
}

# userns_spec: replace $BUNDLE/config.json by what podman hands a runtime it runs in its
# user namespace: the runtime's plain (not rootless) template, made by the test user, with
# no user namespace (the caller's is the container's), no network namespace, no
# resources and no cgroupsPath (no cgroups to manage), /sys a read-only rbind of the
# host's (sysfs cannot be mounted without a network namespace of one's own; the rbind
# brings /sys/fs/cgroup along, so no cgroup mount) and no gid=5 on devpts (gid 5 is not
# mapped).
userns_spec() {
	rm -f "$BUNDLE/config.json"
	(cd "$BUNDLE" && as_user "$FORKBOX" spec) || return 1
	update_config '
		.process.terminal = false
		| .process.args = ["/bin/fbhelper", "true"]
		| del(.linux.resources, .linux.cgroupsPath, .linux.uidMappings, .linux.gidMappings)
		| .linux.namespaces |= map(select(.type != "user" and .type != "network"))
		| .mounts |= map(select(.destination != "/sys/fs/cgroup"))
		| .mounts |= map(if .destination == "/sys"
			then {destination: "/sys", type: "none", source: "/sys", options: ["rbind", "nosuid", "noexec", "nodev", "ro"]}
			else . end)
		| .mounts |= map(if .destination == "/dev/pts" then .options -= ["gid=5"] else . end)'
}

# rl_try_create [CREATE ARGS...]: try_create as the test user.
rl_try_create() {
	status=0
	rl_runtime create "$@" </dev/null >"$BATS_TEST_TMPDIR/try.out" 2>"$BATS_TEST_TMPDIR/try.err" 3>&- 4>&- ||
		status=$?
	output=$(cat "$BATS_TEST_TMPDIR/try.out")
	stderr=$(cat "$BATS_TEST_TMPDIR/try.err")
}

# map_lines_script FILE: a busybox sh script printing the id map FILE (/proc/self/uid_map,
# /proc/self/gid_map) as "INSIDE OUTSIDE COUNT" lines: the kernel pads the columns.
map_lines_script() {
	printf 'while read -r a b c; do echo "$a $b $c"; done <%s' "$1"
}

# rl_test_uid UID: UID (a host uid) is the test user's or one of its subordinate ids:
# the uids this file's containers and runtime calls run as.
rl_test_uid() {
	local u=$1
	[[ $u == "$RL_UID" ]] && return 0
	[[ -n ${RL_SUBUID_START:-} ]] && ((u >= RL_SUBUID_START && u < RL_SUBUID_START + RL_SUBUID_COUNT))
}

# rl_teardown: call from teardown(). Never fails the test by itself.
rl_teardown() {
	[[ -n ${BATS_TEST_TMPDIR:-} && -d $BATS_TEST_TMPDIR && -n ${RL_XDG:-} ]] || return 0
	local -
	set +e
	local id ids=() f pid uid
	# Every container of the test user in the default root: those `list` shows, and the
	# directories a broken `list` would miss. Deleted as the user, and again from a user
	# namespace for those made there (userns_runtime).
	mapfile -t ids < <(rl_runtime list -q 2>/dev/null </dev/null 3>&- 4>&-)
	for f in "$RL_STATE"/*; do
		[[ -d $f ]] && ids+=("$(basename "$f")")
	done
	mapfile -t ids < <(printf '%s\n' "${ids[@]}" | sort -u)
	for id in "${ids[@]}"; do
		[[ -n $id ]] || continue
		rl_runtime delete --force "$id" >/dev/null 2>&1 </dev/null 3>&- 4>&- ||
			userns_runtime delete --force "$id" >/dev/null 2>&1 </dev/null 3>&- 4>&-
	done
	# What is left of this test's processes: those running as the test user (or one of its
	# subordinate uids) whose root is in this test's tmpdir (containers), or whose command
	# line names it (a runtime given --bundle $BUNDLE). Nobody else's.
	for f in /proc/[0-9]*; do
		pid=${f#/proc/}
		[[ $pid == "$$" ]] && continue
		uid=$(stat -c %u "$f" 2>/dev/null) || continue
		rl_test_uid "$uid" || continue
		if [[ $(readlink "$f/root" 2>/dev/null) == "$BATS_TEST_TMPDIR"/* ]] ||
			grep -qsaF -- "$BATS_TEST_TMPDIR/" "$f/cmdline"; then
			kill -KILL "$pid" 2>/dev/null
		fi
	done
	# Root's share (mounts, cgroups named after $CID, helper processes), then the state the
	# runtime left in the user's XDG_RUNTIME_DIR: each test starts with it empty.
	fb_teardown
	find "$RL_XDG" -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null
	return 0
}

# assert_success_stderr: assert_success after `run --separate-stderr`, with the runtime's
# stderr in the failure message (assert_success shows stdout only).
assert_success_stderr() {
	if [[ $status -ne 0 ]]; then
		fail "command failed with status $status
stderr: $stderr
stdout: $output"
	fi
}

# start_detached ID [RUN FLAGS...]: run_detached, failing the test with the runtime's
# message when it fails.
start_detached() {
	run_detached "$@" || fail "run --detach $1 failed: $(container_err "$1")"
}
