#!/usr/bin/env bats
# The sandbox daemon on a pure cgroup v2 host: the daemons here run in a private mount
# namespace where /sys/fs/cgroup is the host's cgroup2 hierarchy alone (cgroupv2.bats' view),
# so on a hybrid host they see only the controllers its v2 hierarchy holds (here: hugetlb;
# memory, pids and cpu are v1's). The limits a daemon reports must be the ones it applies:
# cgroup where the v2 controllers are there, rlimits where they are not. A user's daemon
# whose v2 cgroup is delegated to it moves into a leaf and makes its sandboxes' cgroups
# beside it. The cgroups a test makes are the host's (one cgroup2 hierarchy per kernel):
# teardown removes them (EXTRA_CGROUPS).

load sandbox-helpers

# host_v2_mount: where this host mounts its cgroup2 hierarchy; empty when it has none.
host_v2_mount() {
	awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2" && $4 == "/") { print $5; exit } break } }' \
		/proc/self/mountinfo
}

setup() {
	sandbox_setup
	V2=$(host_v2_mount)
	[[ -n $V2 ]] || skip "this host has no cgroup2 hierarchy to build a pure v2 view from"
	command -v unshare >/dev/null || skip "unshare (util-linux) is missing"
}

# in_v2_view CGROUP CMD...: CMD in the pure v2 view, moved first into CGROUP (a path in the
# v2 hierarchy, "" for the caller's own). Replaces the calling (sub)shell.
in_v2_view() {
	local cg=$1
	shift
	exec unshare --mount --propagation private -- sh -c \
		'umount -R /sys/fs/cgroup 2>/dev/null; mount -t cgroup2 cgroup2 /sys/fs/cgroup || exit 1
		 [ -z "$1" ] || echo $$ >"/sys/fs/cgroup$1/cgroup.procs" || exit 1
		 shift; exec "$@"' sh "$cg" "$@"
}

# start_v2_user_daemon CGROUP: the test user's daemon in the pure v2 view, started in CGROUP;
# stopped by teardown. Sets USOCK, USER_DAEMON and UERR (its stderr, with --debug).
start_v2_user_daemon() {
	user_daemon_dirs
	UERR=$TDIR/user-daemon.err
	(in_v2_view "$1" env -i PATH="$RL_PATH" HOME="$RL_HOME" XDG_RUNTIME_DIR="$RL_XDG" \
		setpriv --reuid "$RL_UID" --regid "$RL_GID" --init-groups \
		"$SB_FB" --debug daemon --socket "$USOCK" </dev/null >/dev/null 2>"$UERR" 3>&- 4>&-) &
	USER_DAEMON=$!
	EXTRA_PIDS+=("$USER_DAEMON")
	wait_for_socket "$USOCK" user "$UERR"
}

# test_cgroup NAME [delegated]: a v2 cgroup made for the test (removed by teardown), and
# delegated to the test user as systemd's Delegate=yes does (the directory and the files a
# delegatee writes) when asked. Sets CG, its path in the hierarchy.
test_cgroup() {
	rl_setup_user || fail "cannot make the test user"
	CG=/$1-$$-$BATS_TEST_NUMBER
	mkdir "$V2$CG" || fail "mkdir $V2$CG"
	EXTRA_CGROUPS+=("$V2$CG")
	[[ ${2:-} != delegated ]] ||
		chown "$RL_UID:$RL_GID" "$V2$CG" "$V2$CG/cgroup.procs" "$V2$CG/cgroup.subtree_control" "$V2$CG/cgroup.threads"
}

# expected_limits DIR: the limits a daemon whose sandboxes' cgroups get DIR's controllers
# reports, as jq -c '.limits | [.memory, .pids, .cpu]' prints them.
expected_limits() {
	local c m=rlimit p=rlimit u=none
	for c in $(cat "$1/cgroup.controllers"); do
		case $c in
		memory) m=cgroup ;;
		pids) p=cgroup ;;
		cpu) u=cgroup ;;
		esac
	done
	echo "[\"$m\",\"$p\",\"$u\"]"
}

# assert_log_contains FILE TEXT: FILE (a daemon's stderr) has TEXT.
assert_log_contains() {
	grep -qF -- "$2" "$1" || fail "$1 does not contain '$2': $(cat "$1")"
}

# v2_cgroup_of PID: the process's path in the v2 hierarchy.
v2_cgroup_of() {
	awk -F: '$1 == "0" { print $3 }' "/proc/$1/cgroup"
}

