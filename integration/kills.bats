#!/usr/bin/env bats
# Kills: `forkbox create` SIGKILLed at every step of its protocol with init, and the daemon
# SIGKILLed with requests in flight. A create is stopped at a trace mark with the test hook
# FORKBOX_TEST_STOP_AT (libforkbox/base/trace.hpp), then killed; whatever it had forked
# goes on. Until create has recorded init in state.json, init must die by itself; after,
# `delete --force` removes it. Either way `delete --force` leaves no process, cgroup, state
# directory or mount, and a fresh create of the same id works. tests/reliability/kills.sh
# runs the same at length.

load helpers
source "$REPO_DIR/tests/reliability/kills-lib.bash"

setup() {
	skip_if_runc "FORKBOX_TEST_STOP_AT is forkbox's own"
	setup_bundle /bin/fbhelper sleep 1000
	KL_FORKBOX=$FORKBOX
	KL_ROOT=$ROOT
	KL_TAG=$BATS_TEST_TMPDIR
	KL_PREFIX=$CID
	SOCK=$BATS_TEST_TMPDIR/zygote.sock
	DAEMON_PID=
}

teardown() {
	if [[ -n ${DAEMON_PID:-} ]]; then
		kill -TERM "$DAEMON_PID" 2>/dev/null
		wait "$DAEMON_PID" 2>/dev/null
	fi
	fb_teardown
}

# assert_clean WHAT: nothing of this test is left.
assert_clean() {
	local left
	left=$(kl_leaks)
	[[ -z $left ]] || fail "after $1, left behind:
$left"
}

