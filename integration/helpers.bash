# shellcheck shell=bash
# Shared helpers for forkbox's bats integration tests.
#
# Every test gets its own state root ($ROOT), bundle ($BUNDLE) and container id ($CID)
# under $BATS_TEST_TMPDIR, and fb_teardown removes whatever a test left behind, pass or
# fail: containers (delete --force), stray container processes, mounts, network
# namespaces made with make_netns.
#
# Point the tests at another runtime to validate them: FORKBOX=/usr/sbin/runc bats integration/
# Tests of forkbox-only behaviour call skip_if_runc.

bats_require_minimum_version 1.5.0 # run -N, run --separate-stderr

load /usr/lib/bats/bats-support/load
load /usr/lib/bats/bats-assert/load

INTEGRATION_DIR=$(cd "$BATS_TEST_DIRNAME" && pwd)
REPO_DIR=$(cd "$INTEGRATION_DIR/.." && pwd)
FORKBOX=${FORKBOX:-$REPO_DIR/build/forkbox}
FBHELPER=${FBHELPER:-$REPO_DIR/build/fbhelper}
BUSYBOX=${BUSYBOX:-/bin/busybox}

# A hung runtime fails its test instead of the whole run (bats >= 1.7 reads this).
BATS_TEST_TIMEOUT=${BATS_TEST_TIMEOUT:-120}

# Per-test state. $$ is the test's own process, so ids do not collide with a concurrent
# run (cgroup paths are global).
ROOT=$BATS_TEST_TMPDIR/root
BUNDLE=$BATS_TEST_TMPDIR/bundle
CID=fbt-$$-${BATS_TEST_NUMBER:-0}
FB_NETNS=()
FB_PIDS=() # helper processes a test started in the background; killed by fb_teardown

# open_path_for_others: the bats tmpdirs are 0700; a container whose root is not host
# root (user namespace) must still be able to reach its rootfs.
open_path_for_others() {
	local d=$BUNDLE
	while [[ $d != / && $d != /tmp ]]; do
		chmod o+x "$d"
		d=$(dirname "$d")
	done
}

# runtime ARGS...: the runtime under test with this test's state root.
runtime() {
	"$FORKBOX" --root "$ROOT" "$@"
}

# is_runc: true when the tests are pointed at runc (to validate them).
is_runc() {
	if [[ -z ${FB_IS_RUNC:-} ]]; then
		FB_IS_RUNC=no
		if [[ $(basename "$FORKBOX") == runc* ]] || "$FORKBOX" --version 2>/dev/null | head -n 1 | grep -q '^runc'; then
			FB_IS_RUNC=yes
		fi
	fi
	[[ $FB_IS_RUNC == yes ]]
}

# skip_if_runc REASON: for forkbox-only behaviour, or a runc bug (see
# ../shared/conformance/KNOWN.md); the reason is printed in the TAP output.
skip_if_runc() {
	if is_runc; then
		skip "runc: $*"
	fi
}

# skip_until_issue N REASON: behaviour a later forkbox issue builds (the README lists it);
# the test still runs against runc, so it stays honest until then.
skip_until_issue() {
	local issue=$1
	shift
	if ! is_runc; then
		skip "forkbox: $* (issue #$issue)"
	fi
}

# fbhelper_path: the static test payload; compiled into the run's tmpdir when the build
# has not made it (e.g. the tests are pointed at runc before forkbox builds).
fbhelper_path() {
	if [[ -x $FBHELPER ]]; then
		echo "$FBHELPER"
		return
	fi
	local built=$BATS_RUN_TMPDIR/fbhelper
	if [[ ! -x $built ]]; then
		if ! cc -static -O2 -Wall -Wextra -o "$built.tmp.$$" "$INTEGRATION_DIR/helper/fbhelper.c" >&2; then
			echo "cannot build fbhelper: run 'make build/fbhelper'" >&2
			return 1
		fi
		mv -f "$built.tmp.$$" "$built"
	fi
	echo "$built"
}

