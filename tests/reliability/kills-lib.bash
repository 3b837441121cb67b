# shellcheck shell=bash
# Shared by integration/kills.bats and tests/reliability/kills.sh: stopping a forkbox
# process at a trace mark (FORKBOX_TEST_STOP_AT, libforkbox/base/trace.hpp), killing it,
# and counting what a run left behind that can be told apart from other runs on the host:
# state directories under its own --root, cgroups named after its own ids, processes that
# were its creates and their children or that name its root, mounts under its own tmpdir.
#
# The caller sets KL_FORKBOX (the binary), KL_ROOT (its state root), KL_TAG (a directory
# the run's bundles and roots live under) and KL_PREFIX (every container id starts with it).

# The marks `create` passes on the cold path, in order (libforkbox/container/create.cpp).
KL_CREATE_MARKS=(
	"create: verb" "create: config read" "create: config parsed" "create: planned" "create: zygote asked"
	"create: seccomp ready" "create: state dir made" "create: cgroup layout" "create: zygote answered"
	"create: state written" "create: cgroups placed" "create: cgroups made" "create: clone" "create: go"
	"create: cloned" "create: init ready" "create: state recorded" "create: done"
)
# The marks container init passes while create waits for it (libforkbox/container/init.cpp).
# Not "init: ready sent" nor "init: recorded": create does not wait for init there, so
# it may be gone before init stops; "create: init ready" and later cover those steps.
KL_INIT_MARKS=(
	"init: first" "init: signals reset" "init: cloned" "init: go" "init: namespaces set" "init: mounts done"
	"init: rootfs final" "init: ready"
)
# With a namespace joined by path: the intermediate process joins it and forks init
# (CLONE_PARENT, so init is create's child too), and create learns init's pid.
KL_INTERMEDIATE_MARKS=("intermediate: forked" "create: init pid" "init: forked")
# On a v1 or hybrid host, cold: create makes the v1 cgroups after the clone, init joins them.
KL_V1_LATE_MARKS=("create: v1 cgroup dirs made" "create: v1 cgroups made" "init: v1 cgroups joined")
# kl_has_v1: this host has a cgroup v1 hierarchy.
kl_has_v1() { grep -q ' - cgroup ' /proc/self/mountinfo; }
# With a new user namespace: create writes init's id maps.
KL_USERNS_MARKS=("create: id maps written")
# Past these, create has recorded init in state.json: init lives on (until delete).
KL_RECORDED_MARKS=("create: done")

kl_recorded_mark() {
	local m
	for m in "${KL_RECORDED_MARKS[@]}"; do [[ $1 == "$m" ]] && return 0; done
	return 1
}

# kl_descendants PID: its children, grandchildren, ...
kl_descendants() {
	local c
	for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
		echo "$c"
		kl_descendants "$c"
	done
}

