#!/usr/bin/env bats
# A user's systemd manager, as a desktop user has one: the sandbox daemon started in a
# delegated scope (`systemd-run --user --scope -p Delegate=yes forkbox daemon`, README), the
# SDK's autostart, which does the same when the user's systemd runs, and the systemd cgroup
# driver as an unprivileged user (`--systemd-cgroup`: a scope of the user's manager, as
# rootless podman's default cgroup manager asks). The fixture of systemd-helpers.bash
# (SD_CGROUP2_ONLY=1: systemd in unified mode on the host's cgroup2 hierarchy) runs the test
# user's manager as a delegated service, as user@.service would be (logind, which starts that
# one, is not part of the fixture), with the system bus up: the user manager asks the system
# manager to move a scope's process into it. On this hybrid machine the cgroup2 hierarchy
# holds no controller but hugetlb, so the limits stay rlimits here; what is checked is the
# delegation: where the processes land, and that nothing is left. The fixture's /proc/sys is
# made writable again after systemd's boot (setup_file says why).

load helpers
load rootless-helpers
load systemd-helpers

setup_file() {
	command -v systemd-run >/dev/null || return 0
	SD_CGROUP2_ONLY=1 sd_boot || return 0
	sd_start_dbus || return 0
	# The fixture boots with /proc/sys read-only (a bind over it), so that systemd's start-up
	# cannot change the host's sysctls. A /proc with a mount over part of it cannot be mounted
	# again in a user namespace (the kernel's "fully visible" rule), and every sandbox mounts
	# its own: the bind goes once systemd is up (nothing in the fixture sets sysctls later).
	sd_exec umount /proc/sys || return 0
	rl_setup_user || return 0
	# What the user runs, where the user may read and run it.
	export UM_DIR
	UM_DIR=$(mktemp -d /tmp/fb-sd-user.XXXXXX)
	chmod 0755 "$UM_DIR"
	cp "$FORKBOX" "$UM_DIR/forkbox"
	cp -r "$BATS_TEST_DIRNAME/../python/forkbox" "$UM_DIR/forkbox-sdk"
	mkdir "$UM_DIR/py" && mv "$UM_DIR/forkbox-sdk" "$UM_DIR/py/forkbox"
	chmod -R a+rX "$UM_DIR"
	export UM_RUNTIME=/run/user/$RL_UID
	sd_exec sh -c "mkdir -p $UM_RUNTIME && chown $RL_UID:$RL_GID $UM_RUNTIME && chmod 0700 $UM_RUNTIME" || return 0
	sd_exec systemd-run --quiet --unit=fbx-user-manager -p DefaultDependencies=no -p "User=$RL_UID" \
		-p Delegate=yes -p Type=notify -p "Environment=XDG_RUNTIME_DIR=$UM_RUNTIME" /lib/systemd/systemd --user ||
		return 0
	export UM_READY=1
}

teardown_file() {
	sd_shutdown
	[[ -n ${UM_DIR:-} ]] && rm -rf "$UM_DIR"
	return 0
}

setup() {
	is_runc && skip "the sandbox daemon is forkbox's own"
	[[ -n ${UM_READY:-} ]] || skip "no systemd fixture with a user manager (systemd-run, the system bus)"
}

teardown() {
	# Whatever a test left in the user's manager (its daemons' scopes).
	sd_exec sh -c "for u in \$(XDG_RUNTIME_DIR=$UM_RUNTIME setpriv --reuid $RL_UID --regid $RL_GID --init-groups \
		systemctl --user list-units --plain --no-legend 'run-*.scope' | cut -d' ' -f1); do
		XDG_RUNTIME_DIR=$UM_RUNTIME setpriv --reuid $RL_UID --regid $RL_GID --init-groups systemctl --user stop \$u; done" \
		>/dev/null 2>&1
	return 0
}

# as_fixture_user CMD...: CMD inside the fixture as the test user, with its runtime directory.
as_fixture_user() {
	sd_exec setpriv --reuid "$RL_UID" --regid "$RL_GID" --init-groups \
		env -i PATH=/usr/bin:/bin HOME=/nonexistent XDG_RUNTIME_DIR="$UM_RUNTIME" "$@"
}

