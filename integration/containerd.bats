#!/usr/bin/env bats
# containerd drives forkbox through its runc shim (containerd-shim-runc-v2), with ctr.
#
# setup_file starts a private containerd (scripts/containerd-private.bash: own root, state,
# sockets and config under one directory, CRI disabled) and imports a busybox + fbhelper
# image built offline (scripts/oci-image.sh). Containers run with
#   ctr run --runc-binary FORKBOX        (the runc v2 shim's BinaryName option)
#   ctr run --runtime io.containerd.runtime.v1.linux   (the config.toml runtime entry)
# and through the CRI plugin (Kubernetes' path) with a config.toml runtime entry "forkbox"
# whose BinaryName is forkbox, driven by integration/helper/cri-client.py (no crictl in Debian).
# Most tests use $FB_WRAPPER as the runc binary: it logs each call to $FB_CALLS and keeps the
# JSON --log of a failed call, so a test can show that forkbox, not the system runc, ran
# the container (ctr silently falls back to runc when a task option is set, e.g. --uidmap).
#
# FORKBOX=/usr/sbin/runc bats integration/containerd.bats runs the same tests with runc.

load helpers

IMAGE=localhost/fb-busybox:latest
PAUSE_IMAGE=localhost/fb-pause:latest
CRI_CLIENT=(/usr/bin/python3 "$INTEGRATION_DIR/helper/cri-client.py")

setup_file() {
	command -v containerd >/dev/null && command -v ctr >/dev/null ||
		skip "containerd is not installed (make deps)"
	# Short: unix socket paths are limited to 108 bytes.
	CTRD_DIR=$(mktemp -d /tmp/fbctrd.XXXXXX)
	export CTRD_DIR
	export CTRD_NS=fbtest-$$
	export FB_CALLS=$CTRD_DIR/forkbox.calls
	export FB_WRAPPER=$CTRD_DIR/forkbox-logged
	export FB_LOGS=$CTRD_DIR/logs
	mkdir -p "$FB_LOGS"
	# The wrapper runs the runtime as a child (not exec) so it can keep the --log file of a
	# failed call: the shim removes the bundle, and the log in it, after a failed create.
	cat >"$FB_WRAPPER" <<EOF
#!/bin/sh
echo "\$*" >>"$FB_CALLS"
"$FORKBOX" "\$@"
rc=\$?
if [ \$rc -ne 0 ]; then
	prev=
	for a in "\$@"; do
		[ "\$prev" = --log ] && cp "\$a" "$FB_LOGS/\$(date +%s%N).json" 2>/dev/null
		prev=\$a
	done
fi
exit \$rc
EOF
	chmod +x "$FB_WRAPPER"
	# shellcheck source=../scripts/containerd-private.bash
	source "$REPO_DIR/scripts/containerd-private.bash"
	export CTRD_CRI_BINARY=$FB_WRAPPER CTRD_CRI_SANDBOX_IMAGE=$PAUSE_IMAGE
	ctrd_start "$CTRD_DIR" "$FORKBOX"
	export CTRD_SOCK CTRD_PID
	local rootfs
	rootfs=$(base_rootfs)
	ctrd_import "$rootfs" "$IMAGE"
	# CRI's images live in the k8s.io namespace; the pod's sandbox waits for a signal.
	CTRD_NS=k8s.io ctrd_import "$rootfs" "$IMAGE"
	CTRD_NS=k8s.io ctrd_import "$rootfs" "$PAUSE_IMAGE" /bin/fbhelper sigwait
}

teardown_file() {
	[[ -n ${CTRD_DIR:-} ]] || return 0
	source "$REPO_DIR/scripts/containerd-private.bash"
	CTRD_NS=k8s.io ctrd_cleanup
	ctrd_stop
	# The cgroup parents named after the namespaces (cgroupsPath /NS/ID); rmdir keeps them
	# if anything else still uses them.
	find /sys/fs/cgroup -maxdepth 2 -depth -type d \( -name "$CTRD_NS" -o -name k8s.io \) -exec rmdir {} + 2>/dev/null
	return 0
}

setup() {
	ID=c$BATS_TEST_NUMBER
}

teardown() {
	source "$REPO_DIR/scripts/containerd-private.bash"
	if [[ -n ${POD:-} ]]; then
		cri stop-pod "$POD" >/dev/null 2>&1
		cri rm-pod "$POD" >/dev/null 2>&1
	fi
	ctrd_cleanup
	fb_teardown
}

