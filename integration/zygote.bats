#!/usr/bin/env bats
# Zygote mode: `forkbox daemon` keeps warm namespace templates; create/run take one when
# asked (--zygote, FORKBOX_ZYGOTE=1, annotation run.forkbox.zygote=true) and fall back to
# the cold path whenever the daemon cannot help.

load helpers

setup() {
	skip_if_runc "zygote mode is forkbox's own"
	setup_bundle /bin/fbhelper sleep 100
	SOCK=$BATS_TEST_TMPDIR/zygote.sock
}

teardown() {
	# The daemon first: fb_teardown SIGKILLs every forkbox given a --root in the test's
	# tmpdir, and a SIGKILLed daemon leaves its spare cgroups for the next one to remove.
	stop_daemon
	fb_teardown
	if [[ -n ${HOLDER_PID:-} ]]; then
		kill -KILL "$HOLDER_PID" 2>/dev/null
		wait "$HOLDER_PID" 2>/dev/null || true
	fi
}

# start_daemon [DAEMON ARGS...]: a daemon on $SOCK, stopped by teardown.
start_daemon() {
	"$FORKBOX" --log "$BATS_TEST_TMPDIR/daemon.log" daemon --socket "$SOCK" "$@" \
		</dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/daemon.err" 3>&- 4>&- &
	DAEMON_PID=$!
	local i
	for i in $(seq 100); do
		[[ -S $SOCK ]] && "$FORKBOX" daemon --socket "$SOCK" --stats >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	fail "the daemon did not come up: $(cat "$BATS_TEST_TMPDIR/daemon.err")"
}

stop_daemon() {
	if [[ -n ${DAEMON_PID:-} ]]; then
		kill -TERM "$DAEMON_PID" 2>/dev/null
		wait "$DAEMON_PID" 2>/dev/null
		DAEMON_PID=
	fi
}

# stat_of NAME: one counter of the daemon's stats line.
stat_of() {
	"$FORKBOX" daemon --socket "$SOCK" --stats | tr ' ' '\n' | sed -n "s/^$1=//p"
}

# wait_ready N: until the daemon has N templates ready.
wait_ready() {
	local i
	for i in $(seq 200); do
		(($(stat_of ready) >= $1)) && return 0
		sleep 0.05
	done
	fail "templates not ready: $("$FORKBOX" daemon --socket "$SOCK" --stats)"
}

# wait_full: until every pool the daemon keeps is full and nothing is being built.
wait_full() {
	local i
	for i in $(seq 300); do
		(($(stat_of short) == 0 && $(stat_of ready) > 0)) && return 0
		sleep 0.05
	done
	fail "pools not full: $("$FORKBOX" daemon --socket "$SOCK" --stats)"
}

zrun() {
	"$FORKBOX" --root "$ROOT" --zygote="$SOCK" "$@"
}

@test "zygote: run takes a warm template, and the container gets fresh namespaces with lo up" {
	start_daemon --pool 2 --warm "$BUNDLE"
	wait_ready 2
	set_args /bin/sh -c 'cat /sys/class/net/lo/flags; readlink /proc/self/ns/net'
	run zrun run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_equal "$(stat_of served)" 1
	(( (${lines[0]} & 0x9) == 0x9 )) || fail "lo flags ${lines[0]}"
	[[ ${lines[1]} != "$(readlink /proc/self/ns/net)" ]] || fail "the container shares the host's network namespace"
	# Every template is used once.
	run zrun run --bundle "$BUNDLE" "$CID-2"
	assert_success
	[[ ${lines[1]} != "$(zrun run --bundle "$BUNDLE" "$CID-3" | sed -n 2p)" ]] || fail "a template was used twice"
}