@test "sandbox (pure v2): a root daemon reports the limits its v2 controllers hold, and applies them" {
	local sock=$TDIR/root.sock had_parent=
	[[ -d $V2/forkbox-sandbox ]] && had_parent=1
	(in_v2_view "" "$SB_FB" daemon --socket "$sock" </dev/null >/dev/null 2>"$sock.err" 3>&- 4>&-) &
	EXTRA_PIDS+=("$!")
	[[ -n $had_parent ]] || EXTRA_CGROUPS+=("$V2/forkbox-sandbox")
	wait_for_socket "$sock" root

	run "$SB_FB" sandbox --socket "$sock" --info
	assert_success
	local want
	want=$(expected_limits "$V2")
	assert_equal "$(jq -c '.limits | [.memory, .pids, .cpu]' <<<"$output")" "$want"
	assert_equal "$(jq -r .freezer <<<"$output")" cgroup

	# Every run is made (a missing memory controller once failed them all).
	run --separate-stderr sb_on "$sock" -- echo made
	assert_success
	assert_output made
	# A limit without its controller is an rlimit, and it holds.
	run --separate-stderr sb_on "$sock" --memory 64 --pids 20 -- sh -c "ulimit -v; awk '/^Max processes/ { print \$3 }' /proc/self/limits"
	assert_success
	if [[ $want == '["rlimit"'* ]]; then
		assert_equal "${lines[0]}" 65536
	else
		assert_equal "${lines[0]}" unlimited
	fi
	if [[ $want == '["rlimit","rlimit"'* || $want == '["cgroup","rlimit"'* ]]; then
		assert_equal "${lines[1]}" 21 # the sandbox's init counts too
	else
		assert_equal "${lines[1]}" unlimited
	fi
	run --separate-stderr sb_on "$sock" --memory 64 -- python3 -c 'b = bytearray(256 << 20)'
	((status == 137 || status == 1)) || fail "256 MiB in a 64 MiB sandbox: status $status, stderr: $stderr"
}

@test "sandbox (pure v2, user's daemon): in a delegated cgroup it moves to a leaf and makes its sandboxes' cgroups beside it" {
	test_cgroup fb-delegated delegated
	local cg=$CG
	start_v2_user_daemon "$cg"

	# The daemon left the delegated cgroup for a leaf, so the cgroup can enable controllers.
	assert_equal "$(v2_cgroup_of "$USER_DAEMON")" "$cg/forkbox-daemon"
	assert_equal "$(cat "$V2$cg/cgroup.procs")" ""
	assert_log_contains "$UERR" "sandboxes' cgroups go under $cg/forkbox-sandbox (delegated)"

	run as_user "$SB_FB" sandbox --socket "$USOCK" --info
	assert_success
	assert_equal "$(jq -c '.limits | [.memory, .pids, .cpu]' <<<"$output")" "$(expected_limits "$V2$cg")"
	assert_equal "$(jq -r .freezer <<<"$output")" cgroup
	local service
	service=$(jq -r .service_pid <<<"$output")

	# A run's processes are in a cgroup of their own below the daemon's, gone when it ends.
	local marker=$((65432000 + $$ % 1000)) pid
	usb -- sleep "$marker" </dev/null >/dev/null 2>"$TDIR/err" 3>&- 4>&- &
	EXTRA_PIDS+=("$!")
	pid=$(wait_for_process sleep "sleep $marker") || fail "the sandbox's sleep did not start: $(cat "$TDIR/err")"
	local where
	where=$(v2_cgroup_of "$pid")
	[[ $where == "$cg/forkbox-sandbox/$service-"* ]] || fail "the sandbox's cgroup is $where"
	kill -TERM "$USER_DAEMON"
	wait_for_pid_gone "$USER_DAEMON" 10 || fail "the daemon survived SIGTERM"
	no_process_matching "sleep $marker" 5
	local left
	left=$(compgen -G "$V2$cg/forkbox-sandbox/$service-*" || true)
	[[ -z $left ]] || fail "sandbox cgroups left behind: $left"
}

@test "sandbox (pure v2, user's daemon): a cgroup not delegated to it: rlimits, and its log says how to delegate one" {
	test_cgroup fb-not-delegated
	local cg=$CG
	start_v2_user_daemon "$cg"

	assert_equal "$(v2_cgroup_of "$USER_DAEMON")" "$cg"
	assert_log_contains "$UERR" "is not delegated to uid $RL_UID"
	assert_log_contains "$UERR" "systemd-run --user --scope -p Delegate=yes forkbox daemon"
	run as_user "$SB_FB" sandbox --socket "$USOCK" --info
	assert_success
	assert_equal "$(jq -c '.limits | [.memory, .pids, .cpu]' <<<"$output")" '["rlimit","rlimit","none"]'
	run --separate-stderr usb --memory 64 -- sh -c 'ulimit -v'
	assert_success
	assert_output 65536
}

@test "sandbox (pure v2, user's daemon): a delegated cgroup that holds another process is left as it is" {
	test_cgroup fb-shared delegated
	local cg=$CG
	# Another process of the cgroup (the user's shell, say): the daemon must not move it.
	(in_v2_view "$cg" sleep 600) &
	local other=$!
	EXTRA_PIDS+=("$other")
	local i
	for ((i = 0; i < 50; i++)); do
		[[ $(v2_cgroup_of "$other" 2>/dev/null) == "$cg" ]] && break
		sleep 0.1
	done
	start_v2_user_daemon "$cg"

	assert_equal "$(v2_cgroup_of "$USER_DAEMON")" "$cg"
	assert_equal "$(v2_cgroup_of "$other")" "$cg"
	assert_log_contains "$UERR" "holds other processes than the daemon"
	run as_user "$SB_FB" sandbox --socket "$USOCK" --info
	assert_success
	assert_equal "$(jq -c '.limits | [.memory, .pids]' <<<"$output")" '["rlimit","rlimit"]'
	run --separate-stderr usb -- echo made
	assert_success
	assert_output made
}
