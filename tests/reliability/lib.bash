# shellcheck shell=bash
# Shared by the reliability scenarios (tests/reliability/*.sh): a private work directory with
# a copy of the binary, a busybox bundle, counters of what a run could leave behind, and the
# one-line report of each scenario.
#
# What is counted is what this run can be blamed for, since other tests share the host:
#   - processes: those whose executable is this run's copy of forkbox (an init that never
#     reached its execve, a daemon), and those in this run's cgroups (every container process);
#   - cgroup directories under /sys/fs/cgroup/*/$REL_CG (this run's cgroup parent) and those
#     named after this run's ids;
#   - mounts in the caller's table: the scenarios run in a private mount namespace (run.sh
#     enters one with unshare), so nobody else's mounts are counted;
#   - files under this run's state roots.
# Everything is removed by rel_cleanup (trap EXIT), pass or fail.

set -u -o pipefail

REL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$REL_DIR/../.." && pwd)
FORKBOX_SRC=${FORKBOX:-$REPO_DIR/build/forkbox}
FBHELPER_SRC=${FBHELPER:-$REPO_DIR/build/fbhelper}
BUSYBOX=${BUSYBOX:-/bin/busybox}
REL_QUICK=${REL_QUICK:-0}

# This run's tag: cgroup parent, id prefix, work directory.
REL_TAG=fbrel-$$
REL_CG=/$REL_TAG
REL_WORK=$(mktemp -d "/tmp/$REL_TAG.XXXXXX")
chmod 0711 "$REL_WORK"
FB=$REL_WORK/forkbox
cp "$FORKBOX_SRC" "$FB"
REL_FAILED=0
REL_MOUNTS=()   # mount points to unmount at exit
REL_PIDS=()     # background processes to kill at exit
REL_ROOTS=()    # state roots whose containers are deleted at exit