@test "zygote: create, start, exec, kill and delete of a warm container behave as cold ones" {
	start_daemon --pool 2 --warm "$BUNDLE"
	wait_ready 2
	zrun create --bundle "$BUNDLE" "$CID" </dev/null >/dev/null 2>&1 3>&- 4>&-
	assert_equal "$(stat_of served)" 1
	runtime start "$CID"
	wait_for_status "$CID" running
	run runtime exec "$CID" /bin/fbhelper hostname
	assert_success
	local pid
	pid=$(container_pid "$CID")
	run runtime exec "$CID" /bin/fbhelper readlink /proc/self/ns/net
	assert_output "$(readlink "/proc/$pid/ns/net")"
	runtime kill "$CID" KILL
	wait_for_status "$CID" stopped
	runtime delete "$CID"
	run runtime list -q
	assert_output ""
}

@test "zygote: FORKBOX_ZYGOTE=1 with FORKBOX_SOCKET, and the run.forkbox.zygote annotation, opt in" {
	start_daemon --pool 2 --warm "$BUNDLE"
	wait_ready 2
	set_args /bin/true
	FORKBOX_ZYGOTE=1 FORKBOX_SOCKET=$SOCK runtime run --bundle "$BUNDLE" "$CID"
	assert_equal "$(stat_of served)" 1
	update_config '.annotations["run.forkbox.zygote"] = "true"'
	FORKBOX_SOCKET=$SOCK runtime run --bundle "$BUNDLE" "$CID-a"
	assert_equal "$(stat_of served)" 2
	# Without any opt-in the daemon is not asked.
	update_config 'del(.annotations["run.forkbox.zygote"])'
	FORKBOX_SOCKET=$SOCK runtime run --bundle "$BUNDLE" "$CID-c"
	assert_equal "$(stat_of served)" 2
}

@test "zygote: without a daemon, or after it was SIGKILLed, create falls back to the cold path" {
	set_args /bin/fbhelper echo cold
	run zrun --debug run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_output --partial "cold"
	start_daemon --pool 1
	kill -KILL "$DAEMON_PID"
	wait "$DAEMON_PID" || true
	DAEMON_PID=
	run zrun run --bundle "$BUNDLE" "$CID-2"
	assert_success
	assert_output "cold"
	# A new daemon replaces the dead one's socket.
	start_daemon --pool 1
}

@test "zygote: a kind of container the daemon has not seen is served cold, then kept warm" {
	start_daemon --pool 2
	set_args /bin/true
	zrun run --bundle "$BUNDLE" "$CID"
	assert_equal "$(stat_of missed)" 1
	wait_ready 2
	zrun run --bundle "$BUNDLE" "$CID-2"
	assert_equal "$(stat_of served)" 1
}

@test "zygote: containers keep running across a daemon restart and later verbs work" {
	start_daemon --pool 1 --warm "$BUNDLE"
	wait_ready 1
	zrun run --detach --bundle "$BUNDLE" "$CID" </dev/null >/dev/null 2>&1 3>&- 4>&-
	wait_for_status "$CID" running
	stop_daemon
	run container_status "$CID"
	assert_output running
	start_daemon --pool 1
	run runtime exec "$CID" /bin/fbhelper echo still here
	assert_output "still here"
	runtime delete --force "$CID"
}

@test "zygote: a user-namespace container takes a template made in a user namespace with its id maps" {
	open_path_for_others
	update_config '.linux.namespaces += [{"type": "user"}]
		| .linux.uidMappings = [{"containerID": 0, "hostID": 100000, "size": 65536}]
		| .linux.gidMappings = [{"containerID": 0, "hostID": 100000, "size": 65536}]
		| .hostname = "zyg"'
	local probe='cat /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups; grep -E "^(Uid|Gid|CapEff|CapBnd):" /proc/self/status; hostname; cat /sys/class/net/lo/flags; ls /proc/1/ns/net >/dev/null && echo procfs'
	set_args /bin/sh -c "$probe"
	local cold
	cold=$(runtime run --bundle "$BUNDLE" "$CID-cold")
	start_daemon --pool 1 --warm "$BUNDLE"
	wait_ready 1
	run zrun run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_equal "$(stat_of served)" 1
	# The same ids, capabilities, hostname, lo and procfs as a cold container of the bundle.
	assert_output "$cold"
	assert_line --partial "100000"
	# The template's user namespace is the container's; its network namespace belongs to it
	# (sysfs could not be mounted otherwise) and is not the host's.
	set_args /bin/sh -c 'readlink /proc/self/ns/user; readlink /proc/self/ns/net'
	wait_ready 1
	run zrun run --bundle "$BUNDLE" "$CID-2"
	assert_success
	assert_equal "$(stat_of served)" 2
	[[ ${lines[0]} != "$(readlink /proc/self/ns/user)" ]] || fail "the container is in the host's user namespace"
	[[ ${lines[1]} != "$(readlink /proc/self/ns/net)" ]] || fail "the container shares the host's network namespace"
	# Other id maps are another kind of container: not served this one's template.
	update_config '.linux.uidMappings = [{"containerID": 0, "hostID": 200000, "size": 65536}]'
	run zrun run --bundle "$BUNDLE" "$CID-3"
	assert_success
	assert_equal "$(stat_of served)" 2
}

