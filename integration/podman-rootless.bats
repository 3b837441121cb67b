#!/usr/bin/env bats
# Rootless podman drives the runtime (issue 13): the unprivileged test user of
# rootless-helpers.bash (fbrootless) runs `podman --runtime /abs/path/forkbox run --rm IMG
# echo hi`, `run -d`, `exec`, `stop` and `rm`, with a podman configuration of its own:
# storage (vfs) and run root under this file's tmpdir, owned by the user; file events;
# the cgroupfs manager; no network (Debian 12's podman 4.3 has no pasta, and none is
# needed); no pulls: the image is imported offline from base_rootfs (helpers.bash), its
# layer owned by uid 0.
#
# The --runtime is a wrapper script named like the runtime ($PM_RUNTIME, basename of
# $FORKBOX) that appends one line per call to $PM_CALLS (verb, euid, $USER,
# $XDG_RUNTIME_DIR, the caller's uid map, the binary it execs, argv) and execs $FORKBOX:
# it shows which binary podman called, as whom, and that the runtime's state went to
# $XDG_RUNTIME_DIR/<runtime> ($RL_STATE: .../forkbox, .../runc for runc).
#
# rootless-helpers.bash provides the user, as_user (clean environment) and rl_setup_file
# ($RL_XDG, $RL_HOME, $RL_STATE); its per-test rl_teardown is not used: it empties
# $XDG_RUNTIME_DIR after each test, and podman's state there must live for the file.
#
# podman starts a pause process (catatonit -P, running as the user) that holds its user
# namespace; its pid file is in this file's podman tmp dir, so it is this file's and
# teardown_file kills it by pid, with whatever else still runs in its user namespace.
#
# Validate against runc: FORKBOX=/usr/sbin/runc bats integration/podman-rootless.bats

load helpers
load rootless-helpers

setup_file() {
	command -v podman >/dev/null && command -v conmon >/dev/null ||
		skip "podman and conmon are not installed (make deps installs them)"
	command -v setpriv >/dev/null || skip "setpriv (util-linux) is missing"
	rl_setup_file
	have_newidmap || skip "newuidmap/newgidmap missing (Debian package uidmap): rootless podman needs them"
	export PM_DIR=$RL_DIR/podman
	export PM_IMAGE=localhost/fbtest-busybox:latest
	export PM_CALLS=$PM_DIR/runtime-calls.log
	export PM_RUNTIME
	PM_RUNTIME=$PM_DIR/bin/$(basename "$FORKBOX")
	mkdir -p "$PM_DIR"/{bin,graph,run,tmp,image-tmp,volumes}
	local exe
	exe=$(readlink -f "$FORKBOX")
	cat >"$PM_RUNTIME" <<-EOF
		#!/bin/sh
		# podman's --runtime for podman-rootless.bats: log the call, run $exe.
		verb= skip=
		for a in "\$@"; do
			if [ -n "\$skip" ]; then skip=; continue; fi
			case \$a in
			--log | --log-format | --root | --criu | --rootless) skip=1 ;;
			-*) ;;
			*) verb=\$a; break ;;
			esac
		done
		read -r m1 m2 m3 </proc/self/uid_map
		printf 'verb=%s euid=%s user=%s xdg=%s uidmap=%s exe=%s args=%s\n' "\$verb" "\$(/usr/bin/id -u)" \\
			"\${USER-<unset>}" "\${XDG_RUNTIME_DIR-<unset>}" "\$m1 \$m2 \$m3" "$exe" "\$*" >>"$PM_CALLS"
		exec "$exe" "\$@"
	EOF
	chmod 0755 "$PM_RUNTIME"
	: >"$PM_CALLS"
	cat >"$PM_DIR/containers.conf" <<-EOF
		[containers]
		netns = "none"
		log_driver = "k8s-file"

		[engine]
		cgroup_manager = "cgroupfs"
		events_logger = "file"
		events_logfile_path = "$PM_DIR/events.log"
		image_copy_tmp_dir = "$PM_DIR/image-tmp"
		pull_policy = "never"
		runtime_supports_json = ["forkbox", "crun", "runc"]
		tmp_dir = "$PM_DIR/tmp"
		volume_path = "$PM_DIR/volumes"
	EOF
	cat >"$PM_DIR/storage.conf" <<-EOF
		[storage]
		driver = "vfs"
		graphroot = "$PM_DIR/graph"
		runroot = "$PM_DIR/run"
	EOF
	: >"$PM_DIR/registries.conf"
	tar -C "$(base_rootfs)" --owner=0 --group=0 --numeric-owner -cf "$PM_DIR/rootfs.tar" .
	chown -R "$RL_UID:$RL_GID" "$PM_DIR"
	chmod 0644 "$PM_CALLS"
	# podman makes every parent of a container's storage --x for all (libpod's
	# makeAccessible) and fails on those it cannot chmod: the bats tmpdirs are root's
	# (0700; rl_open_path gives others x only).
	local d=$PM_DIR
	while [[ $d != / && $d != /tmp ]]; do
		chmod a+x "$d"
		d=$(dirname "$d")
	done
	pm import --change 'CMD ["/bin/sh"]' "$PM_DIR/rootfs.tar" "$PM_IMAGE" >/dev/null ||
		{ echo "podman import as $RL_USER failed" >&2; return 1; }
}