# base_rootfs: a busybox rootfs with /bin/fbhelper, built once per bats run and copied
# by make_bundle (tests may change their copy).
base_rootfs() {
	local base=$BATS_RUN_TMPDIR/rootfs-base
	if [[ ! -d $base ]]; then
		local helper tmp=$BATS_RUN_TMPDIR/rootfs-base.tmp.$$
		helper=$(fbhelper_path) || return 1
		[[ -x $BUSYBOX ]] || { echo "$BUSYBOX missing: apt-get install busybox-static" >&2; return 1; }
		rm -rf "$tmp"
		mkdir -p "$tmp"/{bin,dev,proc,sys,etc,tmp,root}
		chmod 1777 "$tmp/tmp"
		cp "$BUSYBOX" "$tmp/bin/busybox"
		# chroot so the symlinks point at /bin/busybox, not at the host path of the copy.
		chroot "$tmp" /bin/busybox --install -s /bin || return 1
		cp "$helper" "$tmp/bin/fbhelper"
		echo 'root:x:0:0:root:/root:/bin/sh' >"$tmp/etc/passwd"
		echo 'root:x:0:' >"$tmp/etc/group"
		mv -T "$tmp" "$base" 2>/dev/null || rm -rf "$tmp"
	fi
	echo "$base"
}

