#!/usr/bin/env bash
# Kills: SIGKILL of `forkbox create` at every step of its protocol with init, at random
# moments, and of the daemon (zygote templates and the sandbox service) with requests in
# flight; after each, `delete --force` (or the next daemon) must leave nothing behind.
#
#   tests/reliability/kills.sh [--quick] [--rounds N]
#
# One line per scenario: "<name> runs=<N> leaks=<N>"; exit status 1 when anything leaked
# or a step went wrong (the details go to stderr). --quick: one round of each, fewer random
# kills (about a minute); the default runs each scenario ROUNDS times (5).
# Runs as root; everything it makes is under one tmpdir, with ids and cgroup names of its own.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/reliability/kills-lib.bash
source "$HERE/kills-lib.bash"

QUICK=0
ROUNDS=5
while (($#)); do
	case $1 in
	--quick) QUICK=1 ;;
	--rounds) ROUNDS=$2; shift ;;
	*) echo "usage: $0 [--quick] [--rounds N]" >&2; exit 2 ;;
	esac
	shift
done
((QUICK)) && ROUNDS=1
RANDOM_KILLS=$((QUICK ? 20 : 40))

[[ $(id -u) == 0 ]] || { echo "kills.sh: needs root" >&2; exit 2; }
FORKBOX_SRC=${FORKBOX:-$REPO/build/forkbox}
FBHELPER=${FBHELPER:-$REPO/build/fbhelper}
BUSYBOX=${BUSYBOX:-/bin/busybox}
for f in "$FORKBOX_SRC" "$FBHELPER" "$BUSYBOX"; do
	[[ -x $f ]] || { echo "kills.sh: $f missing (make all; apt-get install busybox-static)" >&2; exit 2; }
done

KL_TAG=$(mktemp -d /tmp/fb-kills.XXXXXX)
chmod 0711 "$KL_TAG"
# A copy: the tree's binary may be rebuilt while this runs.
KL_FORKBOX=$KL_TAG/forkbox
cp "$FORKBOX_SRC" "$KL_FORKBOX"
KL_ROOT=$KL_TAG/root
KL_PREFIX=fbkill-$$-
SOCK=$KL_TAG/zygote.sock
DAEMON_PID=
FAILED=0

fb() { "$KL_FORKBOX" --root "$KL_ROOT" "$@"; }