# cri VERB ARGS...: a CRI call with the runtime handler "forkbox" (cri-client.py).
cri() {
	"${CRI_CLIENT[@]}" "$CTRD_SOCK" forkbox "$@"
}

# skip_without_cri_client: python3-grpcio missing (make deps installs it).
skip_without_cri_client() {
	/usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null ||
		skip "python3-grpcio is not installed (make deps)"
}

# cri_pid ID: the pid of a CRI container's (or sandbox's) task.
cri_pid() {
	ctr -a "$CTRD_SOCK" -n k8s.io tasks ls | awk -v id="$1" '$1 == id {print $2}'
}

# wait_cri_state ID STATE: poll ContainerStatus until its state is STATE.
wait_cri_state() {
	local i st=
	for ((i = 0; i < 200; i++)); do
		st=$(cri status "$1" | jq -r .state)
		[[ $st == "$2" ]] && return 0
		sleep 0.05
	done
	echo "CRI container $1: state '$st', wanted '$2'" >&2
	return 1
}

# c ARGS...: ctr against the private containerd.
c() {
	ctr -a "$CTRD_SOCK" -n "$CTRD_NS" "$@"
}

# crun ARGS...: `ctr run --rm --runc-binary $FB_WRAPPER ARGS` through bats' run, stderr apart.
# stdin is /dev/null: ctr copies its stdin into the container.
crun() {
	run --separate-stderr c run --rm --runc-binary "$FB_WRAPPER" "$@" </dev/null
}

# crun_d ID ARGS...: `ctr run -d ARGS $IMAGE ID ${CMD[@]}` (output to $BATS_TEST_TMPDIR/ID.out),
# then waits until the task is $WANT (default RUNNING).
crun_d() {
	local id=$1 want=${WANT:-RUNNING}
	shift
	c run -d --runc-binary "$FB_WRAPPER" "$@" "$IMAGE" "$id" "${CMD[@]}" \
		</dev/null >"$BATS_TEST_TMPDIR/$id.out" 2>"$BATS_TEST_TMPDIR/$id.err" 3>&- 4>&- || {
		cat "$BATS_TEST_TMPDIR/$id.err" >&2
		return 1
	}
	wait_task "$id" "$want"
}

# task_status ID: RUNNING, STOPPED, PAUSED, ... from `ctr task ls`.
task_status() {
	c tasks ls | awk -v id="$1" '$1 == id {print $3}'
}

# task_pid ID
task_pid() {
	c tasks ls | awk -v id="$1" '$1 == id {print $2}'
}

# wait_task ID STATUS [SECONDS]
wait_task() {
	local id=$1 want=$2 secs=${3:-10} i st=
	for ((i = 0; i < secs * 20; i++)); do
		st=$(task_status "$id")
		[[ $st == "$want" ]] && return 0
		sleep 0.05
	done
	echo "task $id: status '$st' after ${secs}s, wanted '$want'" >&2
	return 1
}

# forkbox_created ID: the runtime the shim called ran `create` for container ID.
forkbox_created() {
	if ! grep -E -q "(^| )create .*[ ]$1\$" "$FB_CALLS"; then
		echo "no 'create ... $1' call in $FB_CALLS:" >&2
		cat "$FB_CALLS" >&2
		return 1
	fi
}

@test "ctr run --runc-binary forkbox: stdout and exit codes reach ctr" {
	run --separate-stderr c run --rm --runc-binary "$FORKBOX" "$IMAGE" "$ID" /bin/fbhelper echo hello from containerd </dev/null
	assert_success
	assert_output "hello from containerd"
	run --separate-stderr c run --rm --runc-binary "$FORKBOX" "$IMAGE" "$ID" /bin/sh -c 'echo to-stderr >&2; exit 3' </dev/null
	assert_failure 3
	assert_stderr_contains to-stderr
}

@test "the shim calls the runc binary it is given: create, start, delete for one container" {
	crun "$IMAGE" "$ID" /bin/fbhelper true
	assert_success
	forkbox_created "$ID"
	grep -E -q "(^| )start $ID\$" "$FB_CALLS"
	grep -E -q "(^| )delete .*$ID\$" "$FB_CALLS"
	# The shim asks for runc-style JSON logs.
	grep -E "(^| )create .*$ID\$" "$FB_CALLS" | grep -q -- '--log-format json'
}