# kl_at_mark PID: stopped by the hook (state T), or a pid namespace's init waiting in it
# (sleeping, SIGCONT caught: nothing else in forkbox catches it).
kl_at_mark() {
	local stat state cgt
	stat=$(cat /proc/"$1"/stat 2>/dev/null) || return 1
	state=${stat##*) }
	state=${state%% *}
	[[ $state == T ]] && return 0
	[[ $state == S ]] || return 1
	cgt=$(awk '/^SigCgt:/ {print $2}' /proc/"$1"/status 2>/dev/null) || return 1
	(((16#$cgt & 16#20000) != 0))
}

# kl_wait_at_mark PID [SECONDS]: prints the pid (PID or a descendant) stopped at the mark;
# fails when PID exits first or the time is up.
kl_wait_at_mark() {
	local pid=$1 secs=${2:-10} i p
	for ((i = 0; i < secs * 100; i++)); do
		for p in "$pid" $(kl_descendants "$pid"); do
			if kl_at_mark "$p"; then
				echo "$p"
				return 0
			fi
		done
		[[ -d /proc/$pid ]] || return 1
		# A zombie create (exited, not yet waited for) will not reach the mark.
		[[ $(awk '/^State:/ {print $2}' /proc/"$pid"/status 2>/dev/null) != Z ]] || return 1
		sleep 0.01
	done
	return 1
}

# kl_alive PID...: prints those alive (not zombies).
kl_alive() {
	local p st
	for p in "$@"; do
		st=$(awk '/^State:/ {print $2}' /proc/"$p"/status 2>/dev/null) || continue
		[[ -n $st && $st != Z && $st != X ]] && echo "$p"
	done
}

# kl_wait_gone SECONDS PID...: until none is alive; prints those still alive on failure.
kl_wait_gone() {
	local secs=$1 i left
	shift
	for ((i = 0; i < secs * 20; i++)); do
		left=$(kl_alive "$@")
		[[ -z $left ]] && return 0
		sleep 0.05
	done
	echo "$left"
	return 1
}

# kl_leaks: one line per thing left behind by this run (nothing: clean).
kl_leaks() {
	local d f pid
	# State directories (the root also holds the seccomp cache: files, not directories).
	for d in "$KL_ROOT"/*/; do
		[[ -d $d ]] && echo "state dir ${d%/}"
	done
	# A temporary file of the seccomp cache's (the cache entries themselves stay).
	for f in "$KL_ROOT"/.*.tmp; do
		[[ -e $f ]] && echo "temporary file $f"
	done
	# Cgroups named after our ids, in every hierarchy (v1, v2, under any parent).
	find /sys/fs/cgroup -mindepth 1 -maxdepth 6 -type d -name "$KL_PREFIX*" 2>/dev/null | sed 's/^/cgroup /'
	# Processes: in our cgroups, with our root on their command line (create, or an init
	# that has not exec'd), or rooted in our tree (a container's process).
	{
		grep -l -s -F "/$KL_PREFIX" /proc/[0-9]*/cgroup | cut -d/ -f3
		grep -l -s -a -F -- "$KL_ROOT" /proc/[0-9]*/cmdline | cut -d/ -f3
		for f in $(find /proc -mindepth 2 -maxdepth 2 -name root -lname "$KL_TAG/*" 2>/dev/null); do
			pid=${f#/proc/}
			echo "${pid%%/*}"
		done
	} | sort -un | while read -r pid; do
		[[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
		[[ -n $(kl_alive "$pid") ]] && echo "process $pid $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | cut -c1-120)"
	done
	# Mounts of ours in the host's table.
	awk -v t="$KL_TAG/" 'index($5, t) == 1 || index($4, t) == 1 {print "mount " $5}' /proc/self/mountinfo
	return 0
}

# kl_fd_count PID: open fds of a process (a daemon's, before and after).
kl_fd_count() {
	ls /proc/"$1"/fd 2>/dev/null | wc -l
}

# kl_kill_create_at ID MARK [CREATE ARGS...]: `create ID` stopped at MARK, then SIGKILLed
# (with whatever it had forked let go again, so each goes on as if create had died right
# there). Sets KL_PIDS (create and its descendants at the time). Fails if MARK is never
# reached.
kl_kill_create_at() {
	local id=$1 mark=$2
	shift 2
	FORKBOX_TEST_STOP_AT=$mark "$KL_FORKBOX" --root "$KL_ROOT" create "$@" "$id" \
		</dev/null >/dev/null 2>"$KL_TAG/create-$id.err" 3>&- 4>&- &
	local cpid=$! at
	KL_PIDS=()
	if ! at=$(kl_wait_at_mark "$cpid" 10); then
		kill -KILL "$cpid" 2>/dev/null
		wait "$cpid" 2>/dev/null
		echo "create never stopped at '$mark': $(cat "$KL_TAG/create-$id.err")" >&2
		return 1
	fi
	mapfile -t KL_PIDS < <(echo "$cpid"; kl_descendants "$cpid")
	kill -KILL "$cpid"
	wait "$cpid" 2>/dev/null
	kill -CONT "${KL_PIDS[@]}" 2>/dev/null
	return 0
}
