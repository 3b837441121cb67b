#!/usr/bin/env bats
# cgroup v2 end to end, on a host whose cgroups are hybrid (v1 controllers, cgroup2 beside
# them): each runtime call runs in a private mount namespace where /sys/fs/cgroup is the
# host's cgroup2 hierarchy alone, so the runtime sees a pure cgroup v2 host. There is one
# cgroup2 hierarchy per kernel, so the cgroups it makes there are the host's: each test
# uses its own cgroupsPath ($CG) and teardown removes $V2$CG.

load helpers

# host_v2_mount: where this host mounts its cgroup2 hierarchy (/sys/fs/cgroup/unified on a
# hybrid host, /sys/fs/cgroup on a pure v2 one); empty when it has none.
host_v2_mount() {
	awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2" && $4 == "/") { print $5; exit } break } }' \
		/proc/self/mountinfo
}

# runtime ARGS...: the runtime under test in the pure v2 view: a private mount namespace
# (nothing propagates back to the host), /sys/fs/cgroup and the v1 hierarchies under it
# unmounted, the cgroup2 hierarchy mounted in their place. The runtime detects the layout
# from its mountinfo and finds v2 only.
runtime() {
	unshare --mount --propagation private -- sh -c \
		'umount -R /sys/fs/cgroup 2>/dev/null; mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec "$@"' \
		sh "$FORKBOX" --root "$ROOT" "$@"
}

setup() {
	V2=$(host_v2_mount)
	[[ -n $V2 ]] || skip "this host has no cgroup2 hierarchy to build a pure v2 view from"
	command -v unshare >/dev/null || skip "unshare (util-linux) is missing"
	setup_bundle
	CG=/$CID-v2
	update_config '.linux.cgroupsPath = $p' --arg p "$CG"
}