@test "a container killed by a signal exits 128+N" {
	# The signal comes from outside: pid 1 of a pid namespace ignores its own SIGKILL.
	c run --rm --runc-binary "$FB_WRAPPER" "$IMAGE" "$ID" /bin/fbhelper sleep 100 \
		</dev/null >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" 3>&- 4>&- &
	local pid=$! rc=0
	FB_PIDS+=("$pid")
	wait_task "$ID" RUNNING
	c tasks kill -s SIGKILL "$ID"
	wait "$pid" || rc=$?
	[[ $rc -eq 137 ]] || fail "ctr run exited $rc, wanted 137: $(cat "$BATS_TEST_TMPDIR/err")"
}

@test "a runtime entry in config.toml (runc v1 runtime plugin, runtime = forkbox) runs containers" {
	run --separate-stderr c run --rm --runtime io.containerd.runtime.v1.linux "$IMAGE" "$ID" /bin/fbhelper echo via v1 </dev/null
	assert_success
	assert_output "via v1"
	# forkbox's own error text, not runc's, so forkbox ran it.
	run --separate-stderr c run --rm --runtime io.containerd.runtime.v1.linux "$IMAGE" "$ID" /nosuch </dev/null
	assert_failure
	assert_stderr_contains 'exec: "/nosuch"'
	if ! is_runc; then
		[[ $stderr != *"runc create failed"* ]]
	fi
}