# kill_at_each BUNDLE MARK...: for each mark: create stopped there and SIGKILLed; init gone
# by itself (unless create had recorded it); delete --force; clean; the same id created
# again, deleted, clean.
kill_at_each() {
	local bundle=$1 mark id left n=0
	shift
	for mark in "$@"; do
		id=$CID-$((n++))
		kl_kill_create_at "$id" "$mark" --bundle "$bundle" || fail "create did not stop at '$mark'"
		if ! kl_recorded_mark "$mark"; then
			left=$(kl_wait_gone 5 "${KL_PIDS[@]}") ||
				fail "create killed at '$mark': its processes outlive it: $(ps -o pid,ppid,stat,args -p "${left//$'\n'/,}")"
		fi
		runtime delete --force "$id" || fail "delete --force after a kill at '$mark'"
		left=$(kl_wait_gone 5 "${KL_PIDS[@]}") || fail "killed at '$mark': alive after delete --force: $left"
		assert_clean "a kill at '$mark' and delete --force"
		BUNDLE=$bundle create_container "$id" || fail "create $id again after a kill at '$mark': $(container_err "$id")"
		assert_equal "$(container_status "$id")" created
		runtime delete --force "$id"
		assert_clean "create $id again after a kill at '$mark', and delete"
	done
}

@test "kills: create SIGKILLed at each step before init exists leaves nothing after delete --force" {
	kill_at_each "$BUNDLE" "create: verb" "create: config read" "create: config parsed" "create: planned" \
		"create: zygote asked" "create: seccomp ready" "create: state dir made" "create: cgroup layout" \
		"create: zygote answered" "create: state written" "create: cgroups placed" "create: cgroups made" \
		"create: clone"
}

@test "kills: create SIGKILLed while init sets up, or before it recorded init: init dies with it" {
	kill_at_each "$BUNDLE" "create: go" "create: cloned" "create: init ready" "create: state recorded"
}

@test "kills: create SIGKILLed as it makes the v1 cgroups after the clone, or as init joins them" {
	kl_has_v1 || skip "no cgroup v1 hierarchy on this host"
	kill_at_each "$BUNDLE" "${KL_V1_LATE_MARKS[@]}"
}

@test "kills: create SIGKILLed while init is at each of its steps: init exits by itself" {
	kill_at_each "$BUNDLE" "${KL_INIT_MARKS[@]}"
}

@test "kills: create SIGKILLed after recording init leaves a created container that delete --force removes" {
	kill_at_each "$BUNDLE" "create: done"
}

@test "kills: with a user namespace, init dies with a create killed around the id maps" {
	local ub=$BATS_TEST_TMPDIR/userns
	cp -a "$BUNDLE" "$ub"
	chown -R 100000:100000 "$ub/rootfs"
	open_path_for_others
	jq_edit "$ub/config.json" '.linux.namespaces += [{"type": "user"}] |
		.linux.uidMappings = [{"containerID": 0, "hostID": 100000, "size": 65536}] |
		.linux.gidMappings = [{"containerID": 0, "hostID": 100000, "size": 65536}]'
	kill_at_each "$ub" "create: go" "init: go" "${KL_USERNS_MARKS[@]}" "init: namespaces set" "create: init ready" \
		"create: state recorded"
}

@test "kills: joining a namespace by path, the intermediate and the init it forks die with a killed create" {
	local nb=$BATS_TEST_TMPDIR/joins
	cp -a "$BUNDLE" "$nb"
	make_netns "$CID-net"
	jq_edit "$nb/config.json" '.linux.namespaces |= map(if .type == "network" then .path = $p else . end)' \
		--arg p "/var/run/netns/$CID-net"
	kill_at_each "$nb" "create: go" "init: go" "${KL_INTERMEDIATE_MARKS[@]}" "init: namespaces set" \
		"create: init ready" "create: state recorded"
}

@test "kills: an intermediate stopped before it reports init's pid: init waits, and create succeeds with the pid right" {
	make_netns "$CID-net"
	update_config '.linux.namespaces |= map(if .type == "network" then .path = $p else . end)' \
		--arg p "/var/run/netns/$CID-net"
	update_config '.hooks.prestart = [{"path": "/bin/sh", "args": ["sh", "-c", "cat > '"$BATS_TEST_TMPDIR"'/hook.state"]}]'
	FORKBOX_TEST_STOP_AT="intermediate: forked" "$FORKBOX" --root "$ROOT" create --bundle "$BUNDLE" "$CID" \
		</dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/create.err" 3>&- 4>&- &
	local cpid=$! at
	at=$(kl_wait_at_mark "$cpid" 10) || fail "no stop: $(cat "$BATS_TEST_TMPDIR/create.err")"
	# Time for init to do all its work meanwhile, were it not waiting.
	sleep 0.5
	kill -CONT "$at"
	wait "$cpid" || fail "create: $(cat "$BATS_TEST_TMPDIR/create.err")"
	assert_equal "$(container_status "$CID")" created
	# The prestart hook was given init's pid, not the intermediate's.
	assert_equal "$(jq -r .pid "$BATS_TEST_TMPDIR/hook.state")" "$(container_pid "$CID")"
	runtime delete --force "$CID"
	assert_clean "delete"
}

@test "kills: a hook running when its create is SIGKILLed dies with it" {
	local number=$RANDOM$RANDOM hook create_pid
	update_config '.hooks.createRuntime = [{"path": "/bin/sh", "args": ["sh", "-c", "echo $$ > '"$BATS_TEST_TMPDIR"'/hook.pid; exec sleep 1000.'"$number"'"]}]'
	"$FORKBOX" --root "$ROOT" create --bundle "$BUNDLE" "$CID" </dev/null >/dev/null 2>&1 3>&- 4>&- &
	create_pid=$!
	for ((i = 0; i < 200; i++)); do
		[[ -s $BATS_TEST_TMPDIR/hook.pid ]] && pgrep -f "sleep 1000.$number" >/dev/null && break
		sleep 0.05
	done
	hook=$(cat "$BATS_TEST_TMPDIR/hook.pid") || fail "the hook did not start"
	kill -KILL "$create_pid"
	wait "$create_pid" 2>/dev/null || true
	if ! kl_wait_gone 5 "$hook" >/dev/null; then
		local left
		left=$(ps -o pid,ppid,args -p "$hook")
		kill -KILL "$hook"
		fail "the hook outlived its create: $left"
	fi
	runtime delete --force "$CID" || true
	assert_clean "a create killed while its hook ran, and delete --force"
}

@test "kills: delete --force of a half-made container kills what runs in the cgroups it named" {
	[[ -d /sys/fs/cgroup/memory ]] || skip "no cgroup v1 memory hierarchy"
	# The v1 cgroups exist from here (made after the clone, while init mounts).
	kl_kill_create_at "$CID" "create: v1 cgroups made" --bundle "$BUNDLE" || fail "no stop"
	# Not a process of forkbox's: only the cgroup names it.
	local cg=/sys/fs/cgroup/memory/forkbox/$CID
	[[ -d $cg ]] || fail "no cgroup $cg"
	sleep 1000 &
	local stray=$!
	echo "$stray" >"$cg/cgroup.procs"
	run jq -r .pid "$ROOT/$CID/state.json"
	assert_output 0
	runtime delete --force "$CID"
	kl_wait_gone 5 "$stray" || fail "the process in the half-made container's cgroup survived"
	wait "$stray" 2>/dev/null || true
	assert_clean "delete --force of a half-made container"
}

@test "kills: 40 creates SIGKILLed after 0-99 ms: no init survives them, delete --force leaves no cgroup" {
	local i id cpid kids pids=() ids=() left
	for ((i = 0; i < 40; i++)); do
		id=$CID-$i
		ids+=("$id")
		runtime create --bundle "$BUNDLE" "$id" </dev/null >/dev/null 2>&1 3>&- 4>&- &
		cpid=$!
		sleep "0.0$((RANDOM % 100))" 2>/dev/null || sleep 0.05
		kids=$(kl_descendants "$cpid")
		kill -KILL "$cpid" 2>/dev/null || true
		wait "$cpid" 2>/dev/null || true
		# A create that finished first made a container: its init lives until delete.
		[[ $(jq -r .pid "$ROOT/$id/state.json" 2>/dev/null) =~ ^[1-9] ]] && continue
		# shellcheck disable=SC2206 # pids, one a word
		pids+=($kids)
	done
	if ((${#pids[@]})); then
		left=$(kl_wait_gone 5 "${pids[@]}") || fail "inits alive without delete: $(ps -o pid,ppid,stat,args -p "${left//$'\n'/,}")"
	fi
	for id in "${ids[@]}"; do runtime delete --force "$id"; done
	assert_clean "40 killed creates and delete --force"
}

# A zygote daemon on $SOCK, warm for $BUNDLE.
start_zygote_daemon() {
	"$FORKBOX" --log "$BATS_TEST_TMPDIR/daemon.log" daemon --socket "$SOCK" --pool 2 --warm "$BUNDLE" "$@" \
		</dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/daemon.err" 3>&- 4>&- &
	DAEMON_PID=$!
	local i
	for i in $(seq 100); do
		"$FORKBOX" daemon --socket "$SOCK" --stats >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	fail "the daemon did not come up: $(cat "$BATS_TEST_TMPDIR/daemon.err")"
}

zygote_stat() {
	"$FORKBOX" daemon --socket "$SOCK" --stats | tr ' ' '\n' | sed -n "s/^$1=//p"
}

wait_zygote_ready() {
	local i
	for i in $(seq 200); do
		(($(zygote_stat ready) >= $1)) && return 0
		sleep 0.05
	done
	fail "templates not ready: $("$FORKBOX" daemon --socket "$SOCK" --stats)"
}

# wait_zygote_full [N]: until the pools stop growing (the same count of ready templates
# three times, 0.1 s apart), and with N, until that count is N; prints the count.
wait_zygote_full() {
	local i now same=0 last=-1
	for i in $(seq 200); do
		now=$(zygote_stat ready)
		if [[ $now == "$last" ]] && ((now > 0)); then same=$((same + 1)); else same=0; fi
		last=$now
		if ((same >= 2)) && [[ -z ${1:-} || $now == "$1" ]]; then
			echo "$now"
			return 0
		fi
		sleep 0.1
	done
	echo "pools not full: $("$FORKBOX" daemon --socket "$SOCK" --stats)" >&2
	return 1
}

# spares_of PID: the daemon's spare cgroups (.zygote-PID-N), anywhere.
spares_of() {
	# (find fails on a directory removed while it reads: the daemon removes spares meanwhile.)
	find /sys/fs/cgroup -mindepth 2 -maxdepth 6 -type d -name ".zygote-$1-*" 2>/dev/null || true
}

@test "kills: a zygote create SIGKILLed at each step leaves nothing, and the daemon removes the spare cgroups it had taken" {
	start_zygote_daemon
	local fds ready
	ready=$(wait_zygote_full) || fail "the pools did not fill"
	fds=$(kl_fd_count "$DAEMON_PID")
	export FORKBOX_ZYGOTE=1 FORKBOX_SOCKET=$SOCK
	kill_at_each "$BUNDLE" "create: zygote answered" "create: state written" "create: cgroups placed" \
		"create: cgroups made" "create: go" "init: go" "init: rootfs joined" "init: ready" "create: init ready" \
		"create: state recorded" "create: done"
	(($(zygote_stat served) > 0)) || fail "no template was served: $("$FORKBOX" daemon --socket "$SOCK" --stats)"
	# Every template holds fds: compared with as many ready as before.
	wait_zygote_full "$ready" >/dev/null || fail "the pools did not fill again"
	(($(kl_fd_count "$DAEMON_PID") <= fds)) || fail "the daemon holds $(kl_fd_count "$DAEMON_PID") fds, $fds before"
	local zpid=$DAEMON_PID
	kill -TERM "$DAEMON_PID"
	wait "$DAEMON_PID" || true
	DAEMON_PID=
	run spares_of "$zpid"
	assert_output ""
}

@test "kills: the daemon removes a spare cgroup whose create died before renaming it" {
	[[ -f /sys/fs/cgroup/cpu/cgroup.procs ]] || skip "no cgroup v1 cpu hierarchy on this host"
	start_zygote_daemon
	wait_zygote_ready 2
	local before
	before=$(spares_of "$DAEMON_PID" | sort)
	export FORKBOX_ZYGOTE=1 FORKBOX_SOCKET=$SOCK
	# The template (and its spares) are the client's from here; it dies before the rename.
	kl_kill_create_at "$CID" "create: zygote answered" --bundle "$BUNDLE" || fail "no stop"
	local i gone=0 s
	for ((i = 0; i < 50 && gone == 0; i++)); do
		for s in $before; do [[ -d $s ]] || gone=1; done
		sleep 0.1
	done
	((gone)) || fail "the dead create's spare cgroups are still there: $before"
	runtime delete --force "$CID"
	assert_clean "a zygote create killed after taking a template"
}

@test "kills: the zygote daemon SIGKILLed with creates in flight: every create succeeds, the next daemon removes its spares" {
	[[ -f /sys/fs/cgroup/cpu/cgroup.procs ]] || skip "no cgroup v1 cpu hierarchy on this host"
	start_zygote_daemon
	wait_zygote_ready 2
	local killed=$DAEMON_PID i pids=()
	export FORKBOX_ZYGOTE=1 FORKBOX_SOCKET=$SOCK
	for ((i = 0; i < 8; i++)); do
		create_container "$CID-$i" &
		pids+=($!)
		((i == 3)) && kill -KILL "$killed"
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || fail "create $CID-$i failed with the daemon killed: $(container_err "$CID-$i")"
	done
	wait "$killed" 2>/dev/null || true
	DAEMON_PID=
	for ((i = 0; i < 8; i++)); do
		assert_equal "$(container_status "$CID-$i")" created
		runtime delete --force "$CID-$i"
	done
	assert_clean "creates while the daemon was SIGKILLed"
	start_zygote_daemon
	local left
	for ((i = 0; i < 20; i++)); do
		left=$(spares_of "$killed")
		[[ -z $left ]] && break
		sleep 0.1
	done
	[[ -z $left ]] || fail "the SIGKILLed daemon's spares are left: $left"
}

# assert_service_cgroups_gone SVC: no cgroup of the dead sandbox service SVC is left (its
# successor removes them, soon after it starts).
assert_service_cgroups_gone() {
	local svc=$1 i
	for ((i = 0; i < 50; i++)); do
		[[ -z $(compgen -G "/sys/fs/cgroup/*/forkbox-sandbox/$svc-*") ]] && break
		sleep 0.1
	done
	run compgen -G "/sys/fs/cgroup/*/forkbox-sandbox/$svc-*"
	assert_failure
}

# start_sandbox_daemon SOCK: a daemon on SOCK (DAEMON_PID, for the teardown) whose sandbox
# service answers; SERVICE_PID is the service's pid.
start_sandbox_daemon() {
	local sock=$1 i
	"$FORKBOX" daemon --socket "$sock" </dev/null >/dev/null 2>"$sock.err" 3>&- 4>&- &
	DAEMON_PID=$!
	for ((i = 0; i < 50; i++)); do
		"$FORKBOX" sandbox --socket "$sock" --info >"$BATS_TEST_TMPDIR/info.json" 2>/dev/null && break
		sleep 0.1
	done
	SERVICE_PID=$(jq -r .service_pid "$BATS_TEST_TMPDIR/info.json")
	[[ $SERVICE_PID =~ ^[0-9]+$ ]] || fail "no sandbox service: $(cat "$sock.err")"
}

# next_daemon_serves_without SOCK SVC: a new daemon on SOCK serves a sandbox, and no cgroup of
# the dead sandbox service SVC is left (its successor removes them).
next_daemon_serves_without() {
	local sock=$1 svc=$2 i out=
	"$FORKBOX" daemon --socket "$sock" </dev/null >/dev/null 2>>"$sock.err" 3>&- 4>&- &
	DAEMON_PID=$!
	for ((i = 0; i < 50; i++)); do
		out=$(timeout -s KILL 30 "$FORKBOX" sandbox --socket "$sock" -- echo again 2>/dev/null) && break
		sleep 0.1
	done
	assert_equal "$out" again
	assert_service_cgroups_gone "$svc"
}

@test "kills: the daemon SIGKILLed with sandbox runs in flight: clients fail with a message, nothing of them is left" {
	command -v python3 >/dev/null || skip "python3 missing"
	local sock=$BATS_TEST_TMPDIR/sb.sock marker=$((96120000 + $$ % 1000)) svc i
	# The bats tmpdir is 0700: a sandbox's root (an unprivileged uid) needs no path in it.
	start_sandbox_daemon "$sock"
	svc=$SERVICE_PID
	local sid
	sid=$("$FORKBOX" sandbox --socket "$sock" create) || fail "session: $sid"
	"$FORKBOX" sandbox --socket "$sock" --session "$sid" -- sh -c "(sleep $marker &); true"
	timeout -s KILL 30 "$FORKBOX" sandbox --socket "$sock" -- sleep $((marker + 1)) \
		</dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/client.err" 3>&- 4>&- &
	local client=$!
	for ((i = 0; i < 100; i++)); do
		pgrep -f -- "^sleep $((marker + 1))$" >/dev/null && break
		sleep 0.05
	done
	kill -KILL "$DAEMON_PID"
	wait "$DAEMON_PID" 2>/dev/null || true
	DAEMON_PID=
	local st=0
	wait "$client" || st=$?
	((st != 0 && st != 137)) || fail "the client in flight: status $st"
	[[ -s $BATS_TEST_TMPDIR/client.err ]] || fail "the client in flight printed no message"
	kl_wait_gone 5 "$svc" || fail "the sandbox service outlived its daemon"
	for ((i = 0; i < 50; i++)); do
		pgrep -f -- "^sleep ($marker|$((marker + 1)))$" >/dev/null || break
		sleep 0.1
	done
	run pgrep -a -f -- "^sleep ($marker|$((marker + 1)))$"
	assert_failure
	# The next daemon serves, and nothing of the dead one's service is left.
	next_daemon_serves_without "$sock" "$svc"
	run grep -F -- "$BATS_TEST_TMPDIR" /proc/self/mountinfo
	assert_failure
}

@test "kills: the daemon and its sandbox service SIGKILLed together: the next daemon's service removes the dead one's cgroups" {
	command -v python3 >/dev/null || skip "python3 missing"
	local sock=$BATS_TEST_TMPDIR/sb.sock svc i
	start_sandbox_daemon "$sock"
	svc=$SERVICE_PID
	run timeout -s KILL 30 "$FORKBOX" sandbox --socket "$sock" -- true
	assert_success
	[[ -n $(compgen -G "/sys/fs/cgroup/*/forkbox-sandbox/$svc-*") ]] || skip "the service made no cgroups here"
	# As an OOM kill or `kill -9` of the group would: the service is left a zombie until
	# whoever inherits it reaps it.
	kill -KILL "$DAEMON_PID" "$svc"
	wait "$DAEMON_PID" 2>/dev/null || true
	next_daemon_serves_without "$sock" "$svc"
}

@test "kills: the sandbox service SIGKILLed with one-shot runs in flight: the runs are gone, the next service removes their cgroups" {
	command -v python3 >/dev/null || skip "python3 missing"
	local sock=$BATS_TEST_TMPDIR/sb.sock marker=$((96130000 + $$ % 1000)) svc i client
	start_sandbox_daemon "$sock"
	svc=$SERVICE_PID
	timeout -s KILL 30 "$FORKBOX" sandbox --socket "$sock" -- sleep "$marker" \
		</dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/client.err" 3>&- 4>&- &
	client=$!
	for ((i = 0; i < 100; i++)); do
		pgrep -f -- "^sleep $marker$" >/dev/null && break
		sleep 0.05
	done
	pgrep -f -- "^sleep $marker$" >/dev/null || fail "the run did not start: $(cat "$BATS_TEST_TMPDIR/client.err")"
	kill -KILL "$svc"
	local st=0
	wait "$client" || st=$?
	((st != 0 && st != 137)) || fail "the client in flight: status $st"
	for ((i = 0; i < 50; i++)); do
		pgrep -f -- "^sleep $marker$" >/dev/null || break
		sleep 0.1
	done
	run pgrep -a -f -- "^sleep $marker$"
	assert_failure
	# The daemon starts a new service on the next request; it removes the dead one's cgroups.
	run timeout -s KILL 30 "$FORKBOX" sandbox --socket "$sock" -- echo again
	assert_output again
	assert_service_cgroups_gone "$svc"
}

@test "kills: the sandbox service SIGKILLed while it holds sandboxes for forks: they die with it, the next service removes their cgroups" {
	local sock=$BATS_TEST_TMPDIR/sb.sock svc i sid held pid left
	start_sandbox_daemon "$sock"
	svc=$SERVICE_PID
	# A session that forked once and lives on: the kind's held sandboxes stay while it does.
	sid=$("$FORKBOX" sandbox --socket "$sock" create) || fail "session: $sid"
	run "$FORKBOX" sandbox --socket "$sock" fork "$sid" 2
	assert_success
	for child in $output; do
		"$FORKBOX" sandbox --socket "$sock" close "$child"
	done
	for ((i = 0; i < 100; i++)); do
		"$FORKBOX" sandbox --socket "$sock" --info >"$BATS_TEST_TMPDIR/info.json" 2>/dev/null &&
			[[ $(jq -r .pool.held "$BATS_TEST_TMPDIR/info.json") == 2 ]] && break
		sleep 0.1
	done
	[[ $(jq -r .pool.held "$BATS_TEST_TMPDIR/info.json") == 2 ]] || fail "no held sandboxes: $(cat "$BATS_TEST_TMPDIR/info.json")"
	held=$(pgrep -P "$svc" | tr '\n' ' ')
	kill -KILL "$svc"
	for ((i = 0; i < 50; i++)); do
		left=""
		for pid in $held; do
			[[ -d /proc/$pid ]] && left+=" $pid"
		done
		[[ -z $left ]] && break
		sleep 0.1
	done
	[[ -z $left ]] || fail "the dead service's sandboxes are alive:$left"
	run timeout -s KILL 30 "$FORKBOX" sandbox --socket "$sock" -- echo again
	assert_output again
	assert_service_cgroups_gone "$svc"
}