cleanup() {
	local id
	ip netns delete "${KL_PREFIX}net" 2>/dev/null
	[[ -n $DAEMON_PID ]] && kill -TERM "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
	for id in "$KL_ROOT"/*/; do
		[[ -d $id ]] && fb delete --force "$(basename "$id")" >/dev/null 2>&1
	done
	kl_leaks | awk '$1 == "process" {print $2}' | xargs -r kill -KILL 2>/dev/null
	find /sys/fs/cgroup -mindepth 1 -maxdepth 6 -depth -type d -name "$KL_PREFIX*" -exec rmdir {} + 2>/dev/null
	awk -v t="$KL_TAG/" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l
	rm -rf "$KL_TAG"
}
trap cleanup EXIT

# A bundle: busybox and fbhelper, the runtime's spec template, process `sleep 1000`.
make_bundle() {
	local dir=$1
	mkdir -p "$dir/rootfs"/{bin,dev,proc,sys,etc,tmp,root}
	cp "$BUSYBOX" "$dir/rootfs/bin/busybox"
	chroot "$dir/rootfs" /bin/busybox --install -s /bin
	cp "$FBHELPER" "$dir/rootfs/bin/fbhelper"
	echo 'root:x:0:0:root:/root:/bin/sh' >"$dir/rootfs/etc/passwd"
	"$KL_FORKBOX" spec --bundle "$dir"
	jq '.process.terminal = false | .process.args = ["/bin/fbhelper", "sleep", "1000"]' \
		"$dir/config.json" >"$dir/c.json" && mv "$dir/c.json" "$dir/config.json"
}
BUNDLE=$KL_TAG/bundle
make_bundle "$BUNDLE" || exit 2
# With a user namespace: init is forked by the intermediate process.
UBUNDLE=$KL_TAG/bundle-userns
cp -a "$BUNDLE" "$UBUNDLE"
chown -R 100000:100000 "$UBUNDLE/rootfs"
jq '.linux.namespaces += [{"type": "user"}] |
    .linux.uidMappings = [{"containerID": 0, "hostID": 100000, "size": 65536}] |
    .linux.gidMappings = [{"containerID": 0, "hostID": 100000, "size": 65536}]' \
	"$UBUNDLE/config.json" >"$UBUNDLE/c.json" && mv "$UBUNDLE/c.json" "$UBUNDLE/config.json"

# report NAME RUNS LEAKS
report() {
	printf '%-28s runs=%-5d leaks=%d\n' "$1" "$2" "$3"
	(($3 == 0)) || FAILED=1
}

# check_clean WHAT: counts (in LEAKS) and shows what is left; removes it for the next run.
LEAKS=0
check_clean() {
	local left
	left=$(kl_leaks)
	[[ -z $left ]] && return 0
	LEAKS=$((LEAKS + $(wc -l <<<"$left")))
	echo "after $1:" >&2
	sed 's/^/  /' <<<"$left" >&2
	cleanup_between
	return 1
}
cleanup_between() {
	local id
	for id in "$KL_ROOT"/*/; do
		[[ -d $id ]] && fb delete --force "$(basename "$id")" >/dev/null 2>&1
	done
	kl_leaks | awk '$1 == "process" {print $2}' | xargs -r kill -KILL 2>/dev/null
	sleep 0.2
	find /sys/fs/cgroup -mindepth 1 -maxdepth 6 -depth -type d -name "$KL_PREFIX*" -exec rmdir {} + 2>/dev/null
	rm -rf "${KL_ROOT:?}"/*/
}

start_daemon() {
	"$KL_FORKBOX" --log "$KL_TAG/daemon.log" daemon --socket "$SOCK" --pool 2 --warm "$BUNDLE" "$@" \
		</dev/null >/dev/null 2>>"$KL_TAG/daemon.err" 3>&- 4>&- &
	DAEMON_PID=$!
	local i
	for ((i = 0; i < 100; i++)); do
		"$KL_FORKBOX" daemon --socket "$SOCK" --stats >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	echo "the daemon did not come up: $(cat "$KL_TAG/daemon.err")" >&2
	return 1
}
stop_daemon() {
	[[ -n $DAEMON_PID ]] || return 0
	kill -TERM "$DAEMON_PID" 2>/dev/null
	wait "$DAEMON_PID" 2>/dev/null
	DAEMON_PID=
}
daemon_ready() {
	"$KL_FORKBOX" daemon --socket "$SOCK" --stats 2>/dev/null | tr ' ' '\n' | sed -n 's/^ready=//p'
}
# wait_pools_full: ready stays the same for a moment and is not 0.
wait_pools_full() {
	local i last=-1 now
	for ((i = 0; i < 100; i++)); do
		now=$(daemon_ready)
		[[ -n $now && $now == "$last" && $now != 0 ]] && return 0
		last=$now
		sleep 0.1
	done
}
# spares_of PID: a daemon's spare cgroups, anywhere.
spares_of() {
	# (find fails on a directory removed while it reads: the daemon removes spares meanwhile.)
	find /sys/fs/cgroup -mindepth 2 -maxdepth 6 -type d -name ".zygote-$1-*" 2>/dev/null || true
}

# step_kills NAME BUNDLE MARKS... [-- CREATE ARGS]: for every mark, create stopped there and
# SIGKILLed: init must die by itself unless create had recorded it, then delete --force and
# a fresh create of the same id, each leaving nothing.
RUNS=0
step_kills() {
	local bundle=$1 n=0 mark id left
	shift
	local marks=() args=()
	while (($#)) && [[ $1 != -- ]]; do marks+=("$1"); shift; done
	(($#)) && shift && args=("$@")
	for mark in "${marks[@]}"; do
		id=${KL_PREFIX}s$((++SEQ))
		RUNS=$((RUNS + 1))
		if ! kl_kill_create_at "$id" "$mark" --bundle "$bundle" "${args[@]}"; then
			LEAKS=$((LEAKS + 1))
			cleanup_between
			continue
		fi
		if ! kl_recorded_mark "$mark" && ! left=$(kl_wait_gone 5 "${KL_PIDS[@]}"); then
			echo "killed at '$mark': still alive without delete: $left" >&2
			LEAKS=$((LEAKS + 1))
		fi
		fb delete --force "$id" 2>>"$KL_TAG/delete.err" || { echo "delete --force after '$mark' failed" >&2; LEAKS=$((LEAKS + 1)); }
		if left=$(kl_wait_gone 5 "${KL_PIDS[@]}"); then :; else
			echo "killed at '$mark': alive after delete --force: $left" >&2
			LEAKS=$((LEAKS + 1))
		fi
		check_clean "a kill at '$mark' and delete --force" || continue
		# The same id again, from scratch.
		if ! fb create --bundle "$bundle" "${args[@]}" "$id" </dev/null >/dev/null 2>"$KL_TAG/recreate.err" 3>&- 4>&-; then
			echo "create of $id again after a kill at '$mark': $(cat "$KL_TAG/recreate.err")" >&2
			LEAKS=$((LEAKS + 1))
		fi
		fb delete --force "$id"
		check_clean "create $id again after a kill at '$mark'"
	done
}

# random_kills BUNDLE N [CREATE ARGS]: the issue's case: N creates, each SIGKILLed after
# 0-99 ms, then delete --force of each; init must be gone without the delete.
random_kills() {
	local bundle=$1 n=$2 i id pids=() ids=() left
	shift 2
	for ((i = 0; i < n; i++)); do
		id=${KL_PREFIX}r$((++SEQ))
		ids+=("$id")
		fb create --bundle "$bundle" "$@" "$id" </dev/null >/dev/null 2>/dev/null 3>&- 4>&- &
		local cpid=$!
		sleep "0.0$((RANDOM % 100))" 2>/dev/null || sleep 0.05
		local kids
		kids=$(kl_descendants "$cpid")
		kill -KILL "$cpid" 2>/dev/null
		wait "$cpid" 2>/dev/null
		# Survivors are fine only when create had finished (the container exists then).
		[[ -s $KL_ROOT/$id/state.json ]] && [[ $(jq -r .pid "$KL_ROOT/$id/state.json" 2>/dev/null) != 0 ]] && continue
		# shellcheck disable=SC2206 # pids, one a word
		pids+=($kids)
	done
	RUNS=$((RUNS + n))
	if ((${#pids[@]})) && ! left=$(kl_wait_gone 5 "${pids[@]}"); then
		echo "random kills: inits alive without delete: $left" >&2
		LEAKS=$((LEAKS + $(wc -w <<<"$left")))
	fi
	for id in "${ids[@]}"; do fb delete --force "$id" 2>/dev/null; done
	check_clean "$n random kills and delete --force"
}

SEQ=0
CREATE_AND_INIT=("${KL_CREATE_MARKS[@]}" "${KL_INIT_MARKS[@]}")
if kl_has_v1; then CREATE_AND_INIT+=("${KL_V1_LATE_MARKS[@]}"); fi

# 1. Cold create, every step.
RUNS=0 LEAKS=0
for ((r = 0; r < ROUNDS; r++)); do step_kills "$BUNDLE" "${CREATE_AND_INIT[@]}"; done
report create-step-kills "$RUNS" "$LEAKS"

# 2. With a user namespace: the intermediate process and the init it forks.
RUNS=0 LEAKS=0
for ((r = 0; r < ROUNDS; r++)); do
	step_kills "$UBUNDLE" "${KL_CREATE_MARKS[@]}" "init: first" "init: go" "${KL_USERNS_MARKS[@]}" \
		"init: namespaces set" "init: ready"
done
report create-step-kills-userns "$RUNS" "$LEAKS"

# 2b. A network namespace joined by path: the intermediate process forks init.
RUNS=0 LEAKS=0
NETNS=${KL_PREFIX}net
ip netns add "$NETNS"
JBUNDLE=$KL_TAG/bundle-joins
cp -a "$BUNDLE" "$JBUNDLE"
jq --arg p "/var/run/netns/$NETNS" '.linux.namespaces |= map(if .type == "network" then .path = $p else . end)' \
	"$JBUNDLE/config.json" >"$JBUNDLE/c.json" && mv "$JBUNDLE/c.json" "$JBUNDLE/config.json"
for ((r = 0; r < ROUNDS; r++)); do
	step_kills "$JBUNDLE" "create: clone" "create: go" "init: go" "${KL_INTERMEDIATE_MARKS[@]}" "init: namespaces set" \
		"init: ready" "create: init ready" "create: state recorded" "create: done"
done
ip netns delete "$NETNS"
report create-step-kills-joins "$RUNS" "$LEAKS"

# 3. Zygote mode: warm templates (namespaces, rootfs, spare cgroups) taken, then killed.
# The daemon must remove the spares of a create that died before renaming them, and hold
# as many fds at the end as with its pools full at the start.
RUNS=0 LEAKS=0
start_daemon || exit 2
wait_pools_full
ready_before=$(daemon_ready)
fds_before=$(kl_fd_count "$DAEMON_PID")
export FORKBOX_ZYGOTE=1 FORKBOX_SOCKET=$SOCK
for ((r = 0; r < ROUNDS; r++)); do
	step_kills "$BUNDLE" "${KL_CREATE_MARKS[@]}" "init: first" "init: go" "init: rootfs joined" "init: ready"
	random_kills "$BUNDLE" "$RANDOM_KILLS"
done
# Every template holds fds: compared with as many ready as before.
for ((i = 0; i < 100; i++)); do
	wait_pools_full
	[[ $(daemon_ready) == "$ready_before" ]] && break
	sleep 0.1
done
fds_after=$(kl_fd_count "$DAEMON_PID")
if ((fds_after > fds_before)); then
	echo "zygote daemon: $fds_before fds with full pools before, $fds_after after" >&2
	LEAKS=$((LEAKS + fds_after - fds_before))
fi
zpid=$DAEMON_PID
stop_daemon
if left=$(spares_of "$zpid") && [[ -n $left ]]; then
	echo "spare cgroups of the stopped daemon $zpid: $left" >&2
	LEAKS=$((LEAKS + $(wc -l <<<"$left")))
	rmdir $left 2>/dev/null
fi
unset FORKBOX_ZYGOTE FORKBOX_SOCKET
report create-step-kills-zygote "$RUNS" "$LEAKS"

# 4. The issue's case, cold: creates SIGKILLed at random moments.
RUNS=0 LEAKS=0
for ((r = 0; r < ROUNDS; r++)); do random_kills "$BUNDLE" "$RANDOM_KILLS"; done
report create-random-kills "$RUNS" "$LEAKS"

# 5. The zygote daemon SIGKILLed with creates in flight: every create succeeds (warm, or
# cold once the daemon is gone); the next daemon removes the dead one's spare cgroups.
RUNS=0 LEAKS=0
export FORKBOX_ZYGOTE=1 FORKBOX_SOCKET=$SOCK
for ((r = 0; r < ROUNDS; r++)); do
	start_daemon || exit 2
	wait_pools_full
	killed=$DAEMON_PID
	ids=()
	for ((i = 0; i < 10; i++)); do
		ids+=("${KL_PREFIX}d$((++SEQ))")
		( fb create --bundle "$BUNDLE" "${ids[-1]}" </dev/null >/dev/null 2>"$KL_TAG/dcreate-$i.err" 3>&- 4>&- ||
			echo "create failed: $(cat "$KL_TAG/dcreate-$i.err")" >"$KL_TAG/dfail-$i" ) &
		((i == 4)) && kill -KILL "$killed"
	done
	wait
	DAEMON_PID=
	RUNS=$((RUNS + 10))
	for f in "$KL_TAG"/dfail-*; do
		[[ -e $f ]] || continue
		cat "$f" >&2
		LEAKS=$((LEAKS + 1))
		rm -f "$f"
	done
	for id in "${ids[@]}"; do
		[[ $(fb state "$id" 2>/dev/null | jq -r .status) == created ]] || { echo "$id not created after the daemon's kill" >&2; LEAKS=$((LEAKS + 1)); }
		fb delete --force "$id"
	done
	check_clean "creates while the zygote daemon was SIGKILLed"
	start_daemon || exit 2
	sleep 0.3
	if left=$(spares_of "$killed") && [[ -n $left ]]; then
		echo "spares of the SIGKILLed daemon $killed left by the next: $left" >&2
		LEAKS=$((LEAKS + $(wc -l <<<"$left")))
		rmdir $left 2>/dev/null
	fi
	zpid=$DAEMON_PID
	stop_daemon
	if left=$(spares_of "$zpid") && [[ -n $left ]]; then
		echo "spares of the stopped daemon $zpid: $left" >&2
		LEAKS=$((LEAKS + $(wc -l <<<"$left")))
		rmdir $left 2>/dev/null
	fi
done
unset FORKBOX_ZYGOTE FORKBOX_SOCKET
report zygote-daemon-kills "$RUNS" "$LEAKS"

# 6. The daemon SIGKILLed (alone, or with its sandbox service) with sessions open and runs
# in flight: clients get an error, and the next daemon's service removes what the dead
# one left (cgroups, and through the namespaces going, tmpfs and overlay mounts).
RUNS=0 LEAKS=0
SB_SOCK=$KL_TAG/sandbox.sock
sandbox_cgroups() { compgen -G "/sys/fs/cgroup/*/forkbox-sandbox/$1-*" || true; }
for ((r = 0; r < ROUNDS; r++)); do
	for how in daemon group; do
		"$KL_FORKBOX" daemon --socket "$SB_SOCK" </dev/null >/dev/null 2>>"$KL_TAG/sbdaemon.err" 3>&- 4>&- &
		sbd=$!
		for ((i = 0; i < 50; i++)); do
			"$KL_FORKBOX" sandbox --socket "$SB_SOCK" --info >"$KL_TAG/info.json" 2>/dev/null && break
			sleep 0.1
		done
		svc=$(jq -r .service_pid "$KL_TAG/info.json" 2>/dev/null)
		marker=$((90000000 + RANDOM))
		sid=$("$KL_FORKBOX" sandbox --socket "$SB_SOCK" create 2>/dev/null)
		"$KL_FORKBOX" sandbox --socket "$SB_SOCK" --session "$sid" -- sh -c "(sleep $marker &); true" >/dev/null 2>&1
		clients=()
		for ((i = 0; i < 3; i++)); do
			timeout -s KILL 30 "$KL_FORKBOX" sandbox --socket "$SB_SOCK" -- sleep $((marker + 1)) \
				</dev/null >/dev/null 2>"$KL_TAG/sbclient-$i.err" 3>&- 4>&- &
			clients+=($!)
		done
		for ((i = 0; i < 100; i++)); do
			(($(pgrep -f -c -- "^sleep $((marker + 1))$" || true) >= 3)) && break
			sleep 0.05
		done
		if [[ $how == group ]]; then kill -KILL "$sbd" "$svc"; else kill -KILL "$sbd"; fi
		wait "$sbd" 2>/dev/null
		RUNS=$((RUNS + 1))
		for i in "${!clients[@]}"; do
			st=0
			wait "${clients[$i]}" || st=$?
			if ((st == 0 || st == 137)) || [[ ! -s $KL_TAG/sbclient-$i.err ]]; then
				echo "sandbox client in flight ($how killed): status $st, message '$(cat "$KL_TAG/sbclient-$i.err")'" >&2
				LEAKS=$((LEAKS + 1))
			fi
		done
		for ((i = 0; i < 50; i++)); do
			pgrep -f -- "sleep $marker" >/dev/null || pgrep -f -- "sleep $((marker + 1))" >/dev/null || break
			sleep 0.1
		done
		if left=$(pgrep -a -f -- "^sleep $((marker))|^sleep $((marker + 1))"); then
			echo "sandbox processes alive after the daemon's kill ($how): $left" >&2
			LEAKS=$((LEAKS + $(wc -l <<<"$left")))
			pkill_list=$(awk '{print $1}' <<<"$left")
			kill -KILL $pkill_list 2>/dev/null
		fi
		# The next daemon: serves, and its service removes the dead one's cgroups.
		"$KL_FORKBOX" daemon --socket "$SB_SOCK" </dev/null >/dev/null 2>>"$KL_TAG/sbdaemon.err" 3>&- 4>&- &
		sbd=$!
		ok=0
		for ((i = 0; i < 50; i++)); do
			out=$(timeout -s KILL 30 "$KL_FORKBOX" sandbox --socket "$SB_SOCK" -- echo again 2>/dev/null) && [[ $out == again ]] && { ok=1; break; }
			sleep 0.1
		done
		((ok)) || { echo "the next sandbox daemon does not serve" >&2; LEAKS=$((LEAKS + 1)); }
		for ((i = 0; i < 50; i++)); do
			[[ -z $(sandbox_cgroups "$svc") ]] && break
			sleep 0.1
		done
		if left=$(sandbox_cgroups "$svc") && [[ -n $left ]]; then
			echo "cgroups of the killed sandbox service $svc left by the next: $left" >&2
			LEAKS=$((LEAKS + $(wc -l <<<"$left")))
			rmdir $left 2>/dev/null
		fi
		newsvc=$("$KL_FORKBOX" sandbox --socket "$SB_SOCK" --info 2>/dev/null | jq -r .service_pid)
		kill -TERM "$sbd"
		wait "$sbd" 2>/dev/null
		sleep 0.2
		if left=$(sandbox_cgroups "$newsvc") && [[ -n $left ]]; then
			echo "cgroups left by the next daemon's service $newsvc after SIGTERM: $left" >&2
			LEAKS=$((LEAKS + $(wc -l <<<"$left")))
			rmdir $left 2>/dev/null
		fi
		if left=$(grep -F -- "$KL_TAG" /proc/self/mountinfo); then
			echo "mounts left: $left" >&2
			LEAKS=$((LEAKS + $(wc -l <<<"$left")))
		fi
	done
done
report sandbox-daemon-kills "$RUNS" "$LEAKS"

exit "$FAILED"