@test "a missing command: forkbox's error reaches ctr through the JSON log" {
	rm -f "$FB_LOGS"/*
	crun "$IMAGE" "$ID" /nosuch/cmd
	assert_failure
	assert_stderr_contains 'OCI runtime create failed'
	assert_stderr_contains 'exec: "/nosuch/cmd": stat /nosuch/cmd: no such file or directory'
	forkbox_created "$ID"
	# The --log file is JSON lines; the last error's msg is what the shim reported.
	local log msg
	log=$(ls "$FB_LOGS"/*.json | head -n 1)
	[[ -s $log ]]
	jq -e -s 'all(.[]; has("level") and has("msg") and has("time"))' "$log"
	msg=$(jq -r -s 'map(select(.level == "error")) | last | .msg' "$log")
	[[ $msg == *'exec: "/nosuch/cmd"'* ]]
	assert_stderr_contains "$msg"

	crun "$IMAGE" "$ID" nosuchcmd
	assert_failure
	assert_stderr_contains 'exec: "nosuchcmd": executable file not found in $PATH'
}

@test "stdin is copied into the container" {
	# ctr closes the container's stdin at EOF only once the task exists (it races when
	# stdin is already at EOF), so the input is written after the task runs.
	{
		wait_task "$ID" RUNNING 20 >/dev/null 2>&1
		echo line one
		echo line two
	} | c run --rm --runc-binary "$FB_WRAPPER" "$IMAGE" "$ID" /bin/fbhelper cat >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err"
	run cat "$BATS_TEST_TMPDIR/out"
	assert_line --index 0 "line one"
	assert_line --index 1 "line two"
	forkbox_created "$ID"
}

@test "ctr run -t: the process gets a terminal (console socket)" {
	# ctr -t wants a terminal of its own: script(1) gives it one.
	run script -qefc "ctr -a $CTRD_SOCK -n $CTRD_NS run --rm -t --runc-binary $FB_WRAPPER $IMAGE $ID /bin/sh -c 'tty; test -t 0 && test -t 1 && echo both-tty'" /dev/null </dev/null
	assert_success
	assert_output --partial "/dev/pts/0"
	assert_output --partial "both-tty"
	forkbox_created "$ID"
}

@test "ctr run -t: what is typed reaches the shell and its exit code comes back" {
	printf 'echo typed-in\nexit 6\n' >"$BATS_TEST_TMPDIR/typed"
	run script -qefc "ctr -a $CTRD_SOCK -n $CTRD_NS run --rm -t --runc-binary $FB_WRAPPER $IMAGE $ID /bin/sh" /dev/null <"$BATS_TEST_TMPDIR/typed"
	assert_failure 6
	# The shell's own echo of the command, then its output on a line of its own.
	assert_line --regexp '^typed-in'
}

@test "run -d, task exec, task kill and task delete" {
	CMD=(/bin/sh -c 'trap "exit 42" TERM; while :; do sleep 0.2; done')
	crun_d "$ID"
	forkbox_created "$ID"
	run --separate-stderr c tasks exec --exec-id e1 "$ID" /bin/fbhelper echo from exec </dev/null
	assert_success
	assert_output "from exec"
	run --separate-stderr c tasks exec --exec-id e2 "$ID" /bin/sh -c 'exit 5' </dev/null
	assert_failure 5
	run c tasks kill "$ID"
	assert_success
	wait_task "$ID" STOPPED
	# The TERM trap (ctr's default signal) set the exit code, which task delete reports.
	run c tasks delete "$ID"
	assert_output --partial "exit code 42"
	if c tasks ls -q | grep -qxF "$ID"; then
		fail "task $ID is still listed after delete"
	fi
}

@test "task exec: --user, --cwd, stdin, -d and kill --exec-id" {
	CMD=(/bin/fbhelper sleep 1000)
	crun_d "$ID"
	run --separate-stderr c tasks exec --exec-id e1 --user 1000:1000 --cwd /tmp "$ID" /bin/sh -c 'id; pwd' </dev/null
	assert_success
	assert_line --index 0 --partial "uid=1000 gid=1000"
	assert_line --index 1 /tmp
	# stdin, written once the exec exists (see the stdin test).
	{
		local i
		for ((i = 0; i < 200; i++)); do
			c tasks ps "$ID" 2>/dev/null | grep -q 'ExecID:e2' && break
			sleep 0.05
		done
		echo into-exec
	} | c tasks exec --exec-id e2 "$ID" /bin/fbhelper cat >"$BATS_TEST_TMPDIR/e2.out"
	[[ $(cat "$BATS_TEST_TMPDIR/e2.out") == into-exec ]]
	# A detached exec shows in task ps under its exec id and is killed by it.
	run c tasks exec -d --exec-id e3 "$ID" /bin/fbhelper sleep 1000 </dev/null
	assert_success
	run c tasks ps "$ID"
	assert_output --partial "ExecID:e3"
	c tasks kill --exec-id e3 -s SIGKILL "$ID"
	for ((i = 0; i < 200; i++)); do
		c tasks ps "$ID" | grep -q 'ExecID:e3' || break
		sleep 0.05
	done
	run c tasks ps "$ID"
	refute_output --partial "ExecID:e3"
	# The container's init is untouched.
	[[ $(task_status "$ID") == RUNNING ]]
	# An exec killed by a signal: 128+N.
	run c tasks exec --exec-id e4 "$ID" /bin/sh -c 'kill -9 $$' </dev/null
	assert_failure 137
}

@test "task exec of a missing command fails with forkbox's error text" {
	CMD=(/bin/fbhelper sleep 100)
	crun_d "$ID"
	run --separate-stderr c tasks exec --exec-id e1 "$ID" /nosuch </dev/null
	assert_failure
	assert_stderr_contains 'OCI runtime exec failed'
	assert_stderr_contains '/nosuch'
	assert_stderr_contains 'no such file or directory'
}

@test "task exec -t gets a terminal" {
	CMD=(/bin/fbhelper sleep 100)
	crun_d "$ID"
	run script -qefc "ctr -a $CTRD_SOCK -n $CTRD_NS tasks exec -t --exec-id e1 $ID /bin/sh -c 'test -t 0 && echo exec-tty'" /dev/null </dev/null
	assert_success
	assert_output --partial exec-tty
}

@test "restart: a stopped task is deleted and started again from the same container" {
	CMD=(/bin/fbhelper echo started)
	WANT=STOPPED crun_d "$ID"
	c tasks delete "$ID"
	# tasks start runs a new task of the existing container (attached, so it waits).
	run --separate-stderr c tasks start "$ID" </dev/null
	assert_success
	assert_output "started"
	c tasks delete "$ID" 2>/dev/null || true
	[[ $(grep -E -c "(^| )create .*$ID\$" "$FB_CALLS") -ge 2 ]]
}

@test "task kill --all reaches every process of the container" {
	CMD=(/bin/sh -c '/bin/fbhelper sleep 1000 & /bin/fbhelper sleep 1000 & wait')
	crun_d "$ID"
	local pids
	# sh + two sleeps, seen through task ps (forkbox ps --format json).
	for ((i = 0; i < 100; i++)); do
		pids=$(c tasks ps "$ID" | awk 'NR > 1 {print $1}')
		[[ $(wc -w <<<"$pids") -ge 3 ]] && break
		sleep 0.05
	done
	[[ $(wc -w <<<"$pids") -ge 3 ]]
	run c tasks kill --all -s SIGKILL "$ID"
	assert_success
	wait_task "$ID" STOPPED
	local pid
	for pid in $pids; do
		wait_for_pid_gone "$pid"
	done
}

@test "task ps lists the container's processes" {
	CMD=(/bin/fbhelper sleep 100)
	crun_d "$ID"
	local pid
	pid=$(task_pid "$ID")
	run c tasks ps "$ID"
	assert_success
	assert_line --index 0 --regexp '^PID +INFO'
	assert_line --regexp "^$pid( |\$)"
}

@test "task pause and resume freeze and thaw the container" {
	CMD=(/bin/fbhelper sleep 100)
	crun_d "$ID"
	local pid
	pid=$(task_pid "$ID")
	run c tasks pause "$ID"
	assert_success
	wait_task "$ID" PAUSED
	[[ $(awk '/^State:/ {print $2}' "/proc/$pid/status") == D || $(cat "/sys/fs/cgroup/freezer/$CTRD_NS/$ID/freezer.state") == FROZEN ]]
	run c tasks resume "$ID"
	assert_success
	wait_task "$ID" RUNNING
	run c tasks exec --exec-id e1 "$ID" /bin/fbhelper true </dev/null
	assert_success
}

@test "--memory-limit lands in the container's memory cgroup" {
	CMD=(/bin/fbhelper sleep 100)
	crun_d "$ID" --memory-limit 67108864
	local dir
	dir=$(awk -F: '$2 == "memory" {print $3}' "/proc/$(task_pid "$ID")/cgroup")
	[[ $dir == */$CTRD_NS/$ID ]]
	run cat "/sys/fs/cgroup/memory$dir/memory.limit_in_bytes"
	assert_output 67108864
}

