#!/usr/bin/env bats
# Rootless containers in delegated cgroups (issue 13, point 5): an unprivileged user
# (fbrootless, see rootless-helpers.bash) owns cgroup directories root made for it, and a
# rootless container whose linux.cgroupsPath lies in them gets the full cgroup contract:
# limits, `update`, `pause`/`resume`, `ps`, `events --stats`, `delete --force` removing
# its cgroups, `kill --all`.
#
# Delegation is cgroup v1's, as runc's own tests/rootless.sh sets it up: in every v1
# hierarchy mounted here (cpu, cpuacct, cpuset, memory, devices, freezer, blkio, pids and
# name=systemd; runc's script takes them all from /proc/self/cgroup), root makes
# /fbrootless-<pid> and gives the test user the directory (g+rwx), its cgroup.procs and
# tasks, and for cpuset its cpuset.cpus and cpuset.mems (copied from the hierarchy's
# root first). The cgroup2 hierarchy of a hybrid host (/sys/fs/cgroup/unified) is not
# delegated: runc's script leaves it alone too. Containers use
# cgroupsPath /fbrootless-<pid>/<container id>, which the runtime makes as the user.
#
# teardown_file removes the delegated directories (deepest first), pass or fail; it also
# removes those of an earlier run whose bats process is gone, when they are empty.
#
# Validate against runc: FORKBOX=/usr/sbin/runc bats integration/rootless-cgroups.bats

load helpers
load rootless-helpers

CG_PREFIX=fbrootless-

# cg_v1_mounts: the mount points of the cgroup v1 hierarchies (named ones included).
cg_v1_mounts() {
	awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup") print $5; break } }' \
		/proc/self/mountinfo | sort -u
}

# cg_mount CONTROLLER: the mount point of the v1 hierarchy holding CONTROLLER (memory,
# pids, ...; name=systemd for the named one).
cg_mount() {
	awk -v c="$1" '{
		for (i = 7; i <= NF; i++) if ($i == "-") {
			if ($(i + 1) != "cgroup") break
			n = split($(i + 3), o, ",")
			for (j = 1; j <= n; j++) if (o[j] == c) { print $5; exit }
			break
		}
	}' /proc/self/mountinfo
}

# cg_dir CONTROLLER [ID]: the host directory of container ID's (default $CID) cgroup.
cg_dir() {
	local m
	m=$(cg_mount "$1")
	[[ -n $m ]] || { echo "no cgroup v1 hierarchy with $1" >&2; return 1; }
	echo "$m/$CG_NAME/${2:-$CID}"
}

# cg_thaw_all: thaw every frozen cgroup under the delegated directories, so the
# processes in them can be killed.
cg_thaw_all() {
	local m f
	m=$(cg_mount freezer)
	[[ -n $m && -d $m/$CG_NAME ]] || return 0
	while read -r f; do
		[[ $(cat "$f" 2>/dev/null) == THAWED ]] || echo THAWED >"$f" 2>/dev/null
	done < <(find "$m/$CG_NAME" -name freezer.state 2>/dev/null)
	return 0
}

# cg_kill_delegated: SIGKILL every process in a cgroup under the delegated directories:
# only this file's containers are put there.
cg_kill_delegated() {
	local m pid
	cg_thaw_all
	while read -r m; do
		[[ -d $m/$CG_NAME ]] || continue
		while read -r pid; do
			[[ -n $pid && $pid != "$$" ]] && kill -KILL "$pid" 2>/dev/null
		done < <(find "$m/$CG_NAME" -name cgroup.procs -exec cat {} + 2>/dev/null)
	done < <(cg_v1_mounts)
	return 0
}

# cg_remove DIR: rmdir DIR and every cgroup below it, deepest first; a cgroup whose
# killed processes are still exiting gets a few more tries.
cg_remove() {
	local dir=$1 i
	for ((i = 0; i < 50; i++)); do
		[[ -d $dir ]] || return 0
		find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null
		[[ -d $dir ]] || return 0
		sleep 0.1
	done
	echo "cannot remove cgroup $dir" >&2
	return 1
}