@test "zygote: id maps the kernel refuses fail the create, and the daemon does not retry them at once" {
	open_path_for_others
	# Overlapping container ranges: validation cannot tell, the kernel refuses the uid_map.
	update_config '.linux.namespaces += [{"type": "user"}]
		| .linux.uidMappings = [{"containerID": 0, "hostID": 100000, "size": 65536},
			{"containerID": 10, "hostID": 300000, "size": 10}]
		| .linux.gidMappings = [{"containerID": 0, "hostID": 100000, "size": 65536}]'
	set_args /bin/true
	start_daemon --pool 2
	run zrun run --bundle "$BUNDLE" "$CID"
	assert_failure
	sleep 1
	# A pool's first builds fail (two: --pool 2), logged once; then the kind is left alone
	# for a while instead of asking the builder for the same failure again and again.
	run grep -c "could not make a template" "$BATS_TEST_TMPDIR/daemon.log"
	assert_output 1
	assert_equal "$(stat_of ready)" 0
	(($(stat_of failed) <= 2)) || fail "the daemon keeps retrying: $("$FORKBOX" daemon --socket "$SOCK" --stats)"
}

@test "zygote: a container joining a user namespace by path is never given a template" {
	start_daemon --pool 1 --warm "$BUNDLE"
	wait_ready 1
	# A user namespace held by a process of ours, root mapped to root.
	unshare --user --map-root-user sleep 1000 </dev/null >/dev/null 2>&1 3>&- 4>&- &
	HOLDER_PID=$!
	local i
	for i in $(seq 50); do
		[[ $(readlink "/proc/$HOLDER_PID/ns/user") != "$(readlink /proc/self/ns/user)" ]] && break
		sleep 0.02
	done
	update_config '.linux.namespaces += [{"type": "user", "path": $p}]' --arg p "/proc/$HOLDER_PID/ns/user"
	set_args /bin/true
	run zrun run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_equal "$(stat_of served)" 0
}

@test "zygote: a container joining a network namespace by path takes ipc and uts from a template" {
	make_netns "fbz-$$"
	update_config ".linux.namespaces = [.linux.namespaces[] | select(.type != \"network\")] + [{\"type\": \"network\", \"path\": \"/var/run/netns/fbz-$$\"}]"
	start_daemon --pool 1
	set_args /bin/fbhelper readlink /proc/self/ns/net
	zrun run --bundle "$BUNDLE" "$CID" >/dev/null # teaches the daemon this kind
	wait_ready 1
	run zrun run --bundle "$BUNDLE" "$CID-2"
	assert_success
	assert_output "net:[$(stat -L -c %i /var/run/netns/fbz-$$)]"
	assert_equal "$(stat_of served)" 1
}

@test "zygote: 50 parallel creates all succeed, warm or cold" {
	start_daemon --pool 4 --warm "$BUNDLE"
	wait_ready 4
	local i pids=()
	for i in $(seq 50); do
		zrun create --bundle "$BUNDLE" "$CID-$i" </dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/c$i.err" 3>&- 4>&- &
		pids+=($!)
	done
	local failed=0
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || failed=$((failed + 1))
	done
	assert_equal "$failed" 0
	run runtime list -q
	assert_equal "${#lines[@]}" 50
	(($(stat_of served) + $(stat_of missed) == 50)) || fail "$("$FORKBOX" daemon --socket "$SOCK" --stats)"
}