teardown_file() {
	[[ -n ${PM_DIR:-} && -d $PM_DIR ]] || return 0
	local -
	set +e
	pm rm --all --force --time 0 >/dev/null 2>&1 </dev/null
	# The store as the user: vfs layers hold files of the user's subordinate ids, which
	# only root of podman's user namespace may remove.
	pm unshare rm -rf "$PM_DIR/graph" "$PM_DIR/run" >/dev/null 2>&1 </dev/null
	# What still runs in podman's user namespace (a conmon, a container) is this file's,
	# and so is the pause process; nothing else of the user is touched.
	local pause userns f pid
	pause=$(pm_pause_pid)
	if [[ -n $pause ]]; then
		userns=$(readlink "/proc/$pause/ns/user")
		for f in /proc/[0-9]*; do
			pid=${f#/proc/}
			[[ $pid != "$pause" && $pid != "$$" ]] || continue
			[[ $(readlink "$f/ns/user" 2>/dev/null) == "$userns" ]] && kill -KILL "$pid" 2>/dev/null
		done
		kill -TERM "$pause" 2>/dev/null
		wait_for_pid_gone "$pause" 5 2>/dev/null || kill -KILL "$pause" 2>/dev/null
	fi
	rm -rf "$PM_DIR"
	return 0
}

setup() {
	: >"$PM_CALLS"
}

teardown() {
	pm rm --all --force --time 0 >/dev/null 2>&1 </dev/null || true
}

# pm ARGS...: podman as the test user with this file's private configuration and storage.
# fds 3 and 4 (bats' own) are closed: conmon would inherit them and hold bats open.
pm() {
	as_user env CONTAINERS_CONF="$PM_DIR/containers.conf" CONTAINERS_STORAGE_CONF="$PM_DIR/storage.conf" \
		CONTAINERS_REGISTRIES_CONF="$PM_DIR/registries.conf" TMPDIR="$PM_DIR/image-tmp" \
		podman --root "$PM_DIR/graph" --runroot "$PM_DIR/run" --tmpdir "$PM_DIR/tmp" \
		--storage-driver vfs --events-backend file --cgroup-manager cgroupfs \
		--runtime "$PM_RUNTIME" "$@" 3>&- 4>&-
}

# pm_run ARGS...: podman run without network and pulls.
pm_run() {
	pm run --network none --pull=never "$@"
}

# pm_field CTR FORMAT: podman inspect --format FORMAT CTR
pm_field() {
	pm inspect --format "$2" "$1"
}

# pm_pause_pid: podman's pause process for this file (its pid file, checked: a process
# of the test user running catatonit -P).
pm_pause_pid() {
	local pid
	pid=$(cat "$PM_DIR/tmp/pause.pid" 2>/dev/null) || return 0
	[[ $pid =~ ^[0-9]+$ ]] || return 0
	[[ $(stat -c %u "/proc/$pid" 2>/dev/null) == "$RL_UID" ]] || return 0
	[[ $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == "catatonit -P " ]] || return 0
	echo "$pid"
}

# wait_for_log CTR TEXT [SECONDS]: poll `podman logs` until a line is TEXT.
wait_for_log() {
	local ctr=$1 text=$2 secs=${3:-20} i
	for ((i = 0; i < secs * 10; i++)); do
		pm logs "$ctr" 2>/dev/null | grep -qxF -- "$text" && return 0
		sleep 0.1
	done
	echo "container $ctr: no line '$text' in its logs after ${secs}s; it has:" >&2
	pm logs "$ctr" >&2
	return 1
}

# calls_of ID: the verbs of the runtime calls naming container ID, in order.
calls_of() {
	grep -F -- "$1" "$PM_CALLS" | sed -n 's/^verb=\([^ ]*\) .*/\1/p'
}

# assert_calls_as_user: every logged runtime call ran $FORKBOX as root of a user namespace
# mapping root to the test user, with the user's XDG_RUNTIME_DIR.
assert_calls_as_user() {
	local exe line n=0
	exe=$(readlink -f "$FORKBOX")
	[[ -s $PM_CALLS ]] || fail "podman made no runtime call through $PM_RUNTIME"
	while IFS= read -r line; do
		n=$((n + 1))
		[[ $line == *" euid=0 "* ]] || fail "call $n not as euid 0: $line"
		[[ $line == *" uidmap=0 $RL_UID 1 "* ]] || fail "call $n not in a user namespace of $RL_USER: $line"
		[[ $line == *" xdg=$RL_XDG "* ]] || fail "call $n without the user's XDG_RUNTIME_DIR: $line"
		[[ $line == *" exe=$exe "* ]] || fail "call $n ran another binary: $line"
	done <"$PM_CALLS"
}

@test "rootless podman takes the wrapper as its OCI runtime and vfs as its storage" {
	run --separate-stderr pm info --format '{{.Host.Security.Rootless}} {{.Host.OCIRuntime.Path}} {{.Store.GraphDriverName}}'
	assert_success_stderr
	assert_output "true $PM_RUNTIME vfs"
	run --separate-stderr pm images --format '{{.Repository}}:{{.Tag}}'
	assert_success_stderr
	assert_output "$PM_IMAGE"
}

@test "run --rm IMG echo hi prints hi, through the runtime called as the user" {
	run --separate-stderr pm_run --rm "$PM_IMAGE" echo hi
	assert_success_stderr
	assert_output hi
	assert_calls_as_user
	local id
	id=$(sed -n 's/^verb=create .* args=.* \([0-9a-f]\{64\}\)$/\1/p' "$PM_CALLS" | head -n 1)
	[[ -n $id ]] || fail "no create call: $(cat "$PM_CALLS")"
	run calls_of "$id"
	assert_line --index 0 create
	assert_line --index 1 start
	assert_line delete
	# --rm: nothing of the container stays in the runtime's state root.
	[ ! -e "$RL_STATE/$id" ]
	run --separate-stderr pm ps -a -q
	assert_output ""
}

@test "exit codes pass through: 0, 1, 3 and 137 for a process killed by SIGKILL" {
	run --separate-stderr pm_run --rm "$PM_IMAGE" true
	assert_success_stderr
	run pm_run --rm "$PM_IMAGE" false
	assert_failure 1
	run pm_run --rm "$PM_IMAGE" sh -c 'exit 3'
	assert_failure 3
	# pid 1 is immune to its own SIGKILL, so a child dies and the shell passes it on.
	run pm_run --rm "$PM_IMAGE" sh -c 'sh -c "kill -9 \$\$"; exit $?'
	assert_failure 137
}

@test "a missing command exits 127 with the runtime's message" {
	run -127 --separate-stderr pm_run --rm "$PM_IMAGE" nosuchcmd
	assert_failure 127
	assert_stderr_contains 'executable file not found in $PATH'
}

@test "run -d, exec, stop and rm, with the state in \$XDG_RUNTIME_DIR/<runtime>" {
	run --separate-stderr pm_run -d --name life "$PM_IMAGE" fbhelper sigwait
	assert_success_stderr
	local id=$output pid
	wait_for_log life ready
	run pm_field life '{{.State.Status}}'
	assert_output running
	pid=$(pm_field life '{{.State.Pid}}')
	# The container's root is the user on the host.
	run awk '/^Uid:/ {print $2}' "/proc/$pid/status"
	assert_output "$RL_UID"
	# The runtime's state: in the user's XDG_RUNTIME_DIR, not /run; the runtime, as
	# podman runs it (root of podman's user namespace, USER unset), reports the pid
	# podman recorded.
	[ -d "$RL_STATE/$id" ] || fail "no $RL_STATE/$id; $RL_XDG has: $(ls -A "$RL_XDG")"
	[ ! -e "/run/$(basename "$RL_STATE")/$id" ]
	run --separate-stderr pm unshare env -u USER "$FORKBOX" state "$id"
	assert_success_stderr
	[[ $(jq -r .status <<<"$output") == running ]] || fail "state: $output"
	[[ $(jq -r .pid <<<"$output") == "$pid" ]] || fail "state pid is not $pid: $output"
	run --separate-stderr pm exec life fbhelper echo from exec
	assert_success_stderr
	assert_output "from exec"
	run pm exec life sh -c 'exit 6'
	assert_failure 6
	run --separate-stderr pm stop life
	assert_success_stderr
	run pm_field life '{{.State.Status}} {{.State.ExitCode}}'
	assert_output "exited 0"
	run pm logs life
	assert_line SIGTERM
	run --separate-stderr pm rm life
	assert_success_stderr
	run --separate-stderr pm ps -a -q
	assert_output ""
	[ ! -e "$RL_STATE/$id" ]
	wait_for_pid_gone "$pid"
	assert_calls_as_user
	run calls_of "$id"
	assert_line --index 0 create
	assert_line --index 1 start
	assert_line exec
	assert_line kill
	assert_line delete
}

@test "rm --force of a running container kills it and removes its runtime state" {
	run --separate-stderr pm_run -d --name doomed "$PM_IMAGE" sleep 100
	assert_success_stderr
	local id=$output pid
	pid=$(pm_field doomed '{{.State.Pid}}')
	[ -d "$RL_STATE/$id" ]
	run --separate-stderr pm rm --force --time 0 doomed
	assert_success_stderr
	wait_for_pid_gone "$pid"
	[ ! -e "$RL_STATE/$id" ]
	run --separate-stderr pm ps -a -q
	assert_output ""
	run calls_of "$id"
	assert_line delete
}

@test "run -t and exec -t get a terminal, run -i gets stdin" {
	run --separate-stderr pm_run --rm -t "$PM_IMAGE" tty
	assert_success_stderr
	assert_output --regexp '^/dev/pts/[0-9]+'
	run --separate-stderr pm_run -d --name termy "$PM_IMAGE" sleep 100
	assert_success_stderr
	run --separate-stderr pm exec -t termy tty
	assert_success_stderr
	assert_output --regexp '^/dev/pts/[0-9]+'
	run --separate-stderr pm_run --rm -i "$PM_IMAGE" sh -c 'cat; echo done' <<<piped
	assert_success_stderr
	assert_equal "${lines[*]}" "piped done"
}

@test "--userns keep-id: the runtime maps the user's own uid inside a nested user namespace" {
	run --separate-stderr pm_run --rm --userns keep-id "$PM_IMAGE" sh -c 'id -u; id -g; cat /proc/self/uid_map'
	assert_success_stderr
	assert_line --index 0 "$RL_UID"
	assert_line --index 1 "$RL_GID"
	# From inside podman's namespace (root = the user, 1.. = its subordinate ids), the
	# user (0 there) is mapped to its own uid.
	assert_line --regexp "^ +$RL_UID +0 +1\$"
	# podman hands the runtime a spec with a user namespace and these mappings; the
	# runtime still runs as root of podman's own.
	assert_calls_as_user
}

@test "--pid host: the container shares the host's pid namespace and /proc" {
	# Root of podman's user namespace cannot mount a procfs for the host's pid namespace:
	# podman hands the runtime an rbind of /proc (a procfs source) for /proc.
	run --separate-stderr pm_run --rm --pid host "$PM_IMAGE" sh -c 'readlink /proc/self/ns/pid; grep -c " /proc proc " /proc/mounts'
	assert_success_stderr
	assert_line --index 0 "$(readlink /proc/self/ns/pid)"
	[[ ${lines[1]} -ge 1 ]] || fail "no procfs at /proc: $output"
}

@test "nothing is left behind: containers, runtime state, processes of the user" {
	pm rm --all --force --time 0 >/dev/null 2>&1 </dev/null
	run --separate-stderr pm ps -a -q
	assert_success_stderr
	assert_output ""
	local left=() ids id
	# Every container this file made, from podman's events log.
	mapfile -t ids < <(jq -r 'select(.Type == "container") | .ID' "$PM_DIR/events.log" | sort -u)
	[[ ${#ids[@]} -gt 0 ]] || fail "no containers in the events log"
	for id in "${ids[@]}"; do
		[[ -e $RL_STATE/$id ]] && left+=("runtime state $RL_STATE/$id")
		[[ -d $PM_DIR/graph/vfs-containers/$id ]] && left+=("storage of $id")
	done
	if [[ -d $RL_STATE ]]; then
		for id in "$RL_STATE"/*; do
			[[ -e $id ]] && left+=("runtime state $id")
		done
	fi
	# Processes in podman's user namespace (containers, conmon, exec sessions), but for
	# the pause process itself.
	local pause userns f pid
	pause=$(pm_pause_pid)
	[[ -n $pause ]] || fail "no pause process of podman's (pid file $PM_DIR/tmp/pause.pid)"
	userns=$(readlink "/proc/$pause/ns/user")
	for f in /proc/[0-9]*; do
		pid=${f#/proc/}
		[[ $pid == "$pause" ]] && continue
		[[ $(readlink "$f/ns/user" 2>/dev/null) == "$userns" ]] || continue
		pid_alive "$pid" && left+=("process $pid: $(tr '\0' ' ' <"$f/cmdline" 2>/dev/null)")
	done
	[[ ${#left[@]} -eq 0 ]] || fail "left behind: ${left[*]}"
}