@test "a container over its --memory-limit is OOM-killed (exit 137, /tasks/oom event)" {
	# The shim watches the container's memory cgroup (found through the pid forkbox wrote).
	c events >"$BATS_TEST_TMPDIR/events" 2>&1 3>&- 4>&- &
	FB_PIDS+=($!)
	# busybox sh doubling a string until the 32 MiB limit kills it.
	crun --memory-limit 33554432 "$IMAGE" "$ID" /bin/sh -c 'a=aaaaaaaaaaaaaaaa; while :; do a=$a$a; done'
	assert_failure 137
	forkbox_created "$ID"
	local i
	for ((i = 0; i < 100; i++)); do
		grep -q "/tasks/oom {\"container_id\":\"$ID\"}" "$BATS_TEST_TMPDIR/events" && return 0
		sleep 0.05
	done
	fail "no /tasks/oom event for $ID: $(cat "$BATS_TEST_TMPDIR/events")"
}

@test "--read-only: the rootfs cannot be written" {
	crun --read-only "$IMAGE" "$ID" /bin/sh -c 'touch /newfile'
	assert_failure
	assert_stderr_contains "Read-only file system"
	crun --read-only "$IMAGE" "$ID" /bin/fbhelper read /proc/self/mountinfo
	assert_success
	assert_line --regexp '^[0-9]+ [0-9]+ [0-9:]+ [^ ]+ / ro[, ]'
}

# cap_bit HEXMASK N: bit N of a capability mask is set.
cap_bit() {
	(((0x$1 >> $2) & 1))
}

@test "capabilities: ctr's default set, --cap-add, --cap-drop and --privileged" {
	crun "$IMAGE" "$ID" /bin/fbhelper status-field CapEff
	assert_success
	local def=$output
	run cap_bit "$def" 21 # CAP_SYS_ADMIN is not in the default set
	assert_failure
	cap_bit "$def" 0 # CAP_CHOWN is
	crun --cap-add CAP_SYS_ADMIN --cap-drop CAP_CHOWN "$IMAGE" "$ID" /bin/fbhelper status-field CapEff
	assert_success
	local added=$output
	cap_bit "$added" 21
	run cap_bit "$added" 0
	assert_failure
	crun --privileged "$IMAGE" "$ID" /bin/fbhelper status-field CapBnd
	assert_success
	assert_output "$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
}