@test "zygote: the daemon's socket is private and a stopped daemon leaves nothing behind" {
	start_daemon --pool 3 --warm "$BUNDLE"
	wait_ready 3
	run stat -c %a "$SOCK"
	assert_output 600
	stop_daemon
	[[ ! -e $SOCK ]] || fail "socket left behind"
	run pgrep -P "$$" -f "daemon --socket $SOCK"
	assert_failure
}

@test "zygote: a second daemon on a live socket refuses to start" {
	start_daemon --pool 1
	run "$FORKBOX" daemon --socket "$SOCK"
	assert_failure
	assert_output --partial "another daemon"
}

# spares_of PID: the daemon's spare cgroups in the cpu hierarchy (v1).
spares_of() {
	local d
	for d in /sys/fs/cgroup/cpu/forkbox/.zygote-"$1"-*; do
		[[ -d $d ]] && echo "$d"
	done
	return 0
}

@test "zygote: templates carry spare v1 cgroups, which become the container's own" {
	[[ -f /sys/fs/cgroup/cpu/cgroup.procs ]] || skip "no cgroup v1 cpu hierarchy on this host"
	start_daemon --pool 2 --warm "$BUNDLE"
	wait_full
	# One spare per template: namespace-only and (when the bundle fits one) rootfs templates.
	run spares_of "$DAEMON_PID"
	assert_equal "${#lines[@]}" "$(stat_of ready)"
	local before=("${lines[@]}")
	zrun create --bundle "$BUNDLE" "$CID" </dev/null >/dev/null 2>&1 3>&- 4>&-
	assert_equal "$(stat_of served)" 1
	local pid
	pid=$(container_pid "$CID")
	# One of the spares was renamed: the container's cgroup, with init in it.
	local gone=0 s
	for s in "${before[@]}"; do [[ -d $s ]] || gone=$((gone + 1)); done
	assert_equal "$gone" 1
	local h
	for h in cpu memory cpuset pids; do
		[[ -d /sys/fs/cgroup/$h/forkbox/$CID ]] || fail "no $h cgroup for the container"
		grep -qx "$pid" "/sys/fs/cgroup/$h/forkbox/$CID/tasks" || fail "init is not in its $h cgroup"
	done
	# A renamed cpuset cgroup has cpus and memory nodes, as a fresh one would.
	assert_equal "$(cat /sys/fs/cgroup/cpuset/forkbox/"$CID"/cpuset.cpus)" "$(cat /sys/fs/cgroup/cpuset/forkbox/cpuset.cpus)"
	assert_equal "$(cat /sys/fs/cgroup/cpuset/forkbox/"$CID"/cpuset.mems)" "$(cat /sys/fs/cgroup/cpuset/forkbox/cpuset.mems)"
	runtime start "$CID"
	runtime kill "$CID" KILL
	wait_for_status "$CID" stopped
	runtime delete "$CID"
	for h in cpu memory cpuset pids; do
		[[ ! -e /sys/fs/cgroup/$h/forkbox/$CID ]] || fail "the $h cgroup outlived the container"
	done
}