rel_cleanup() {
	local p r id m
	for p in "${REL_PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	for r in "${REL_ROOTS[@]}"; do
		[[ -d $r ]] || continue
		for id in $("$FB" --root "$r" list -q 2>/dev/null); do
			"$FB" --root "$r" delete --force "$id" >/dev/null 2>&1
		done
	done
	# Processes of this run's copy of the binary (daemons, inits) that survived.
	for p in $(rel_own_pids); do kill -KILL "$p" 2>/dev/null; done
	rel_remove_cgroups
	for ((m = ${#REL_MOUNTS[@]} - 1; m >= 0; m--)); do
		umount -l "${REL_MOUNTS[m]}" 2>/dev/null
	done
	rm -rf "$REL_WORK"
}
trap rel_cleanup EXIT

# rel_own_pids: processes running this run's copy of forkbox.
rel_own_pids() {
	local d exe
	for d in /proc/[0-9]*; do
		exe=$(readlink "$d/exe" 2>/dev/null) || continue
		[[ $exe == "$FB" || $exe == "$FB (deleted)" ]] && echo "${d#/proc/}"
	done
}

# rel_cgroup_dirs: this run's cgroup directories, every hierarchy.
rel_cgroup_dirs() {
	local h
	for h in /sys/fs/cgroup/* /sys/fs/cgroup; do
		[[ -d $h$REL_CG ]] && find "$h$REL_CG" -type d
		[[ -d $h/forkbox ]] && find "$h/forkbox" -maxdepth 1 -type d -name "$REL_TAG-*"
	done 2>/dev/null | sort -u
}

# rel_cgroup_pids: processes in this run's cgroups.
rel_cgroup_pids() {
	local d
	for d in $(rel_cgroup_dirs); do
		cat "$d/cgroup.procs" 2>/dev/null
	done | sort -un
}

rel_remove_cgroups() {
	local d p i
	for i in 1 2 3; do
		for p in $(rel_cgroup_pids); do kill -KILL "$p" 2>/dev/null; done
		# Deepest first.
		for d in $(rel_cgroup_dirs | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-); do
			[[ -f $d/freezer.state ]] && echo THAWED >"$d/freezer.state" 2>/dev/null
			rmdir "$d" 2>/dev/null
		done
		[[ -z $(rel_cgroup_dirs) ]] && return
		sleep 0.2
	done
}

# rel_snapshot ROOT...: one line of counters: processes, cgroup dirs, mounts, files under
# the roots. Compared with rel_compare.
rel_snapshot() {
	local procs cgs mnts files=0 r
	procs=$( (rel_own_pids; rel_cgroup_pids) | sort -u | grep -cvx -e "$$" -e "${REL_EXCLUDE_PIDS:-none}")
	# A zygote daemon's spares (.zygote-*) come and go with its pool: soak.sh checks them apart.
	if ((${REL_SKIP_SPARES:-0})); then
		cgs=$(rel_cgroup_dirs | grep -cv '/\.zygote-[0-9]*-[0-9]*$')
	else
		cgs=$(rel_cgroup_dirs | wc -l)
	fi
	mnts=$(wc -l </proc/self/mountinfo)
	for r in "$@"; do
		# The seccomp cache (.seccomp=*) is bounded (32 entries): not counted.
		[[ -d $r ]] && files=$((files + $(find "$r" -mindepth 1 -not -name '.seccomp=*' | wc -l)))
	done
	echo "procs=$procs cgroups=$cgs mounts=$mnts files=$files"
}

# rel_compare BEFORE AFTER: prints the counters that grew ("procs+2 mounts+1"), nothing when
# none did; returns the number of things leaked.
rel_compare() {
	local before=$1 after=$2 kv k b a out="" leaks=0
	for kv in $after; do
		k=${kv%%=*}
		a=${kv#*=}
		b=$(tr ' ' '\n' <<<"$before" | sed -n "s/^$k=//p")
		if ((a > b)); then
			out+="$k+$((a - b)) "
			leaks=$((leaks + a - b))
		fi
	done
	[[ -n $out ]] && echo "${out% }"
	return $((leaks > 255 ? 255 : leaks))
}

# rel_report NAME RUNS LEAKS DEFECTS [DETAIL...]: the scenario's line; a leak or a defect
# (crash, hang, unclear error, torn state) fails the run.
rel_report() {
	local name=$1 runs=$2 leaks=$3 defects=$4
	shift 4
	local verdict=ok
	((leaks || defects)) && verdict=FAIL && REL_FAILED=1
	printf '%-34s runs=%-6s leaks=%-3s defects=%-3s %s %s\n' "$name" "$runs" "$leaks" "$defects" "$verdict" "$*"
}

# rel_count N_FULL N_QUICK: a scenario's count in this mode.
rel_count() {
	if ((REL_QUICK)); then echo "$2"; else echo "$1"; fi
}

# rel_base_rootfs: busybox with /bin/fbhelper, once per run.
rel_base_rootfs() {
	local base=$REL_WORK/rootfs-base
	if [[ ! -d $base ]]; then
		mkdir -p "$base"/{bin,dev,proc,sys,etc,tmp,root}
		chmod 1777 "$base/tmp"
		cp "$BUSYBOX" "$base/bin/busybox"
		chroot "$base" /bin/busybox --install -s /bin
		cp "$FBHELPER_SRC" "$base/bin/fbhelper"
		echo 'root:x:0:0:root:/root:/bin/sh' >"$base/etc/passwd"
		echo 'root:x:0:' >"$base/etc/group"
	fi
	echo "$base"
}

# rel_bundle DIR [ARGS...]: a bundle with forkbox's spec, no terminal, cgroupsPath
# $REL_CG/NAME (NAME: the bundle directory's name), process ARGS (default fbhelper true).
rel_bundle() {
	local dir=$1
	shift
	[[ $# -gt 0 ]] || set -- /bin/fbhelper true
	mkdir -p "$dir"
	cp -a "$(rel_base_rootfs)" "$dir/rootfs"
	rm -f "$dir/config.json"
	"$FB" spec --bundle "$dir"
	rel_jq "$dir/config.json" '.process.terminal = false | .process.args = $ARGS.positional
		| .linux.cgroupsPath = $cg' --arg cg "$REL_CG/$(basename "$dir")" --args -- "$@"
}

# rel_jq FILE FILTER [JQ ARGS...]: rewrite FILE with a jq filter.
rel_jq() {
	local file=$1 filter=$2
	shift 2
	jq "$filter" "$file" "$@" >"$file.tmp" && mv -f "$file.tmp" "$file"
}

# rel_tmpfs DIR SIZE [OPTIONS]: a tmpfs of SIZE (e.g. 64k) on DIR, unmounted at exit.
rel_tmpfs() {
	mkdir -p "$1"
	mount -t tmpfs -o "size=$2,mode=0711${3:+,$3}" "rel-$REL_TAG" "$1" || return 1
	REL_MOUNTS+=("$1")
}

# rel_daemon SOCKET LOG [DAEMON ARGS...]: a forkbox daemon in the background (pid in
# REL_DAEMON_PID), up once it answers --stats.
rel_daemon() {
	local sock=$1 log=$2 i
	shift 2
	"$FB" --log "$log" daemon --socket "$sock" "$@" </dev/null >/dev/null 2>>"$log.err" &
	REL_DAEMON_PID=$!
	REL_PIDS+=("$REL_DAEMON_PID")
	for ((i = 0; i < 200; i++)); do
		[[ -S $sock ]] && "$FB" daemon --socket "$sock" --stats >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	echo "daemon on $sock did not come up: $(cat "$log.err")" >&2
	return 1
}

# rel_stop_daemon PID: SIGTERM, then wait (SIGKILL after 10 s).
rel_stop_daemon() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	return 0
}

# rel_fds PID / rel_rss_kb PID: a process's open fds and resident set.
rel_fds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
rel_rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# rel_clear_error FILE: the runtime's stderr says what failed in one "forkbox: ..." line,
# without a crash's signature.
rel_clear_error() {
	grep -q '^forkbox: ' "$1" && ! grep -qiE 'terminate called|Segmentation|Aborted|core dumped|AddressSanitizer|stack overflow' "$1"
}