@test "--seccomp: containerd's default profile is loaded; --seccomp-profile a custom one" {
	crun "$IMAGE" "$ID" /bin/fbhelper status-field Seccomp
	assert_success
	assert_output 0
	crun --seccomp "$IMAGE" "$ID" /bin/fbhelper status-field Seccomp
	assert_success
	assert_output 2
	# The default profile refuses unshare(CLONE_NEWUSER)-style escapes: here, keyctl.
	local profile=$BATS_TEST_TMPDIR/seccomp.json
	jq -n '{defaultAction: "SCMP_ACT_ALLOW", architectures: ["SCMP_ARCH_X86_64"],
		syscalls: [{names: ["mkdir", "mkdirat"], action: "SCMP_ACT_ERRNO"}]}' >"$profile"
	crun --seccomp --seccomp-profile "$profile" "$IMAGE" "$ID" /bin/sh -c 'mkdir /tmp/d'
	assert_failure
	assert_stderr_contains "Operation not permitted"
	crun --seccomp --seccomp-profile "$profile" "$IMAGE" "$ID" /bin/fbhelper echo ok
	assert_success
	assert_output ok
}

@test "--mount: bind mounts, read-only and read-write" {
	local share=$BATS_TEST_TMPDIR/share
	mkdir -p "$share"
	echo from-host >"$share/file"
	crun --mount "type=bind,src=$share,dst=/mnt,options=rbind:ro" "$IMAGE" "$ID" /bin/sh -c 'cat /mnt/file; echo x >/mnt/new'
	assert_failure
	assert_output from-host
	assert_stderr_contains "Read-only file system"
	crun --mount "type=bind,src=$share,dst=/mnt,options=rbind:rw" "$IMAGE" "$ID" /bin/sh -c 'echo from-container >/mnt/new'
	assert_success
	[[ $(cat "$share/new") == from-container ]]
	crun --mount "type=tmpfs,src=tmpfs,dst=/scratch,options=size=1m" "$IMAGE" "$ID" /bin/sh -c 'grep " /scratch " /proc/self/mountinfo'
	assert_success
	assert_output --partial tmpfs
}

@test "--device: a host device is created and allowed in the container" {
	[[ -c /dev/fuse ]] || skip "no /dev/fuse on this host"
	crun "$IMAGE" "$ID" /bin/sh -c 'test -e /dev/fuse'
	assert_failure
	crun --device /dev/fuse "$IMAGE" "$ID" /bin/sh -c 'stat -c "%t:%T" /dev/fuse; exec 3<>/dev/fuse && echo opened'
	assert_success
	assert_line --index 0 "$(stat -c '%t:%T' /dev/fuse)"
	assert_line --index 1 opened
}

@test "--privileged: host devices and writable sysfs" {
	crun --privileged "$IMAGE" "$ID" /bin/sh -c 'test -c /dev/kmsg && echo kmsg; grep " /sys " /proc/self/mountinfo'
	assert_success
	assert_line --index 0 kmsg
	assert_line --index 1 --regexp ' /sys rw[, ]'
}

@test "--with-ns network:PATH joins a network namespace by path" {
	local ns=fbctrd-$$-$BATS_TEST_NUMBER
	make_netns "$ns"
	local want
	want="net:[$(stat -L -c %i "/var/run/netns/$ns")]"
	crun --with-ns "network:/var/run/netns/$ns" "$IMAGE" "$ID" /bin/fbhelper readlink /proc/self/ns/net
	assert_success
	assert_output "$want"
	forkbox_created "$ID"
}