@test "zygote: on a host without the containers' cgroup parent, the daemon makes it and its first templates carry spares" {
	[[ -f /sys/fs/cgroup/cpu/cgroup.procs ]] || skip "no cgroup v1 cpu hierarchy on this host"
	local parent=fbt-zparent-$$-$BATS_TEST_NUMBER h
	[[ ! -e /sys/fs/cgroup/cpu/$parent ]] || fail "$parent exists already"
	update_config '.linux.cgroupsPath = $p' --arg p "/$parent/$CID"
	start_daemon --pool 2 --warm "$BUNDLE"
	wait_full
	run compgen -G "/sys/fs/cgroup/cpu/$parent/.zygote-$DAEMON_PID-*"
	assert_success
	# Its cpuset is filled, as a cold create fills the parents it makes.
	assert_equal "$(cat /sys/fs/cgroup/cpuset/$parent/cpuset.cpus)" "$(cat /sys/fs/cgroup/cpuset/cpuset.cpus)"
	zrun create --bundle "$BUNDLE" "$CID" </dev/null >/dev/null 2>&1 3>&- 4>&-
	assert_equal "$(stat_of served)" 1
	grep -qx "$(container_pid "$CID")" "/sys/fs/cgroup/memory/$parent/$CID/tasks" || fail "init is not in its memory cgroup"
	runtime delete --force "$CID"
	stop_daemon
	# What the daemon made goes with it.
	for h in cpu memory cpuset pids; do
		[[ ! -e /sys/fs/cgroup/$h/$parent ]] || { rmdir "/sys/fs/cgroup/$h/$parent"/* "/sys/fs/cgroup/$h/$parent" 2>/dev/null; fail "$h/$parent outlived the daemon"; }
	done
}

@test "zygote: a warm container without device rules gets the deny-all and the default devices, as a cold one" {
	[[ -f /sys/fs/cgroup/devices/devices.list ]] || skip "no cgroup v1 devices hierarchy on this host"
	update_config 'del(.linux.resources.devices)'
	mknod "$BUNDLE/rootfs/tmp/loopctl" c 10 237
	runtime run --detach --bundle "$BUNDLE" "$CID-cold" </dev/null >/dev/null 2>&1 3>&- 4>&-
	local cold
	cold=$(sort /sys/fs/cgroup/devices/forkbox/"$CID"-cold/devices.list)
	runtime delete --force "$CID-cold"
	start_daemon --pool 1 --warm "$BUNDLE"
	wait_full
	zrun --debug run --detach --bundle "$BUNDLE" "$CID" </dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/warm.err" 3>&- 4>&-
	grep -q "zygote: warm" "$BATS_TEST_TMPDIR/warm.err" || fail "not warm: $(cat "$BATS_TEST_TMPDIR/warm.err")"
	run sort /sys/fs/cgroup/devices/forkbox/"$CID"/devices.list
	assert_output "$cold"
	refute_line "a *:* rwm"
	assert_line "c 1:3 rwm"
	run --separate-stderr runtime exec "$CID" /bin/sh -c ': </tmp/loopctl'
	assert_failure
	assert_stderr_contains "can't open /tmp/loopctl: Operation not permitted"
}

@test "zygote: a create that fails after asking the daemon leaves no spare cgroup behind" {
	[[ -f /sys/fs/cgroup/cpu/cgroup.procs ]] || skip "no cgroup v1 cpu hierarchy on this host"
	start_daemon --pool 2 --warm "$BUNDLE"
	wait_full
	zrun create --bundle "$BUNDLE" "$CID" </dev/null >/dev/null 2>&1 3>&- 4>&-
	wait_full
	run spares_of "$DAEMON_PID"
	local before=("${lines[@]}") served
	served=$(stat_of served)
	# The daemon is asked as soon as the config is planned; the id is found taken later.
	run zrun create --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_output --partial "container with id exists"
	assert_equal "$(stat_of served)" $((served + 1))
	# The template's spare is gone (pools refill with new ones meanwhile).
	local gone=0 s
	for s in "${before[@]}"; do [[ -d $s ]] || gone=$((gone + 1)); done
	assert_equal "$gone" 1
	runtime delete --force "$CID"
}

@test "zygote: spare cgroups go with the daemon, and a SIGKILLed daemon's are removed by the next" {
	[[ -f /sys/fs/cgroup/cpu/cgroup.procs ]] || skip "no cgroup v1 cpu hierarchy on this host"
	start_daemon --pool 2 --warm "$BUNDLE"
	wait_ready 2
	local first=$DAEMON_PID
	stop_daemon
	run spares_of "$first"
	assert_output ""
	run ls -d /sys/fs/cgroup/memory/forkbox/.zygote-"$first"-*
	assert_failure

	start_daemon --pool 2 --warm "$BUNDLE"
	wait_full
	local killed=$DAEMON_PID ready
	ready=$(stat_of ready)
	kill -KILL "$killed"
	wait "$killed" 2>/dev/null || true
	DAEMON_PID=
	run spares_of "$killed"
	assert_equal "${#lines[@]}" "$ready"
	start_daemon --pool 1
	run spares_of "$killed"
	assert_output ""
	run ls -d /sys/fs/cgroup/memory/forkbox/.zygote-"$killed"-*
	assert_failure
}

@test "zygote: a killed template builder is replaced and the pools fill again" {
	# No sandbox service beside it: the daemon's one child is the template builder (with the
	# service there, the lowest pid was sometimes the service's, and the test killed that).
	start_daemon --no-sandboxes --pool 2 --warm "$BUNDLE"
	wait_ready 2
	local builder
	builder=$(pgrep -P "$DAEMON_PID" | head -1)
	[[ -n $builder ]] || fail "no builder process under the daemon"
	kill -KILL "$builder"
	# Both ready templates go: the refill needs a new builder.
	zrun create --bundle "$BUNDLE" "$CID-a" </dev/null >/dev/null 2>&1 3>&- 4>&-
	zrun create --bundle "$BUNDLE" "$CID-b" </dev/null >/dev/null 2>&1 3>&- 4>&-
	assert_equal "$(stat_of served)" 2
	runtime delete --force "$CID-a"
	runtime delete --force "$CID-b"
	wait_ready 2
	local now
	now=$(pgrep -P "$DAEMON_PID" | head -1)
	[[ -n $now && $now != "$builder" ]] || fail "the builder was not replaced"
}

@test "zygote: a rootfs template: init is pid 1 of an empty pid namespace, with the mounts a cold container gets" {
	set_args /bin/sh -c 'echo "pid $$"; set -- /proc/[0-9]*; echo $#; grep -c "/forkbox/'"$CID"'" /proc/self/cgroup; touch /sys/fs/cgroup/pids/x 2>/dev/null || echo "cgroup read-only"; cut -d" " -f5,6,9 /proc/self/mountinfo | sort; grep -E " - cgroup2? " /proc/self/mountinfo | cut -d" " -f4,5 | sort'
	runtime run --bundle "$BUNDLE" "$CID" >"$BATS_TEST_TMPDIR/cold" 2>&1
	start_daemon --pool 1 --warm "$BUNDLE"
	wait_full
	zrun --debug run --bundle "$BUNDLE" "$CID" >"$BATS_TEST_TMPDIR/warm" 2>"$BATS_TEST_TMPDIR/warm.err"
	grep -q "zygote: warm rootfs" "$BATS_TEST_TMPDIR/warm.err" || fail "no rootfs template: $(cat "$BATS_TEST_TMPDIR/warm.err")"
	run cat "$BATS_TEST_TMPDIR/warm"
	assert_line --index 0 "pid 1"
	# The shell alone (its own glob, no pipeline racing it): nothing of the host's, nothing
	# of the builder's.
	assert_line --index 1 "1"
	assert_line "cgroup read-only"
	# Same mount points, options and filesystem types (the order of mountinfo aside), and
	# the cgroup mounts show the container's own cgroups (the template bound spares that
	# were renamed to them).
	diff "$BATS_TEST_TMPDIR/cold" "$BATS_TEST_TMPDIR/warm" || fail "a rootfs template differs from a cold container"
	assert_line --regexp "^/forkbox/$CID /sys/fs/cgroup/"
	refute_line --partial ".zygote-"
}

@test "zygote: a container with a cgroup namespace takes a rootfs template and sees its cgroups as a cold one does" {
	# runc spec's template on cgroup v2 hosts, and podman's default there.
	update_config '.linux.namespaces |= if any(.[]; .type == "cgroup") then . else . + [{"type": "cgroup"}] end'
	# /proc/self/cgroup, and each cgroup mount: root, mount point, options, type, source,
	# super options.
	set_args /bin/sh -c 'cat /proc/self/cgroup; grep -E " - cgroup2? " /proc/self/mountinfo | cut -d" " -f4- | sort'
	runtime run --bundle "$BUNDLE" "$CID" >"$BATS_TEST_TMPDIR/cold" 2>&1
	start_daemon --pool 1 --warm "$BUNDLE"
	wait_full
	zrun --debug run --bundle "$BUNDLE" "$CID" >"$BATS_TEST_TMPDIR/warm" 2>"$BATS_TEST_TMPDIR/warm.err"
	grep -q "zygote: warm rootfs" "$BATS_TEST_TMPDIR/warm.err" || fail "no rootfs template: $(cat "$BATS_TEST_TMPDIR/warm.err")"
	diff "$BATS_TEST_TMPDIR/cold" "$BATS_TEST_TMPDIR/warm" || fail "a rootfs template differs from a cold container"
	run cat "$BATS_TEST_TMPDIR/warm"
	# Inside its cgroup namespace the container's cgroups are the roots.
	assert_line --regexp "^0::/$"
	refute_line --partial "/forkbox/"
	refute_line --partial ".zygote-"
}

@test "zygote: a rootfs template's bound spare cgroups are replaced when the container's cgroup already exists" {
	[[ -f /sys/fs/cgroup/cpu/cgroup.procs ]] || skip "no cgroup v1 cpu hierarchy on this host"
	set_args /bin/sh -c 'grep -E " - cgroup2? " /proc/self/mountinfo | cut -d" " -f4,5 | sort'
	start_daemon --pool 1 --warm "$BUNDLE"
	wait_full
	# The spare cannot be renamed onto an existing cgroup in the cpu hierarchy: that one is
	# used as it is, and the template's bind of the spare must not stay.
	mkdir -p "/sys/fs/cgroup/cpu/forkbox/$CID"
	zrun --debug run --bundle "$BUNDLE" "$CID" >"$BATS_TEST_TMPDIR/warm" 2>"$BATS_TEST_TMPDIR/warm.err"
	local rc=$?
	rmdir "/sys/fs/cgroup/cpu/forkbox/$CID"
	assert_equal "$rc" 0
	grep -q "zygote: warm rootfs with its v1 cgroups bound" "$BATS_TEST_TMPDIR/warm.err" ||
		fail "no template with bound cgroups: $(cat "$BATS_TEST_TMPDIR/warm.err")"
	run cat "$BATS_TEST_TMPDIR/warm"
	assert_line "/forkbox/$CID /sys/fs/cgroup/cpu"
	assert_line "/forkbox/$CID /sys/fs/cgroup/memory"
	refute_line --partial ".zygote-"
}

@test "zygote: kill TERM of a created container ends it, from a namespace and a rootfs template" {
	start_daemon --pool 1 --warm "$BUNDLE"
	wait_full
	local i pid
	for i in 1 2; do
		zrun --debug create --bundle "$BUNDLE" "$CID-$i" </dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/c$i.err" 3>&- 4>&-
		grep -q "zygote: warm" "$BATS_TEST_TMPDIR/c$i.err" || fail "not warm: $(cat "$BATS_TEST_TMPDIR/c$i.err")"
		pid=$(container_pid "$CID-$i")
		runtime kill "$CID-$i" TERM
		wait_for_pid_gone "$pid"
		wait_for_status "$CID-$i" stopped
		runtime delete "$CID-$i"
		wait_full
	done
}

@test "zygote: a changed config.json is not served a rootfs template built from the old one" {
	start_daemon --pool 1 --warm "$BUNDLE"
	wait_full
	set_args /bin/fbhelper pid
	zrun --debug run --bundle "$BUNDLE" "$CID" >/dev/null 2>"$BATS_TEST_TMPDIR/err"
	run grep -c "zygote: warm namespaces" "$BATS_TEST_TMPDIR/err"
	assert_output 1
}

@test "zygote: a bundle seen once gets no rootfs pool; one that comes back does" {
	start_daemon --pool 1
	set_args /bin/true
	zrun run --bundle "$BUNDLE" "$CID-1"
	wait_full
	# The namespace pool the first request taught it, nothing more.
	assert_equal "$(stat_of pools)" 2
	assert_equal "$(stat_of ready)" 1
	zrun run --bundle "$BUNDLE" "$CID-2"
	wait_full
	assert_equal "$(stat_of ready)" 2
	zrun --debug run --bundle "$BUNDLE" "$CID-3" 2>"$BATS_TEST_TMPDIR/err"
	grep -q "zygote: warm rootfs" "$BATS_TEST_TMPDIR/err" || fail "$(cat "$BATS_TEST_TMPDIR/err")"
}

@test "zygote: the daemon probes once whether the kernel can make rootfs templates, and says so" {
	start_daemon --pool 1
	run grep -c "zygote: rootfs templates o" "$BATS_TEST_TMPDIR/daemon.log"
	assert_output 1
	# This kernel (6.11 or later) can; an older one logs why not and serves namespace templates.
	grep -q "zygote: rootfs templates on" "$BATS_TEST_TMPDIR/daemon.log" ||
		skip "$(grep "rootfs templates" "$BATS_TEST_TMPDIR/daemon.log")"
}

@test "zygote: daemon --root compiles the --warm bundles' seccomp profiles into that root's cache" {
	local root=$BATS_TEST_TMPDIR/served-root
	update_config '.linux.seccomp = {"defaultAction": "SCMP_ACT_ALLOW",
		"syscalls": [{"names": ["mkdirat"], "action": "SCMP_ACT_ERRNO"}]}'
	# Whole flag names only: a prefix is not guessed into another flag (--rootfs-after).
	run "$FORKBOX" daemon --socket "$SOCK" --roo "$root"
	assert_failure
	assert_output --partial "unrecognised option '--roo'"
	start_daemon --pool 1 --root "$root" --warm "$BUNDLE"
	run compgen -G "$root/.seccomp=*"
	assert_success
	assert_equal "${#lines[@]}" 1
	# The create finds it: no second entry.
	set_args /bin/true
	"$FORKBOX" --root "$root" --zygote="$SOCK" run --bundle "$BUNDLE" "$CID"
	run compgen -G "$root/.seccomp=*"
	assert_equal "${#lines[@]}" 1
}

@test "zygote: an idmapped bind of a user-namespace container served from a template is idmapped as cold" {
	open_path_for_others
	local src=$BATS_TEST_TMPDIR/src
	mkdir -p "$src" "$BUNDLE/rootfs/m"
	echo data >"$src/root-file"
	update_config '.linux.namespaces += [{"type": "user"}]
		| .linux.uidMappings = [{"containerID": 0, "hostID": 100000, "size": 65536}]
		| .linux.gidMappings = [{"containerID": 0, "hostID": 100000, "size": 65536}]
		| .mounts += [{"destination": "/m", "type": "bind", "source": $s, "options": ["bind", "idmap"]}]' --arg s "$src"
	set_args /bin/fbhelper stat /m/root-file
	start_daemon --pool 1 --warm "$BUNDLE"
	wait_ready 1
	run zrun run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_equal "$(stat_of served)" 1
	assert_output "file 0644 0 0"
}

@test "zygote: a warm init starts on create's memory too, in the template's namespaces, as a forked one does" {
	start_daemon --pool 2 --warm "$BUNDLE"
	wait_ready 2
	set_args /bin/sh -c 'cat /sys/class/net/lo/flags; hostname; grep -c . /proc/self/mountinfo; cat /proc/self/cgroup'
	local trace=$BATS_TEST_TMPDIR/trace
	FORKBOX_TRACE=$trace run zrun run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_equal "$(stat_of served)" 1
	local shared=$output
	grep -q 'create: init shares memory$' "$trace" || fail "no 'create: init shares memory' in the trace: $(cat "$trace")"
	(( (${lines[0]} & 0x9) == 0x9 )) || fail "lo flags ${lines[0]}"

	wait_ready 2
	rm -f "$trace"
	FORKBOX_INIT_CLONE=fork FORKBOX_TRACE=$trace run zrun run --bundle "$BUNDLE" "$CID-2"
	assert_success
	assert_equal "$(stat_of served)" 2
	assert_output "${shared//$CID/$CID-2}"
	! grep -q 'init shares memory' "$trace" || fail "FORKBOX_INIT_CLONE=fork shared memory"
}
