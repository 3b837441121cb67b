# The sandbox suites' shared setup (sandbox.bats, sandbox-sessions.bats): one root daemon
# per file, started by setup_file from a copy of the binary and stopped by teardown_file,
# which checks that it left no cgroup and no mount behind; a directory per test; the
# commands' wrappers.
#
# The directories are under /tmp and mode 0711/0755, not under the bats tmpdirs (0700
# root): a socket path must fit in sun_path, and a root daemon's sandbox (root of a user
# namespace mapped at host uid 1000000000) may need to traverse them.

load helpers
load rootless-helpers

setup_file() {
	# bats 1.8 cannot skip from setup_file: setup() skips every test with this reason.
	export SB_SKIP=
	if is_runc; then
		SB_SKIP="runc: the sandbox service is forkbox's own"
	elif ! command -v python3 >/dev/null || ! command -v setpriv >/dev/null || ! command -v jq >/dev/null; then
		SB_SKIP="python3, jq or setpriv (util-linux) is missing"
	fi
	[[ -z $SB_SKIP ]] || return 0
	export SB_BASE
	SB_BASE=$(mktemp -d /tmp/fb-sandbox.XXXXXX)
	chmod 0711 "$SB_BASE"
	export SB_FB=$SB_BASE/forkbox
	cp "$FORKBOX" "$SB_FB"
	chmod 0755 "$SB_FB"
	mkdir -m 0711 "$SB_BASE/root"
	export SOCK=$SB_BASE/root/sandbox.sock
	"$SB_FB" daemon --socket "$SOCK" </dev/null >/dev/null 2>"$SB_BASE/root/daemon.err" 3>&- 4>&- &
	export DAEMON_PID=$!
	local i
	for ((i = 0; i < 50; i++)); do
		"$SB_FB" sandbox --socket "$SOCK" --info >"$SB_BASE/root/info.json" 2>/dev/null && break
		sleep 0.1
	done
	[[ -s $SB_BASE/root/info.json ]] || {
		echo "the root daemon did not answer --info within 5 s: $(cat "$SB_BASE/root/daemon.err")" >&2
		return 1
	}
	export SERVICE_PID
	SERVICE_PID=$(jq -r .service_pid "$SB_BASE/root/info.json")
	[[ $SERVICE_PID =~ ^[0-9]+$ ]] || { echo "no service_pid in $(cat "$SB_BASE/root/info.json")" >&2; return 1; }
}