@test "user namespaces: uid and gid maps, with forkbox as the runtime" {
	# `ctr run --uidmap` sets a task option that replaces the container's runtime options,
	# BinaryName included, so the shim would call the system runc instead. A whole spec
	# (ctr run --config) with the maps keeps --runc-binary.
	# The rootfs path must be searchable by the container's root (host uid 100000).
	local rootfs=$CTRD_DIR/userns-$ID/rootfs spec=$BATS_TEST_TMPDIR/spec.json
	chmod 711 "$CTRD_DIR"
	mkdir -m 711 -p "$CTRD_DIR/userns-$ID"
	cp -a "$(base_rootfs)" "$rootfs"
	chown -R 100000:100000 "$rootfs"
	c oci spec | jq --arg root "$rootfs" --arg cg "/$CTRD_NS/$ID" '
		.root.path = $root | .linux.cgroupsPath = $cg | .process.terminal = false |
		.process.args = ["/bin/sh", "-c", "cat /proc/self/uid_map /proc/self/gid_map; /bin/fbhelper id; /bin/fbhelper stat /"] |
		.linux.namespaces += [{type: "user"}] |
		.linux.uidMappings = [{containerID: 0, hostID: 100000, size: 65536}] |
		.linux.gidMappings = [{containerID: 0, hostID: 100000, size: 65536}]' >"$spec"
	run --separate-stderr c run --rm --runc-binary "$FB_WRAPPER" --config "$spec" "$ID" </dev/null
	echo "stderr: $stderr"
	rm -rf "$CTRD_DIR/userns-$ID"
	assert_success
	assert_line --index 0 --regexp '^ +0 +100000 +65536$'
	assert_line --index 1 --regexp '^ +0 +100000 +65536$'
	assert_line --index 2 --partial "uid=0 gid=0"
	assert_line --index 3 --regexp '^directory [0-7]+ 0 0$'
	forkbox_created "$ID"
}

@test "CRI: a pod and its containers run with the runtime entry whose BinaryName is forkbox" {
	skip_without_cri_client
	local logs=$BATS_TEST_TMPDIR/logs pod_name=pod$BATS_TEST_NUMBER cid sandbox_pid
	mkdir -p "$logs"
	POD=$(cri run-pod "$pod_name" "$logs")
	forkbox_created "$POD"
	# A container that prints and exits 7: its log (CRI format) and exit code.
	cid=$(cri create "$POD" "$pod_name" "$logs" hello "$IMAGE" /bin/sh -c 'echo hello from a pod; exit 7')
	cri start "$cid"
	forkbox_created "$cid"
	wait_cri_state "$cid" EXITED
	run cri status "$cid"
	assert_success
	[[ $(jq -r .exit_code <<<"$output") == 7 ]]
	run cat "$logs/hello.log"
	assert_output --regexp ' stdout F hello from a pod$'
	# A long-running one: ExecSync (forkbox exec) and the pod's ipc namespace, joined by path.
	cid=$(cri create "$POD" "$pod_name" "$logs" sleeper "$IMAGE" /bin/fbhelper sleep 1000)
	cri start "$cid"
	wait_cri_state "$cid" RUNNING
	sandbox_pid=$(cri_pid "$POD")
	run cri exec-sync "$cid" /bin/fbhelper readlink /proc/self/ns/ipc
	assert_success
	assert_output "$(readlink "/proc/$sandbox_pid/ns/ipc")"
	run cri exec-sync "$cid" /bin/sh -c 'exit 3'
	assert_failure 3
	# UpdateContainerResources: the shim runs `forkbox update --resources -`.
	run cri update "$cid" 67108864 50000 100000
	assert_success
	grep -E -q "(^| )update .*$cid\$" "$FB_CALLS"
	local dir
	dir=$(awk -F: '$2 == "memory" {print $3}' "/proc/$(cri_pid "$cid")/cgroup")
	[[ $(cat "/sys/fs/cgroup/memory$dir/memory.limit_in_bytes") == 67108864 ]]
	dir=$(awk -F: '$2 == "cpu" {print $3}' "/proc/$(cri_pid "$cid")/cgroup")
	[[ $(cat "/sys/fs/cgroup/cpu$dir/cpu.cfs_quota_us") == 50000 ]]
	run cri stop-pod "$POD"
	assert_success
	run cri rm-pod "$POD"
	assert_success
	POD=
}

@test "CRI: a missing command fails StartContainer with forkbox's error" {
	skip_without_cri_client
	local logs=$BATS_TEST_TMPDIR/logs pod_name=pod$BATS_TEST_NUMBER cid
	mkdir -p "$logs"
	POD=$(cri run-pod "$pod_name" "$logs")
	cid=$(cri create "$POD" "$pod_name" "$logs" missing "$IMAGE" /nosuch)
	run --separate-stderr cri start "$cid"
	assert_failure
	assert_stderr_contains 'exec: "/nosuch": stat /nosuch: no such file or directory'
	forkbox_created "$cid"
}