# make_bundle DIR [ARGS...]: a bundle in DIR: rootfs (busybox + /bin/fbhelper) and the
# runtime's own `spec` template with terminal=false and process.args=ARGS
# (default: /bin/fbhelper true).
make_bundle() {
	local dir=$1
	shift
	[[ $# -gt 0 ]] || set -- /bin/fbhelper true
	local base
	base=$(base_rootfs) || return 1
	mkdir -p "$dir"
	cp -a "$base" "$dir/rootfs"
	rm -f "$dir/config.json"
	runtime spec --bundle "$dir" || { echo "make_bundle: '$FORKBOX spec --bundle $dir' failed" >&2; return 1; }
	jq_edit "$dir/config.json" '.process.terminal = false | .process.args = $ARGS.positional' --args -- "$@"
}

# setup_bundle [ARGS...]: make_bundle "$BUNDLE" ARGS...
setup_bundle() {
	make_bundle "$BUNDLE" "$@"
}

# jq_edit FILE FILTER [JQ ARGS...]: rewrite FILE with a jq filter.
jq_edit() {
	local file=$1 filter=$2
	shift 2
	if ! jq "$filter" "$file" "$@" >"$file.tmp"; then
		rm -f "$file.tmp"
		echo "jq failed on $file: $filter" >&2
		return 1
	fi
	mv -f "$file.tmp" "$file"
}

# update_config FILTER [JQ ARGS...]: edit $BUNDLE/config.json with jq, e.g.
#   update_config '.process.env += ["FOO=bar"]'
#   update_config '.hostname = $h' --arg h myhost
update_config() {
	jq_edit "$BUNDLE/config.json" "$@"
}

# set_args ARGS...: process.args of $BUNDLE.
set_args() {
	update_config '.process.args = $ARGS.positional' --args -- "$@"
}

# run_helper SUBCOMMAND [ARGS...]: `run` a container from $BUNDLE whose process is
# /bin/fbhelper SUBCOMMAND ARGS, like `run --separate-stderr`: sets $status, $output,
# $lines and $stderr.
run_helper() {
	set_args /bin/fbhelper "$@" || return
	run --separate-stderr runtime run --bundle "$BUNDLE" "$CID"
}

# run_sh SCRIPT: the same with /bin/sh -c SCRIPT (busybox sh).
run_sh() {
	set_args /bin/sh -c "$1" || return
	run --separate-stderr runtime run --bundle "$BUNDLE" "$CID"
}

# remove_namespace TYPE: drop one namespace from linux.namespaces.
remove_namespace() {
	update_config '.linux.namespaces |= map(select(.type != $t))' --arg t "$1"
}

# Detached containers keep the runtime's stdio, so their output must go to files: a
# pipe (bats `run`, $(...)) would wait for the container to exit. The runtime's own
# error message lands in the same file as the container's stderr.
#   $BATS_TEST_TMPDIR/ID.out  stdout of the container
#   $BATS_TEST_TMPDIR/ID.err  stderr of the runtime and the container
# fds 3 and 4 (bats' own) are closed so a leaking runtime cannot hang bats.

# create_container ID [CREATE FLAGS...]: `create --bundle $BUNDLE FLAGS ID`.
create_container() {
	local id=$1
	shift
	runtime create --bundle "$BUNDLE" "$@" "$id" \
		</dev/null >"$BATS_TEST_TMPDIR/$id.out" 2>"$BATS_TEST_TMPDIR/$id.err" 3>&- 4>&-
}

# run_detached ID [RUN FLAGS...]: `run --detach --bundle $BUNDLE FLAGS ID`.
run_detached() {
	local id=$1
	shift
	runtime run --detach --bundle "$BUNDLE" "$@" "$id" \
		</dev/null >"$BATS_TEST_TMPDIR/$id.out" 2>"$BATS_TEST_TMPDIR/$id.err" 3>&- 4>&-
}

# try_create [CREATE ARGS...]: `runtime create ARGS` for a create expected to fail, like
# `run --separate-stderr` ($status, $output, $stderr) but through files: were the create
# to succeed, its waiting init would hold a `run` pipe open and hang the test.
try_create() {
	status=0
	runtime create "$@" </dev/null >"$BATS_TEST_TMPDIR/try.out" 2>"$BATS_TEST_TMPDIR/try.err" 3>&- 4>&- ||
		status=$?
	output=$(cat "$BATS_TEST_TMPDIR/try.out")
	stderr=$(cat "$BATS_TEST_TMPDIR/try.err")
}

# container_out ID / container_err ID: what create_container/run_detached captured.
container_out() { cat "$BATS_TEST_TMPDIR/$1.out"; }
container_err() { cat "$BATS_TEST_TMPDIR/$1.err"; }

# container_status ID: the status field of `state ID`.
container_status() {
	local json
	json=$(runtime state "$1") || return 1
	jq -r .status <<<"$json"
}

# container_pid ID: the pid field of `state ID`.
container_pid() {
	local json
	json=$(runtime state "$1") || return 1
	jq -r .pid <<<"$json"
}

# wait_for_status ID STATUS [SECONDS]: poll `state` until status is STATUS.
wait_for_status() {
	local id=$1 want=$2 secs=${3:-10} i st=
	for ((i = 0; i < secs * 20; i++)); do
		st=$(container_status "$id" 2>/dev/null) || st=
		[[ $st == "$want" ]] && return 0
		sleep 0.05
	done
	echo "container $id: status '$st' after ${secs}s, wanted '$want'" >&2
	return 1
}

# wait_for_output ID TEXT [SECONDS]: poll the container's stdout file for a line TEXT.
wait_for_output() {
	local id=$1 text=$2 secs=${3:-10} i
	for ((i = 0; i < secs * 20; i++)); do
		grep -qxF -- "$text" "$BATS_TEST_TMPDIR/$id.out" 2>/dev/null && return 0
		sleep 0.05
	done
	echo "container $id: no line '$text' in its stdout after ${secs}s; it has:" >&2
	cat "$BATS_TEST_TMPDIR/$id.out" "$BATS_TEST_TMPDIR/$id.err" >&2 2>/dev/null
	return 1
}

# wait_for_file FILE [SECONDS]: poll until FILE exists and is not empty.
wait_for_file() {
	local file=$1 secs=${2:-10} i
	for ((i = 0; i < secs * 20; i++)); do
		[[ -s $file ]] && return 0
		sleep 0.05
	done
	echo "$file: still missing or empty after ${secs}s" >&2
	return 1
}

# pid_alive PID: the process exists and is not a zombie.
pid_alive() {
	local st
	st=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
	[[ -n $st && $st != Z && $st != X ]]
}

# wait_for_pid_gone PID [SECONDS]
wait_for_pid_gone() {
	local pid=$1 secs=${2:-10} i
	for ((i = 0; i < secs * 20; i++)); do
		pid_alive "$pid" || return 0
		sleep 0.05
	done
	echo "process $pid still alive after ${secs}s" >&2
	return 1
}

# make_sub_cgroups CGPATH NAME: the cgroup NAME under CGPATH (a container's cgroupsPath) in
# every hierarchy that has CGPATH, a v1 cpuset one given its parent's CPUs and memory nodes;
# prints how many it made.
make_sub_cgroups() {
	local cg=$1 name=$2 d n=0
	for d in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
		[ -d "$d$cg" ] || continue
		mkdir "$d$cg/$name" || return 1
		if [ -f "$d$cg/$name/cpuset.cpus" ]; then
			cat "$d$cg/cpuset.cpus" >"$d$cg/$name/cpuset.cpus"
			cat "$d$cg/cpuset.mems" >"$d$cg/$name/cpuset.mems"
		fi
		n=$((n + 1))
	done
	echo "$n"
}

# run_with_sub_cgroup_process CGPATH: a running container of $CID (sleeping) in the cgroup
# CGPATH, and an exec'd sleep in its sub-cgroup "sub" (made in every hierarchy); that
# process's pid in $SUB_PID.
run_with_sub_cgroup_process() {
	local cg=$1 made
	update_config '.linux.cgroupsPath = $p' --arg p "$cg"
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	made=$(make_sub_cgroups "$cg" sub)
	[ "$made" -gt 0 ] || fail "no cgroup directory for $cg"
	runtime exec --detach --cgroup sub --pid-file "$BATS_TEST_TMPDIR/exec.pid" "$CID" /bin/fbhelper sleep 100 \
		</dev/null >/dev/null 2>&1 3>&- 4>&-
	SUB_PID=$(cat "$BATS_TEST_TMPDIR/exec.pid")
}

# assert_stderr_contains TEXT: after `run --separate-stderr`, $stderr contains TEXT.
assert_stderr_contains() {
	if [[ $stderr != *"$1"* ]]; then
		fail "stderr does not contain '$1'
stderr: $stderr
stdout: $output"
	fi
}

# assert_stderr_not_empty: after `run --separate-stderr`, some message was printed.
assert_stderr_not_empty() {
	if [[ -z ${stderr//[[:space:]]/} ]]; then
		fail "expected an error message on stderr, got none (stdout: $output)"
	fi
}

# make_netns NAME: `ip netns add NAME`, removed by fb_teardown.
make_netns() {
	ip netns add "$1" || return 1
	FB_NETNS+=("$1")
}

# fb_teardown: call from each file's teardown(). Never fails the test by itself.
fb_teardown() {
	# Without a per-test tmpdir the paths below would be host paths: touch nothing.
	[[ -n ${BATS_TEST_TMPDIR:-} && -d $BATS_TEST_TMPDIR ]] || return 0
	# Best effort: one failed step (bats runs this under errexit) must not skip the rest.
	local -
	set +e
	local id ids=() pid f
	if [[ -d $ROOT ]]; then
		mapfile -t ids < <(runtime list -q 2>/dev/null)
		# A runtime whose `list` is broken still leaves one directory per container.
		for id in "$ROOT"/*; do
			[[ -d $id ]] && ids+=("$(basename "$id")")
		done
		mapfile -t ids < <(printf '%s\n' "${ids[@]}" | sort -u)
		for id in "${ids[@]}"; do
			[[ -n $id ]] && runtime delete --force "$id" >/dev/null 2>&1 </dev/null 3>&- 4>&-
		done
	fi
	for pid in "${FB_PIDS[@]}"; do
		kill -KILL "$pid" 2>/dev/null
	done
	FB_PIDS=()
	# What the runtime failed to delete: processes whose root is inside this test's
	# tmpdir (containers), and runtime processes given a --root in it (a foreground
	# `run`, or a container init that has not exec'd yet and still shows the runtime's
	# command line).
	for f in $(find /proc -mindepth 2 -maxdepth 2 -name root -lname "$BATS_TEST_TMPDIR/*" 2>/dev/null) \
		$(grep -l -s -a -P -- "--root\\x00\\Q$BATS_TEST_TMPDIR/\\E" /proc/[0-9]*/cmdline); do
		pid=${f#/proc/}
		pid=${pid%%/*}
		[[ $pid != "$$" ]] && kill -KILL "$pid" 2>/dev/null
	done
	# Mounts left under the tmpdir (deepest first), or bats cannot remove it.
	local mnt mnts
	mapfile -t mnts < <(awk -v d="$BATS_TEST_TMPDIR/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r)
	for mnt in "${mnts[@]}"; do
		umount -l "$mnt" 2>/dev/null
	done
	# Empty cgroups a failed delete left (every id a test uses starts with $CID).
	find /sys/fs/cgroup -maxdepth 5 -depth -type d -name "$CID*" -exec rmdir {} + 2>/dev/null
	for id in "${FB_NETNS[@]}"; do
		ip netns delete "$id" 2>/dev/null
	done
	FB_NETNS=()
	rm -rf "$ROOT"
	return 0
}

# Default per-test hooks; a file that needs more defines its own and calls these.
setup() {
	setup_bundle
}

teardown() {
	fb_teardown
}