# v2_cgroup_in_fixture PID: the process's cgroup, as the fixture sees it.
v2_cgroup_in_fixture() {
	sd_exec awk -F: '$1 == "0" { print $3 }' "/proc/$1/cgroup"
}

# user_bundle ID: a rootless bundle of the test user's (`spec --rootless` as the user), no
# terminal, cgroupsPath user.slice:forkbox:ID; sets BUNDLE_DIR.
user_bundle() {
	BUNDLE_DIR=$UM_DIR/bundle-$1
	mkdir -p "$BUNDLE_DIR"
	cp -a "$(base_rootfs)" "$BUNDLE_DIR/rootfs"
	chown -R "$RL_UID:$RL_GID" "$BUNDLE_DIR"
	as_fixture_user sh -c "cd '$BUNDLE_DIR' && '$UM_DIR/forkbox' spec --rootless" || fail "spec --rootless as the user"
	jq_edit "$BUNDLE_DIR/config.json" '.process.terminal = false | .linux.cgroupsPath = "user.slice:forkbox:'"$1"'"'
}

# wait_for_info SOCKET: until the user's daemon there answers --info (5 s at most).
wait_for_info() {
	local i
	for ((i = 0; i < 50; i++)); do
		as_fixture_user "$UM_DIR/forkbox" sandbox --socket "$1" --info 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

@test "sandbox (systemd user manager): a daemon started in a delegated scope makes its sandboxes' cgroups in it" {
	local sock=$UM_RUNTIME/scoped.sock
	as_fixture_user systemd-run --user --scope --quiet --collect -p Delegate=yes -- \
		"$UM_DIR/forkbox" daemon --socket "$sock" </dev/null >/dev/null 2>"$UM_DIR/scoped.err" 3>&- 4>&- &
	run wait_for_info "$sock"
	assert_success
	local daemon service scope
	daemon=$(jq -r .pid <<<"$output")
	service=$(jq -r .service_pid <<<"$output")
	assert_equal "$(jq -r .mode <<<"$output")" rootless

	# In the scope's leaf, the scope itself empty: it can hand its controllers on.
	scope=$(v2_cgroup_in_fixture "$daemon")
	[[ $scope == */app.slice/run-*.scope/forkbox-daemon ]] || fail "the daemon's cgroup is $scope: $(cat "$UM_DIR/scoped.err")"
	scope=${scope%/forkbox-daemon}
	assert_equal "$(sd_exec cat "/sys/fs/cgroup$scope/cgroup.procs")" ""
	# The limits are the scope's controllers' (rlimits without them).
	local controllers want=rlimit
	controllers=$(sd_exec cat "/sys/fs/cgroup$scope/cgroup.controllers")
	[[ " $controllers " == *" memory "* ]] && want=cgroup
	assert_equal "$(jq -r .limits.memory <<<"$output")" "$want"

	# A sandbox's processes are in a cgroup of the daemon's, beside it in the scope.
	run as_fixture_user "$UM_DIR/forkbox" sandbox --socket "$sock" -- sh -c 'echo made'
	assert_success
	assert_output made
	local marker=$((54321000 + $$ % 1000)) pid= i
	as_fixture_user "$UM_DIR/forkbox" sandbox --socket "$sock" -- sleep "$marker" </dev/null >/dev/null 2>&1 3>&- 4>&- &
	local client=$!
	for ((i = 0; i < 100; i++)); do
		pid=$(sd_exec pgrep -x -f "sleep $marker") && break
		sleep 0.1
	done
	[[ -n $pid ]] || fail "the sandbox's sleep did not start"
	local where
	where=$(v2_cgroup_in_fixture "$pid")
	[[ $where == "$scope/forkbox-sandbox/$service-"* ]] || fail "the sandbox's cgroup is $where, not under $scope/forkbox-sandbox"

	# SIGTERM: the sandbox dies with the daemon and its cgroup goes.
	sd_exec kill -TERM "$daemon"
	wait "$client" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		sd_exec kill -0 "$daemon" 2>/dev/null || break
		sleep 0.1
	done
	run sd_exec sh -c "ls -d /sys/fs/cgroup$scope/forkbox-sandbox/$service-* 2>/dev/null"
	assert_output ""
}

@test "sandbox (systemd user manager): the SDK autostarts the user's daemon in a delegated scope" {
	run as_fixture_user env PYTHONPATH="$UM_DIR/py" FORKBOX_BIN="$UM_DIR/forkbox" /usr/bin/python3 -c '
import json
from forkbox import Forkbox
r = Forkbox.run("echo started")
print(json.dumps({"stdout": r.stdout, "limits": r.limits, "info": Forkbox().info()}))'
	assert_success
	local line=${lines[-1]}
	assert_equal "$(jq -r .stdout <<<"$line")" "started"
	local daemon where
	daemon=$(jq -r .info.pid <<<"$line")
	where=$(v2_cgroup_in_fixture "$daemon")
	[[ $where == */app.slice/run-*.scope/forkbox-daemon ]] ||
		fail "the autostarted daemon's cgroup is $where: $(sd_exec cat "$UM_RUNTIME/forkbox/forkbox-daemon.log")"
	sd_exec kill -TERM "$daemon"
}

@test "systemd driver as an unprivileged user: the container in a delegated scope of the user's manager, gone after delete" {
	local id=fbu-$$-$BATS_TEST_NUMBER bundle
	user_bundle "$id"
	bundle=$BUNDLE_DIR
	jq_edit "$bundle/config.json" '.process.args = ["/bin/sh", "-c", "echo started; exec sleep 100"]'
	local fb=("$UM_DIR/forkbox" --root "$UM_RUNTIME/forkbox-state" --systemd-cgroup)
	# The container keeps create's stdio: files, not bats' pipe.
	as_fixture_user "${fb[@]}" create -b "$bundle" "$id" </dev/null >"$UM_DIR/$id.out" 2>"$UM_DIR/$id.err" ||
		fail "create: $(cat "$UM_DIR/$id.err")"

	run as_fixture_user systemctl --user is-active "forkbox-$id.scope"
	assert_output active
	run as_fixture_user systemctl --user show -P Delegate "forkbox-$id.scope"
	assert_output yes
	local manager pid
	manager=$(as_fixture_user systemctl --user show -P ControlGroup)
	pid=$(as_fixture_user "${fb[@]}" state "$id" | jq -r .pid)
	assert_equal "$(v2_cgroup_in_fixture "$pid")" "$manager/user.slice/forkbox-$id.scope"

	run as_fixture_user "${fb[@]}" start "$id"
	assert_success
	# exec's process is born in the container's cgroup from within the user's manager's
	# subtree (a scope of its own here; podman's processes are there); from outside it (here
	# the fixture's caller cgroup, as a login shell's session scope: root's) the kernel refuses
	# that, and systemd attaches it before it goes on.
	local via
	for via in "systemd-run --user --scope --quiet --collect --" ""; do
		# shellcheck disable=SC2086 # the launcher's words
		run as_fixture_user $via "${fb[@]}" exec "$id" awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup
		assert_success
		assert_output "/" # the root of the container's cgroup namespace: its scope
	done
	run as_fixture_user "${fb[@]}" delete --force "$id"
	assert_success
	run as_fixture_user systemctl --user is-active "forkbox-$id.scope"
	refute_output active
	run sd_exec test -d "/sys/fs/cgroup$manager/user.slice/forkbox-$id.scope"
	assert_failure
}

@test "systemd driver as an unprivileged user without a manager to reach: a clear error, nothing made" {
	local id=fbn-$$-$BATS_TEST_NUMBER bundle
	user_bundle "$id"
	bundle=$BUNDLE_DIR
	run sd_exec setpriv --reuid "$RL_UID" --regid "$RL_GID" --init-groups env -i PATH=/usr/bin:/bin \
		XDG_RUNTIME_DIR="$UM_DIR/no-manager" "$UM_DIR/forkbox" --root "$UM_RUNTIME/no-manager-state" --systemd-cgroup \
		create -b "$bundle" "$id" </dev/null 2>&1
	assert_failure
	assert_output --partial "cannot reach the user's manager"
	run sd_exec ls "$UM_RUNTIME/no-manager-state"
	refute_output --partial "$id"
}