@test "CRI: a pod sharing its pid namespace: a container joins the sandbox's by path" {
	skip_without_cri_client
	local logs=$BATS_TEST_TMPDIR/logs pod_name=pod$BATS_TEST_NUMBER cid
	mkdir -p "$logs"
	export CRI_PID_MODE=POD
	POD=$(cri run-pod "$pod_name" "$logs")
	cid=$(cri create "$POD" "$pod_name" "$logs" sharer "$IMAGE" /bin/fbhelper sleep 1000)
	cri start "$cid"
	wait_cri_state "$cid" RUNNING
	run cri exec-sync "$cid" /bin/fbhelper readlink /proc/self/ns/pid
	assert_success
	assert_output "$(readlink "/proc/$(cri_pid "$POD")/ns/pid")"
	# pid 1 is the sandbox's process (fbhelper sigwait), not the container's.
	run cri exec-sync "$cid" /bin/fbhelper read /proc/1/cmdline
	assert_success
	assert_output --partial sigwait
}

# cri_cgroup_file ID CONTROLLER FILE: FILE of the CRI container ID's v1 CONTROLLER cgroup.
cri_cgroup_file() {
	local dir
	dir=$(awk -F: -v c="$2" '{n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) print $3}' \
		"/proc/$(cri_pid "$1")/cgroup")
	[[ -n $dir ]] || { echo "no v1 $2 cgroup for $1" >&2; return 1; }
	cat "/sys/fs/cgroup/$2$dir/$3"
}

# Kubernetes' in-place resize on cgroup v1: the shim runs `update --resources -` with the whole
# linux.resources of the container (its device rules too), memory and memsw equal.
@test "CRI: UpdateContainerResources grows memory, sets CFS quota and shares, then makes memory unlimited (cgroup v1)" {
	skip_without_cri_client
	[[ -f /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes && -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]] ||
		skip "no v1 memory (with memsw) and cpu hierarchies"
	local logs=$BATS_TEST_TMPDIR/logs pod_name=pod$BATS_TEST_NUMBER cid devices unlimited
	mkdir -p "$logs"
	POD=$(cri run-pod "$pod_name" "$logs")
	cid=$(cri create "$POD" "$pod_name" "$logs" resized "$IMAGE" /bin/fbhelper sleep 1000)
	cri start "$cid"
	wait_cri_state "$cid" RUNNING
	forkbox_created "$cid"
	devices=$(cri_cgroup_file "$cid" devices devices.list)
	# 64 MiB first, so that 128 MiB has to raise memsw above the current limit before the limit.
	run cri update "$cid" 67108864 0 0
	assert_success
	run cri update "$cid" 134217728 20000 100000 256
	assert_success
	grep -E -q "(^| )update .*$cid\$" "$FB_CALLS"
	run cri_cgroup_file "$cid" memory memory.limit_in_bytes
	assert_output 134217728
	run cri_cgroup_file "$cid" memory memory.memsw.limit_in_bytes
	assert_output 134217728
	run cri_cgroup_file "$cid" cpu cpu.cfs_period_us
	assert_output 100000
	run cri_cgroup_file "$cid" cpu cpu.cfs_quota_us
	assert_output 20000
	run cri_cgroup_file "$cid" cpu cpu.shares
	assert_output 256
	# The device rules came along unchanged, and are as they were.
	run cri_cgroup_file "$cid" devices devices.list
	assert_output "$devices"
	# -1: unlimited memory, and memsw with it (containerd sends both).
	unlimited=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)
	run cri update "$cid" -1 0 0
	assert_success
	run cri_cgroup_file "$cid" memory memory.limit_in_bytes
	assert_output "$unlimited"
	run cri_cgroup_file "$cid" memory memory.memsw.limit_in_bytes
	assert_output "$unlimited"
	# The CPU limits stay (0 leaves a field alone) and the container still runs.
	run cri_cgroup_file "$cid" cpu cpu.cfs_quota_us
	assert_output 20000
	run cri exec-sync "$cid" /bin/fbhelper echo still here
	assert_success
	assert_output "still here"
	run cri stop-pod "$POD"
	assert_success
	run cri rm-pod "$POD"
	assert_success
	POD=
}