teardown() {
	# A zygote daemon first (see zygote.bats): fb_teardown would SIGKILL it.
	if [[ -n ${DAEMON_PID:-} ]]; then
		kill -TERM "$DAEMON_PID" 2>/dev/null
		wait "$DAEMON_PID" 2>/dev/null
		# The parents its templates' spare cgroups and its sandbox service's cgroups were
		# made in, in the host's v2 hierarchy: removed once empty (an rmdir of a cgroup that
		# still has children or processes fails and changes nothing).
		rmdir "$V2/forkbox-sandbox" "$V2/forkbox" 2>/dev/null
	fi
	fb_teardown
	# What delete left of this test's v2 cgroup (the hierarchy is the host's).
	[[ -n ${V2:-} && -n ${CG:-} && -d $V2$CG ]] || return 0
	local pid i
	if [[ -f $V2$CG/cgroup.kill ]]; then
		echo 1 >"$V2$CG/cgroup.kill" 2>/dev/null
	else
		for pid in $(cat "$V2$CG/cgroup.procs" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
	fi
	for ((i = 0; i < 100; i++)); do
		rmdir "$V2$CG" 2>/dev/null && break
		sleep 0.05
	done
	return 0
}

# v2_procs: pids in the container's v2 cgroup, seen from the host.
v2_procs() {
	cat "$V2$CG/cgroup.procs"
}

# device_node NAME MAJOR MINOR: a character device node in the rootfs's /tmp (the rootfs is
# a host directory, so the host makes it; no capability needed in the container). The tests
# use loop-control (c 10:237): not a default device, and opening it does nothing.
device_node() {
	mknod "$BUNDLE/rootfs/tmp/$1" c "$2" "$3"
}

# set_device_rules JSON: linux.resources.devices.
set_device_rules() {
	update_config '.linux.resources.devices = $r' --argjson r "$1"
}

# device_programs: the cgroup_device programs attached to the container's cgroup, one
# "ID NAME" line each (bpftool).
device_programs() {
	bpftool cgroup show "$V2$CG" | awk '$2 == "cgroup_device" || $2 == "device" { print $1, $NF }'
}

# start_v2_daemon SOCK: a zygote daemon warmed with $BUNDLE, in the same pure v2 view (a
# private mount namespace of its own), up with its two templates (namespaces, rootfs) ready.
# teardown stops it.
start_v2_daemon() {
	unshare --mount --propagation private -- sh -c \
		'umount -R /sys/fs/cgroup 2>/dev/null; mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec "$@"' \
		sh "$FORKBOX" daemon --socket "$1" --pool 1 --warm "$BUNDLE" </dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/daemon.err" 3>&- 4>&- &
	DAEMON_PID=$!
	local i stats=
	for i in $(seq 100); do
		stats=$("$FORKBOX" daemon --socket "$1" --stats 2>/dev/null) && [[ $stats == *"ready=2 "* ]] && return 0
		sleep 0.05
	done
	fail "no warm templates: $stats $(cat "$BATS_TEST_TMPDIR/daemon.err")"
}

# program_tag: the tag (a hash of its instructions) of the one device program attached to
# the container's cgroup.
program_tag() {
	local ids
	mapfile -t ids < <(device_programs | cut -d" " -f1)
	[[ ${#ids[@]} -eq 1 ]] || { echo "expected one device program, got ${#ids[@]}" >&2; return 1; }
	bpftool prog show id "${ids[0]}" | sed -n 's/.* tag \([0-9a-f]*\).*/\1/p'
}

@test "create puts init straight into its own v2 cgroup; start runs it; delete removes the cgroup" {
	set_args /bin/sh -c 'cat /proc/self/cgroup; echo done'
	create_container "$CID"
	[[ -d $V2$CG ]] || fail "no cgroup $V2$CG after create"
	local pid
	pid=$(container_pid "$CID")
	# No v1 hierarchy in sight, so clone3(CLONE_INTO_CGROUP) is what placed it there.
	run v2_procs
	assert_output "$pid"
	run cat "/proc/$pid/cgroup"
	assert_line "0::$CG"
	run runtime start "$CID"
	assert_success
	wait_for_output "$CID" done
	wait_for_status "$CID" stopped
	run runtime delete "$CID"
	assert_success
	[[ ! -e $V2$CG ]] || fail "delete left $V2$CG"
}

@test "a v2 view made by covering the host's cgroup mounts (a bind of /sys over /sys): the covered v1 mounts, still in mountinfo, are not hierarchies" {
	set_args /bin/sh -c 'cat /proc/self/cgroup'
	update_config '.linux.namespaces |= map(select(.type != "cgroup"))'  # the full path, please
	run unshare --mount --propagation private -- sh -c \
		'mount --bind /sys /sys && mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec "$@"' \
		sh "$FORKBOX" --root "$ROOT" run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_line "0::$CG"
	[[ ! -e $V2$CG ]] || fail "run left $V2$CG"
	local d
	for d in /sys/fs/cgroup/*/; do
		[[ ! -e $d${CG#/} ]] || fail "a v1 cgroup was made: $d${CG#/}"
	done
}

@test "pause and resume freeze and thaw the v2 cgroup through cgroup.freeze" {
	set_args /bin/sh -c 'i=0; while true; do i=$((i+1)); echo $i; sleep 0.02; done'
	run_detached "$CID"
	wait_for_output "$CID" 3
	run runtime pause "$CID"
	assert_success
	run cat "$V2$CG/cgroup.freeze"
	assert_output 1
	run grep -x 'frozen 1' "$V2$CG/cgroup.events"
	assert_success
	run container_status "$CID"
	assert_output paused
	run runtime resume "$CID"
	assert_success
	run cat "$V2$CG/cgroup.freeze"
	assert_output 0
	run container_status "$CID"
	assert_output running
	run runtime delete --force "$CID"
	assert_success
	[[ ! -e $V2$CG ]] || fail "delete --force left $V2$CG"
}

@test "the default deny-all device rule: a device no rule allows fails with EPERM, the default devices work" {
	device_node loopctl 10 237
	run_sh ': </tmp/loopctl'
	assert_failure
	assert_stderr_contains "can't open /tmp/loopctl: Operation not permitted"
	run_sh 'echo x >/dev/null && head -c 3 /dev/zero | wc -c && head -c 1 /dev/urandom >/dev/null && echo ok'
	assert_success
	assert_line 3
	assert_line ok
	run_sh 'echo x >/dev/full'
	assert_failure
	assert_stderr_contains "No space left on device"
}

@test "without device rules (or resources) a container still gets a device program: the default devices work, others fail with EPERM" {
	device_node loopctl 10 237
	local variant
	for variant in 'del(.linux.resources.devices)' 'del(.linux.resources)'; do
		update_config "$variant"
		run_sh ': </tmp/loopctl'
		assert_failure
		assert_stderr_contains "can't open /tmp/loopctl: Operation not permitted"
		run_sh 'echo x >/dev/null && head -c 3 /dev/zero | wc -c && head -c 1 /dev/urandom >/dev/null && echo ok'
		assert_success
		assert_line 3
		assert_line ok
	done
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run device_programs
	assert_success
	[[ ${#lines[@]} -eq 1 ]] || fail "expected one device program: $output"
}

@test "device rules apply in order, a later rule winning, and per access type" {
	device_node loopctl 10 237
	set_device_rules '[{"allow": false, "access": "rwm"}, {"allow": true, "type": "c", "major": 10, "minor": 237, "access": "r"}]'
	run_sh ': </tmp/loopctl && echo read-ok'
	assert_success
	assert_output read-ok
	run_sh ': >>/tmp/loopctl'
	assert_failure
	assert_stderr_contains "Operation not permitted"
	# A later allow wins over an earlier deny...
	set_device_rules '[{"allow": false, "access": "rwm"}, {"allow": false, "type": "c", "major": 10, "minor": 237, "access": "r"},
		{"allow": true, "type": "c", "major": 10, "minor": 237, "access": "r"}]'
	run_sh ': </tmp/loopctl && echo read-ok'
	assert_success
	assert_output read-ok
	# ...but not over the default devices, which come after the rules (as on v1, and in runc).
	set_device_rules '[{"allow": false, "access": "rwm"}, {"allow": false, "type": "c", "major": 1, "minor": 5, "access": "rwm"}]'
	run_sh 'head -c 3 /dev/zero | wc -c'
	assert_success
	assert_output 3
}

@test "as on v1, a device deny takes back only an allow with the same numbers" {
	device_node loopctl 10 237
	set_device_rules '[{"allow": false, "access": "rwm"}, {"allow": true, "type": "c", "major": 10, "minor": 237, "access": "r"},
		{"allow": false, "type": "c", "major": 10, "access": "r"}]'
	run_sh ': </tmp/loopctl && echo read-ok'
	assert_success
	assert_output read-ok
	set_device_rules '[{"allow": false, "access": "rwm"}, {"allow": true, "type": "c", "major": 10, "minor": 237, "access": "r"},
		{"allow": false, "type": "c", "major": 10, "minor": 237, "access": "r"}]'
	run_sh ': </tmp/loopctl'
	assert_failure
	assert_stderr_contains "Operation not permitted"
}

@test "v1 and v2 decide the same device accesses for the same rules" {
	[[ -d /sys/fs/cgroup/devices ]] || skip "no v1 devices hierarchy on this host to compare with"
	device_node loopctl 10 237
	set_args /bin/sh -c 'for a in r w rw; do
		case $a in r) (: </tmp/loopctl) ;; w) (: >>/tmp/loopctl) ;; rw) (: <>/tmp/loopctl) ;; esac 2>/dev/null &&
			echo "$a ok" || echo "$a denied"
	done'
	local rules v1 v2 n=0 D='{"allow": false, "access": "rwm"}' sets=()
	sets+=("[$D]")
	sets+=("[$D, {\"allow\": true, \"type\": \"c\", \"major\": 10, \"minor\": 237, \"access\": \"r\"}]")
	sets+=("[$D, {\"allow\": true, \"type\": \"c\", \"major\": 10, \"minor\": 237, \"access\": \"r\"},
		{\"allow\": true, \"type\": \"c\", \"major\": 10, \"access\": \"w\"}]")
	sets+=("[$D, {\"allow\": true, \"type\": \"c\", \"major\": 10, \"minor\": 237, \"access\": \"rw\"},
		{\"allow\": false, \"type\": \"c\", \"major\": 10, \"minor\": 237, \"access\": \"w\"}]")
	# A deny inside an allowed wildcard: v1 ignores it; runc refuses it ("cannot punch hole").
	is_runc || sets+=("[$D, {\"allow\": true, \"type\": \"c\", \"major\": 10, \"access\": \"rw\"},
		{\"allow\": false, \"type\": \"c\", \"major\": 10, \"minor\": 237, \"access\": \"w\"}]")
	sets+=("[$D, {\"allow\": true, \"type\": \"a\", \"major\": 99, \"access\": \"r\"}]")
	# Allow all but writes: v1 denies an open for rw too; runc 1.1's v2 program lets it through.
	is_runc || sets+=("[{\"allow\": true, \"access\": \"rwm\"}, {\"allow\": false, \"type\": \"c\", \"major\": 10, \"minor\": 237, \"access\": \"w\"}]")
	for rules in "${sets[@]}"; do
		set_device_rules "$rules"
		n=$((n + 1))
		v2=$(runtime run --bundle "$BUNDLE" "$CID-$n" 2>&1 </dev/null 3>&- 4>&-) || fail "v2 run failed: $v2"
		v1=$("$FORKBOX" --root "$ROOT" run --bundle "$BUNDLE" "$CID-$n" 2>&1 </dev/null 3>&- 4>&-)
		[[ $v1 == "$v2" ]] || fail "rules $rules: v1 says '$v1', v2 says '$v2'"
		[[ $v1 == *"r "* ]] || fail "rules $rules: no result: $v1"
	done
}

@test "linux.devices are made but not allowed by themselves: the device rules decide (runc's rule)" {
	update_config '.linux.devices = [{"path": "/dev/loop-control", "type": "c", "major": 10, "minor": 237, "fileMode": 438}]'
	set_device_rules '[{"allow": false, "access": "rwm"}]'
	run_sh "(: </dev/loop-control) 2>/dev/null && echo read-ok; test -c /dev/loop-control && echo made"
	assert_success
	assert_output made
}

@test "container init holds no BPF program fd" {
	skip_if_runc "forkbox's own fd hygiene"
	create_container "$CID"
	local pid
	pid=$(container_pid "$CID")
	run find "/proc/$pid/fd" -lname '*bpf*'
	assert_success
	assert_output ""
}

@test "create has the device program attached when it returns, before start, with or without createContainer hooks" {
	command -v bpftool >/dev/null || skip "bpftool is missing (apt-get install bpftool)"
	set_device_rules '[{"allow": false, "access": "rwm"}]'
	set_args /bin/sh -c 'exit 0'
	# forkbox loads it while init sets up: it must still be attached before create returns.
	create_container "$CID"
	run device_programs
	assert_success
	[[ ${#lines[@]} -eq 1 ]] || fail "expected one device program after create, got: $output"
	runtime delete --force "$CID"
	# A hook that runs inside the container: attached before clone.
	update_config '.hooks.createContainer = [{"path": "/bin/true"}]'
	create_container "$CID"
	run device_programs
	assert_success
	[[ ${#lines[@]} -eq 1 ]] || fail "expected one device program after create with a hook, got: $output"
}

@test "update with new device rules replaces the device program instead of stacking one" {
	skip_if_runc "runc update leaves device rules alone"
	device_node loopctl 10 237
	set_args /bin/sh -c '
		try() { if (: </tmp/loopctl) 2>/dev/null; then echo "$1 read-ok"; else echo "$1 denied"; fi; }
		while [ ! -e /tmp/go1 ]; do sleep 0.02; done; try 1
		while [ ! -e /tmp/go2 ]; do sleep 0.02; done; try 2
		while [ ! -e /tmp/go3 ]; do sleep 0.02; done; try 3
		exec sleep 1000'
	run_detached "$CID"
	local before=
	if command -v bpftool >/dev/null; then
		run device_programs
		assert_success
		[[ ${#lines[@]} -eq 1 ]] || fail "expected one device program, got: $output"
		before=$output
	fi
	touch "$BUNDLE/rootfs/tmp/go1"
	wait_for_output "$CID" "1 denied"

	cat >"$BATS_TEST_TMPDIR/res.json" <<-'JSON'
		{"devices": [{"allow": false, "access": "rwm"}, {"allow": true, "type": "c", "major": 10, "minor": 237, "access": "r"}]}
	JSON
	run runtime update -r "$BATS_TEST_TMPDIR/res.json" "$CID"
	assert_success
	touch "$BUNDLE/rootfs/tmp/go2"
	wait_for_output "$CID" "2 read-ok"
	if [[ -n $before ]]; then
		run device_programs
		assert_success
		[[ ${#lines[@]} -eq 1 ]] || fail "expected one device program after update, got: $output"
		[[ $output != "$before" ]] || fail "update kept the old program: $output"
	fi

	run runtime update -r - "$CID" <<<'{"devices": [{"allow": false, "access": "rwm"}]}'
	assert_success
	touch "$BUNDLE/rootfs/tmp/go3"
	wait_for_output "$CID" "3 denied"
	if [[ -n $before ]]; then
		run device_programs
		[[ ${#lines[@]} -eq 1 ]] || fail "expected one device program after the second update, got: $output"
	else
		skip "bpftool is missing: the program count was not checked (apt-get install bpftool)"
	fi
}

@test "hugetlb, the controller this cgroup2 hierarchy has, is limited in the v2 cgroup" {
	[[ -f $V2/cgroup.controllers ]] && grep -qw hugetlb "$V2/cgroup.controllers" ||
		skip "no hugetlb controller in this host's cgroup2 hierarchy"
	[[ -n $(ls "$V2"/*/hugetlb.2MB.max 2>/dev/null) || -d /sys/kernel/mm/hugepages/hugepages-2048kB ]] ||
		skip "no 2MB huge pages on this host"
	update_config '.linux.resources.hugepageLimits = [{"pageSize": "2MB", "limit": 4194304}]'
	create_container "$CID"
	run cat "$V2$CG/hugetlb.2MB.max"
	assert_output 4194304
}

@test "memory or pids limits fail create with a clear error when cgroup2 lacks the controller" {
	grep -qw memory "$V2/cgroup.controllers" && skip "this host's cgroup2 hierarchy has the memory controller"
	update_config '.linux.resources.memory = {"limit": 67108864}'
	try_create --bundle "$BUNDLE" "$CID"
	[[ $status -ne 0 ]] || fail "create succeeded without a memory controller"
	if ! is_runc; then
		assert_stderr_contains "linux.resources.memory: no memory controller on this host"
	fi
	[[ ! -e $V2$CG ]] || fail "the failed create left $V2$CG"

	grep -qw pids "$V2/cgroup.controllers" && skip "this host's cgroup2 hierarchy has the pids controller"
	update_config 'del(.linux.resources.memory) | .linux.resources.pids = {"limit": 10}'
	try_create --bundle "$BUNDLE" "$CID"
	[[ $status -ne 0 ]] || fail "create succeeded without a pids controller"
	if ! is_runc; then
		assert_stderr_contains "linux.resources.pids: no pids controller on this host"
	fi
	[[ ! -e $V2$CG ]] || fail "the failed create left $V2$CG"
}

@test "update of a limit cgroup2 has no controller for fails with a clear error" {
	grep -qw pids "$V2/cgroup.controllers" && skip "this host's cgroup2 hierarchy has the pids controller"
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run --separate-stderr runtime update --pids-limit 10 "$CID"
	assert_failure
	if ! is_runc; then
		assert_stderr_contains "linux.resources.pids: no pids controller on this host"
	fi
}

@test "features says cgroup v2 is supported" {
	run jq -r '.linux.cgroup.v2' < <(runtime features)
	assert_output true
}

@test "zygote: a container with a cgroup namespace takes a rootfs template and mounts cgroup2 as a cold one does" {
	skip_if_runc "zygote mode is forkbox's own"
	# runc spec's template on cgroup v2 hosts (and podman's default there).
	update_config '.linux.namespaces |= if any(.[]; .type == "cgroup") then . else . + [{"type": "cgroup"}] end'
	set_args /bin/sh -c 'cat /proc/self/cgroup; ls /sys/fs/cgroup/cgroup.procs; grep -E " - cgroup2? " /proc/self/mountinfo | cut -d" " -f4- | sort'
	runtime run --bundle "$BUNDLE" "$CID" >"$BATS_TEST_TMPDIR/cold" 2>&1 || fail "cold run: $(cat "$BATS_TEST_TMPDIR/cold")"
	local sock=$BATS_TEST_TMPDIR/zygote.sock
	start_v2_daemon "$sock"
	runtime --zygote="$sock" --debug run --bundle "$BUNDLE" "$CID" >"$BATS_TEST_TMPDIR/warm" 2>"$BATS_TEST_TMPDIR/warm.err"
	grep -q "zygote: warm rootfs" "$BATS_TEST_TMPDIR/warm.err" || fail "no rootfs template: $(cat "$BATS_TEST_TMPDIR/warm.err")"
	diff "$BATS_TEST_TMPDIR/cold" "$BATS_TEST_TMPDIR/warm" || fail "a rootfs template differs from a cold container"
	run cat "$BATS_TEST_TMPDIR/warm"
	# One fresh cgroup2 mount, rooted at the container's cgroup, read-only as runc's template asks.
	assert_line "0::/"
	assert_line "/sys/fs/cgroup/cgroup.procs"
	assert_line --regexp "^/ /sys/fs/cgroup ro,.* - cgroup2 cgroup rw"
	refute_line --partial "$CID"
}

@test "zygote: a rootfs template brings the device program loaded, the same program a cold create loads (no device rules in the spec)" {
	skip_if_runc "zygote mode is forkbox's own"
	command -v bpftool >/dev/null || skip "bpftool is missing (apt-get install bpftool)"
	device_node loopctl 10 237
	# No device rules: the program is the deny-all's with the default devices (Plan::resources).
	update_config 'del(.linux.resources.devices)'
	set_args /bin/sh -c 'if (: </tmp/loopctl) 2>/dev/null; then echo read-ok; else echo denied; fi'
	create_container "$CID"
	local cold_tag
	cold_tag=$(program_tag) || fail "cold: $cold_tag"
	runtime delete --force "$CID"
	local sock=$BATS_TEST_TMPDIR/zygote.sock
	start_v2_daemon "$sock"
	runtime --zygote="$sock" --debug create --bundle "$BUNDLE" "$CID" \
		</dev/null >"$BATS_TEST_TMPDIR/$CID.out" 2>"$BATS_TEST_TMPDIR/$CID.err" 3>&- 4>&-
	grep -q "zygote: warm rootfs.* and its device program loaded" "$BATS_TEST_TMPDIR/$CID.err" ||
		fail "no device program from the template: $(cat "$BATS_TEST_TMPDIR/$CID.err")"
	local warm_tag
	warm_tag=$(program_tag) || fail "warm: $warm_tag"
	[[ -n $cold_tag && $warm_tag == "$cold_tag" ]] || fail "device programs differ: cold $cold_tag, warm $warm_tag"
	run runtime start "$CID"
	assert_success
	wait_for_output "$CID" denied
}