teardown_file() {
	[[ -n ${SB_BASE:-} && -d $SB_BASE ]] || return 0
	local problems=() before=
	[[ -n ${SERVICE_PID:-} ]] && before=$(compgen -G "/sys/fs/cgroup/memory/forkbox-sandbox/$SERVICE_PID-*" | tr '\n' ' ')
	if [[ -n ${DAEMON_PID:-} ]]; then
		kill -TERM "$DAEMON_PID" 2>/dev/null
		wait "$DAEMON_PID" 2>/dev/null
		wait_for_pid_gone "$DAEMON_PID" 10 || {
			problems+=("the root daemon $DAEMON_PID survived SIGTERM")
			kill -KILL "$DAEMON_PID" 2>/dev/null
		}
	fi
	if [[ -n ${SERVICE_PID:-} ]]; then
		[[ ! -e /proc/$SERVICE_PID ]] || problems+=("the sandbox service $SERVICE_PID outlived the daemon")
		local left
		left=$(service_cgroups "$SERVICE_PID")
		if [[ -n $left ]]; then
			problems+=("cgroups left behind: $(tr '\n' ' ' <<<"$left")"
				"(busy: $(busy_cgroups "$left" | tr '\n' ' '); memory cgroups before SIGTERM: $before)")
			# Empty ones removed, so the host stays clean.
			# shellcheck disable=SC2086 # one directory a word
			rmdir $left 2>/dev/null
		fi
	fi
	local mnts
	mnts=$(grep -F -- "$SB_BASE" /proc/self/mountinfo || true)
	[[ -z $mnts ]] || problems+=("mounts left behind: $mnts")
	if ((${#problems[@]})); then
		printf '%s\n' "${problems[@]}" "the daemon's stderr:" >&2
		cat "$SB_BASE/root/daemon.err" >&2
		rm -rf "$SB_BASE"
		return 1
	fi
	rm -rf "$SB_BASE"
}

# sandbox_setup: every sandbox test's setup (a file's own setup calls it first).
sandbox_setup() {
	[[ -z $SB_SKIP ]] || skip "$SB_SKIP"
	# A directory of this test's own, which a sandbox's root (an unprivileged host uid) can
	# traverse; removed by teardown.
	TDIR=$SB_BASE/t$BATS_TEST_NUMBER
	rm -rf "$TDIR"
	mkdir -m 0755 "$TDIR"
	EXTRA_PIDS=()
	EXTRA_CGROUPS=() # cgroup directories a test made: removed with what is below them
}

setup() {
	sandbox_setup
}

teardown() {
	local pid
	for pid in "${EXTRA_PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null
	done
	for pid in "${EXTRA_PIDS[@]}"; do
		wait_for_pid_gone "$pid" 10 >/dev/null 2>&1 || kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null || true
	done
	EXTRA_PIDS=()
	remove_cgroup_trees "${EXTRA_CGROUPS[@]}"
	EXTRA_CGROUPS=()
	if [[ -n ${TDIR:-} ]]; then
		# Mounts a test made under its directory (deepest first).
		local m
		for m in $(awk -v d="$TDIR" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r); do
			umount "$m" 2>/dev/null || true
		done
		rm -rf "$TDIR"
	fi
	return 0
}

# remove_cgroup_trees DIR...: each cgroup directory and those below it, deepest first, the
# processes in them killed (a cgroup with a process cannot be removed).
remove_cgroup_trees() {
	local top d pid i
	for top in "$@"; do
		[[ -d $top ]] || continue
		for d in $(find "$top" -depth -type d); do
			for pid in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
			for ((i = 0; i < 50; i++)); do
				rmdir "$d" 2>/dev/null && break
				sleep 0.1
			done
		done
	done
	return 0
}

# service_cgroups SERVICE_PID: the sandbox cgroups a service made (<pid>-<n>), one a line.
service_cgroups() {
	compgen -G "/sys/fs/cgroup/*/forkbox-sandbox/$1-*" || true
}

# busy_cgroups DIRS: those of DIRS (one a line) that still hold a process.
busy_cgroups() {
	local d
	for d in $1; do
		# (cgroupfs files have no size: read them.)
		[[ -n $(cat "$d/cgroup.procs" 2>/dev/null) ]] && echo "$d"
	done
	return 0
}

# sb [OPTIONS] -- CMD...: `forkbox sandbox` on the root daemon; a hang fails the test
# (timeout exits 137 through SIGKILL, never 124, the sandbox's deadline code).
sb() {
	timeout -s KILL 60 "$SB_FB" sandbox --socket "$SOCK" "$@"
}

# sb_on SOCKET [OPTIONS] -- CMD...: the same on another daemon's socket.
sb_on() {
	local sock=$1
	shift
	timeout -s KILL 60 "$SB_FB" sandbox --socket "$sock" "$@"
}

# no_process_matching TEXT [SECONDS]: poll until no host process has TEXT in its command
# line (every process, any user); fails naming what is left.
no_process_matching() {
	local text=$1 secs=${2:-5} i left=
	for ((i = 0; i < secs * 10; i++)); do
		left=$(pgrep -a -f -- "$text") || return 0
		sleep 0.1
	done
	echo "still running after ${secs}s: $left" >&2
	return 1
}

# wait_for_process COMM TEXT [SECONDS]: poll until a process named COMM has TEXT in its
# command line; prints its pid (the client's own command line names TEXT too: COMM tells
# them apart).
wait_for_process() {
	local comm=$1 text=$2 secs=${3:-10} i pid
	for ((i = 0; i < secs * 10; i++)); do
		for pid in $(pgrep -f -- "$text"); do
			if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]]; then
				echo "$pid"
				return 0
			fi
		done
		sleep 0.1
	done
	echo "no $comm process with '$text' after ${secs}s" >&2
	return 1
}

# start_daemon_as_root SOCKET [DAEMON ARGS...]: another root daemon, stopped by teardown;
# waits until it answers --info. Sets LAST_DAEMON.
start_daemon_as_root() {
	local sock=$1
	shift
	"$SB_FB" daemon --socket "$sock" "$@" </dev/null >/dev/null 2>"$sock.err" 3>&- 4>&- &
	LAST_DAEMON=$!
	EXTRA_PIDS+=("$LAST_DAEMON")
	wait_for_socket "$sock" root
}

# wait_for_socket SOCKET root|user|socket [ERRFILE]: until the daemon on SOCKET answers
# --info (to root or to the test user), or, for a daemon that serves no sandboxes (whose
# --info fails by design), until the socket exists; at most 5 s. ERRFILE (default
# SOCKET.err): the daemon's stderr, shown when it does not come up.
wait_for_socket() {
	local sock=$1 who=$2 err=${3:-$1.err} i
	for ((i = 0; i < 50; i++)); do
		if [[ $who == user ]]; then
			as_user "$SB_FB" sandbox --socket "$sock" --info >/dev/null 2>&1 && return 0
		elif [[ $who == socket ]]; then
			[[ -S $sock ]] && return 0
		else
			"$SB_FB" sandbox --socket "$sock" --info >/dev/null 2>&1 && return 0
		fi
		sleep 0.1
	done
	fail "the daemon on $sock did not answer within 5 s: $(cat "$err" 2>/dev/null)"
}

# user_daemon_dirs: the test user, and its daemon's directory $UDIR (mode 0700, with its
# XDG_RUNTIME_DIR and home); sets USOCK, the daemon's socket there.
user_daemon_dirs() {
	rl_setup_user || fail "cannot make the test user"
	export RL_PATH=/usr/sbin:/usr/bin:/sbin:/bin # as_user's PATH
	UDIR=$TDIR/user
	RL_XDG=$UDIR/xdg RL_HOME=$UDIR/home
	mkdir -p "$RL_XDG" "$RL_HOME"
	chown -R "$RL_UID:$RL_GID" "$UDIR"
	chmod 0700 "$UDIR" "$RL_XDG" "$RL_HOME"
	USOCK=$UDIR/sandbox.sock
}

# start_user_daemon: a daemon of the test user (fbrootless) on $USOCK, in $UDIR (its own,
# mode 0700, with its XDG_RUNTIME_DIR); stopped by teardown. Sets USER_DAEMON.
start_user_daemon() {
	user_daemon_dirs
	# Its stderr goes to a file root opens (before the exec), outside the user's directory.
	(as_user_exec "$SB_FB" daemon --socket "$USOCK" </dev/null >/dev/null 2>"$TDIR/user-daemon.err" 3>&- 4>&-) &
	USER_DAEMON=$!
	EXTRA_PIDS+=("$USER_DAEMON")
	wait_for_socket "$USOCK" user "$TDIR/user-daemon.err"
}

# usb [OPTIONS] -- CMD...: `forkbox sandbox` as the test user on its daemon.
usb() {
	as_user timeout -s KILL 60 "$SB_FB" sandbox --socket "$USOCK" "$@"
}

# fork_bomb_py: python that forks until fork fails (the children sleep) and prints how
# many children it made.
FORK_BOMB_PY='
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(1000)
            os._exit(0)
        n += 1
except OSError:
    pass
print(n)
'

# --- exit codes ---