setup_file() {
	command -v setpriv >/dev/null || skip "setpriv (util-linux) is missing"
	[[ -n $(cg_mount memory) && -n $(cg_mount pids) && -n $(cg_mount freezer) ]] ||
		skip "no cgroup v1 memory, pids and freezer hierarchies: this file delegates v1 directories (a v2-only host needs a delegated v2 subtree)"
	rl_setup_file
	export CG_NAME=$CG_PREFIX$$
	local m d f
	while read -r m; do
		d=$m/$CG_NAME
		mkdir "$d" || return 1
		if [[ -e $d/cpuset.cpus ]]; then
			cat "$m/cpuset.cpus" >"$d/cpuset.cpus" && cat "$m/cpuset.mems" >"$d/cpuset.mems" || return 1
			chown "$RL_UID:$RL_GID" "$d/cpuset.cpus" "$d/cpuset.mems" || return 1
		fi
		for f in "$d" "$d/cgroup.procs" "$d/tasks"; do
			chown "$RL_UID:$RL_GID" "$f" && chmod g+rwx "$f" || return 1
		done
	done < <(cg_v1_mounts)
}

teardown_file() {
	[[ -n ${CG_NAME:-} ]] || return 0
	cg_kill_delegated
	local m d pid
	while read -r m; do
		cg_remove "$m/$CG_NAME"
		# An earlier run killed before its teardown: its empty directories only.
		for d in "$m/$CG_PREFIX"*; do
			[[ -d $d ]] || continue
			pid=${d##*/"$CG_PREFIX"}
			[[ $pid =~ ^[0-9]+$ && ! -e /proc/$pid ]] || continue
			find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
		done
	done < <(cg_v1_mounts)
	return 0
}

setup() {
	rl_make_bundle "$BUNDLE" --rootless
	update_config '
		.process.args = ["/bin/fbhelper", "sleep", "100"]
		| .linux.cgroupsPath = $p
		| .linux.resources = {memory: {limit: 67108864}, pids: {limit: 20}, cpu: {shares: 512}}' \
		--arg p "/$CG_NAME/$CID"
}

teardown() {
	if [[ -n ${SB_DAEMON:-} ]]; then
		kill -TERM "$SB_DAEMON" 2>/dev/null
		wait_for_pid_gone "$SB_DAEMON" 10 >/dev/null 2>&1 || kill -KILL "$SB_DAEMON" 2>/dev/null
		wait "$SB_DAEMON" 2>/dev/null || true
	fi
	[[ -n ${SB_DIR:-} ]] && rm -rf "$SB_DIR"
	cg_thaw_all
	rl_teardown
	cg_kill_delegated
	local m
	while read -r m; do
		[[ -d $m/$CG_NAME ]] || continue
		find "$m/$CG_NAME" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null
	done < <(cg_v1_mounts)
	return 0
}

# Every helpers.bash call that drives the runtime (run_detached, container_status,
# wait_for_status...) runs it as the test user, in its default state root.
runtime() {
	rl_runtime "$@"
}

# cg_value CONTROLLER FILE: the content of FILE in the container's cgroup.
cg_value() {
	local d
	d=$(cg_dir "$1") || return 1
	cat "$d/$2"
}

# no_pidns_config: no pid namespace of the container's own; /proc is then the host's
# (rbind): a user namespace cannot mount a procfs for a pid namespace it does not own.
no_pidns_config() {
	update_config '
		.linux.namespaces |= map(select(.type != "pid"))
		| .mounts |= map(if .destination == "/proc"
			then {destination: "/proc", type: "bind", source: "/proc", options: ["rbind", "nosuid", "noexec", "nodev"]}
			else . end)'
}

@test "a rootless container in a delegated cgroup gets its memory, pids and cpu limits" {
	start_detached "$CID"
	local pid m
	pid=$(container_pid "$CID")
	run cg_value memory memory.limit_in_bytes
	assert_output 67108864
	run cg_value pids pids.max
	assert_output 20
	run cg_value cpu cpu.shares
	assert_output 512
	# The init is in the container's cgroup of every delegated hierarchy.
	for m in memory pids cpu freezer; do
		grep -qxF "$pid" "$(cg_dir "$m")/cgroup.procs" || fail "pid $pid is not in $(cg_dir "$m")"
	done
	run grep -E '^[0-9]+:memory:' "/proc/$pid/cgroup"
	assert_output --regexp ":memory:/$CG_NAME/$CID\$"
}

# The v1 devices controller takes devices.allow and devices.deny from CAP_SYS_ADMIN in the
# initial user namespace only: runc ignores it for rootless containers, and so does forkbox,
# with the device rules of the spec or without any.
@test "a rootless container in a delegated cgroup runs with device rules or without, its devices cgroup untouched" {
	local rules
	for rules in '[{"allow": false, "access": "rwm"}]' '[]'; do
		update_config '.linux.resources.devices = $r' --argjson r "$rules"
		start_detached "$CID"
		run cg_value devices devices.list
		assert_output "a *:* rwm"
		run rl_runtime exec "$CID" /bin/sh -c 'echo x >/dev/null && echo ok'
		assert_success
		assert_output ok
		rl_runtime delete --force "$CID"
	done
}

@test "a rootless container's exec'd process joins the container's cgroups" {
	start_detached "$CID"
	run --separate-stderr rl_runtime exec "$CID" /bin/sh -c 'cat /proc/self/cgroup; echo --; cat /proc/1/cgroup'
	assert_success_stderr
	local self=() init=() l seen=0
	for l in "${lines[@]}"; do
		if [[ $l == -- ]]; then
			seen=1
		elif ((seen)); then
			init+=("$l")
		else
			self+=("$l")
		fi
	done
	[[ ${#self[@]} -gt 0 ]] || fail "no /proc/self/cgroup: $output"
	assert_equal "${self[*]}" "${init[*]}"
}

@test "update as the user changes a rootless container's memory, pids and cpu limits" {
	start_detached "$CID"
	run --separate-stderr rl_runtime update --memory 128m "$CID"
	assert_success_stderr
	run cg_value memory memory.limit_in_bytes
	assert_output 134217728
	run --separate-stderr rl_runtime update --pids-limit 30 "$CID"
	assert_success_stderr
	# A linux.resources document on stdin (runc spells the flag --cpu-share, forkbox
	# --cpu-shares).
	run --separate-stderr rl_runtime update -r - "$CID" <<<'{"cpu": {"shares": 256}}'
	assert_success_stderr
	run cg_value pids pids.max
	assert_output 30
	run cg_value cpu cpu.shares
	assert_output 256
	# What the updates did not name stays.
	run cg_value memory memory.limit_in_bytes
	assert_output 134217728
	run cg_value pids pids.max
	assert_output 30
	run container_status "$CID"
	assert_output running
}

@test "pause and resume as the user freeze and thaw a rootless container" {
	start_detached "$CID"
	run --separate-stderr rl_runtime pause "$CID"
	assert_success_stderr
	run container_status "$CID"
	assert_output paused
	run cg_value freezer freezer.state
	assert_output FROZEN
	run rl_runtime list -q
	assert_output "$CID"
	run --separate-stderr rl_runtime resume "$CID"
	assert_success_stderr
	run container_status "$CID"
	assert_output running
	run cg_value freezer freezer.state
	assert_output THAWED
}

@test "ps as the user lists a rootless container's processes from its cgroup" {
	start_detached "$CID"
	local pid
	pid=$(container_pid "$CID")
	run --separate-stderr rl_runtime ps --format json "$CID"
	assert_success_stderr
	assert_equal "$(jq -c . <<<"$output")" "[$pid]"
	run --separate-stderr rl_runtime ps "$CID"
	assert_success_stderr
	assert_line --index 0 --regexp '^UID +PID +PPID '
	assert_line --regexp "^[^ ]+ +$pid +"
	# An exec'd process is listed too: ps reads the cgroup, not just the init.
	rl_runtime exec -d "$CID" /bin/fbhelper sleep 100 </dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/exec.err" 3>&- 4>&- ||
		fail "exec -d failed: $(cat "$BATS_TEST_TMPDIR/exec.err")"
	run --separate-stderr rl_runtime ps --format json "$CID"
	assert_success_stderr
	assert_equal "$(jq length <<<"$output")" 2
	assert_equal "$(jq --argjson p "$pid" 'index($p) != null' <<<"$output")" true
}

@test "events --stats as the user prints one stats object with memory and pids data" {
	start_detached "$CID"
	run --separate-stderr as_user timeout 30 "$FORKBOX" events --stats "$CID"
	assert_success_stderr
	assert_equal "${#lines[@]}" 1
	jq -e . <<<"$output" >/dev/null || fail "not JSON: $output"
	assert_equal "$(jq -r '.type + " " + .id' <<<"$output")" "stats $CID"
	assert_equal "$(jq -r .data.memory.usage.limit <<<"$output")" 67108864
	jq -e '.data.memory.usage.usage > 0' <<<"$output" >/dev/null || fail "no memory usage: $output"
	jq -e '.data.pids.current >= 1' <<<"$output" >/dev/null || fail "no pids.current: $output"
	assert_equal "$(jq -r .data.pids.limit <<<"$output")" 20
}

@test "delete --force as the user kills a rootless container and removes its cgroup directories" {
	start_detached "$CID"
	local pid m dirs=()
	pid=$(container_pid "$CID")
	while read -r m; do
		[[ -d $m/$CG_NAME/$CID ]] && dirs+=("$m/$CG_NAME/$CID")
	done < <(cg_v1_mounts)
	[[ ${#dirs[@]} -gt 0 ]] || fail "the container has no cgroup under /$CG_NAME"
	run --separate-stderr rl_runtime delete --force "$CID"
	assert_success_stderr
	wait_for_pid_gone "$pid"
	local left=()
	while read -r m; do
		[[ -e $m/$CG_NAME/$CID ]] && left+=("$m/$CG_NAME/$CID")
		[[ -d $m/$CG_NAME ]] || left+=("the delegated $m/$CG_NAME is gone")
	done < <(cg_v1_mounts)
	[[ ${#left[@]} -eq 0 ]] || fail "left: ${left[*]}"
	run rl_runtime state "$CID"
	assert_failure
}

@test "kill --all as the user of a rootless container without a pid namespace kills every process in its cgroup" {
	no_pidns_config
	start_detached "$CID"
	local pid
	pid=$(container_pid "$CID")
	rl_runtime exec -d "$CID" /bin/fbhelper sleep 100 </dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/exec.err" 3>&- 4>&- ||
		fail "exec -d failed: $(cat "$BATS_TEST_TMPDIR/exec.err")"
	local pids
	mapfile -t pids <"$(cg_dir pids)/cgroup.procs"
	assert_equal "${#pids[@]}" 2
	run --separate-stderr rl_runtime kill --all "$CID" KILL
	assert_success_stderr
	for pid in "${pids[@]}"; do
		wait_for_pid_gone "$pid"
	done
	wait_for_status "$CID" stopped
}

@test "kill --all of a rootless container without a pid namespace or a cgroup of its own warns" {
	# Without a cgroup the runtime cannot find every process of a container that shares
	# the host's pid namespace, so it says so. runc 1.1's words are its freezer's (it
	# then fails, see the next test); runc 1.2 says "failed to kill all processes,
	# possibly due to lack of cgroup".
	no_pidns_config
	update_config 'del(.linux.cgroupsPath, .linux.resources)'
	start_detached "$CID"
	run --separate-stderr rl_runtime kill --all "$CID" KILL
	if is_runc; then
		assert_stderr_contains 'level=warning msg="cannot toggle freezer: cgroups not configured for container"'
	else
		[[ ${stderr,,} == *cgroup* ]] || fail "no warning naming the cgroup; status $status, stderr: '$stderr'"
	fi
}

@test "kill --all KILL of a rootless container without a pid namespace or a cgroup kills its init" {
	skip_if_runc "runc 1.1.5 fails with 'lstat : no such file or directory' (exit 1) and signals nothing; runc 1.2 warns and kills the init"
	no_pidns_config
	update_config 'del(.linux.cgroupsPath, .linux.resources)'
	start_detached "$CID"
	local pid
	pid=$(container_pid "$CID")
	run --separate-stderr rl_runtime kill --all "$CID" KILL
	assert_success_stderr
	wait_for_pid_gone "$pid"
	wait_for_status "$CID" stopped
}

# The agent sandbox: a user's daemon started in its delegated cgroups makes each sandbox's
# cgroups under them (<delegated>/forkbox-sandbox/<service pid>-<n>), so memory and pids are
# cgroup limits, as under a root daemon, instead of per-process rlimits.
@test "a user's sandbox daemon in its delegated cgroups limits each sandbox with cgroups" {
	is_runc && skip "the sandbox daemon is forkbox's own"
	command -v jq >/dev/null || skip "jq is missing"
	SB_DIR=$(mktemp -d /tmp/fbdeleg.XXXXXX)
	chown "$RL_UID:$RL_GID" "$SB_DIR" && chmod 0700 "$SB_DIR"
	local sock=$SB_DIR/s.sock procs=() m
	while read -r m; do procs+=("$m/$CG_NAME/cgroup.procs"); done < <(cg_v1_mounts)
	# The user moves itself into the cgroups delegated to it, then becomes the daemon.
	(as_user_exec sh -c 'sock=$1; shift; for f in "$@"; do echo $$ >"$f" || exit 1; done; exec "$0" daemon --socket "$sock"' \
		"$FORKBOX" "$sock" "${procs[@]}" </dev/null >/dev/null 2>"$SB_DIR/daemon.err" 3>&- 4>&-) &
	SB_DAEMON=$!
	local i info=
	for ((i = 0; i < 50; i++)); do
		info=$(as_user "$FORKBOX" sandbox --socket "$sock" --info 2>/dev/null) && break
		sleep 0.1
	done
	[[ -n $info ]] || fail "the user's daemon did not answer: $(cat "$SB_DIR/daemon.err")"
	assert_equal "$(jq -c '[.mode, .limits.memory, .limits.pids]' <<<"$info")" '["rootless","cgroup","cgroup"]'

	# A sandbox's cgroup carries its limits; no rlimit stands in for them.
	as_user "$FORKBOX" sandbox --socket "$sock" --memory 64 --pids 20 -- sh -c 'ulimit -v; sleep 3' \
		>"$SB_DIR/run.out" 2>&1 3>&- 4>&- &
	local client=$! mem dir found=
	mem=$(cg_mount memory)
	for ((i = 0; i < 50; i++)); do
		for dir in "$mem/$CG_NAME/forkbox-sandbox"/*-*; do
			[[ -n $(cat "$dir/tasks" 2>/dev/null) && $(cat "$dir/memory.limit_in_bytes" 2>/dev/null) == 67108864 ]] && found=$dir
		done
		[[ -z $found ]] || break
		sleep 0.1
	done
	[[ -n $found ]] || fail "no sandbox cgroup with a 64 MiB limit under $mem/$CG_NAME/forkbox-sandbox"
	local pids_max
	pids_max=$(cat "$(cg_mount pids)/$CG_NAME/forkbox-sandbox/${found##*/}/pids.max")
	((pids_max >= 20 && pids_max <= 21)) || fail "pids.max $pids_max"
	wait "$client" || fail "the run failed: $(cat "$SB_DIR/run.out")"
	assert_equal "$(cat "$SB_DIR/run.out")" unlimited

	# Enforced: 256 MiB in a 64 MiB sandbox is OOM-killed (an rlimit would fail the allocation).
	run as_user timeout 60 "$FORKBOX" sandbox --socket "$sock" --memory 64 -- python3 -c 'b = bytearray(256 << 20)'
	assert_failure 137

	# SIGTERM: every sandbox cgroup it made is gone.
	kill -TERM "$SB_DAEMON"
	wait "$SB_DAEMON" || fail "the daemon exited with $?: $(cat "$SB_DIR/daemon.err")"
	SB_DAEMON=
	local left
	left=$(compgen -G "$mem/$CG_NAME/forkbox-sandbox/*-*" || true)
	[[ -z $left ]] || fail "left: $left"
}
