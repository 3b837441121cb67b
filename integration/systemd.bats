#!/usr/bin/env bats
# The systemd cgroup driver (--systemd-cgroup), against a real systemd: the fixture of
# systemd-helpers.bash boots systemd as PID 1 of fresh namespaces once per file, and every
# runtime call runs inside it (runtime() is sd_exec'd).

load helpers
load systemd-helpers

setup_file() {
	sd_boot
}

teardown_file() {
	sd_shutdown
}

# Every runtime call runs inside the fixture, from its fbx-caller cgroup.
runtime() {
	sd_exec "$FORKBOX" --root "$ROOT" "$@"
}

setup() {
	[[ -n ${SD_PID:-} ]] || skip "no systemd fixture"
	setup_bundle
}

teardown() {
	fb_teardown
	sd_forget_units "$CID"
}

@test "fixture: systemd runs as PID 1 of its own namespaces, with private /run, /dev and cgroups" {
	run sd_systemctl is-system-running
	assert_output running
	# Its cgroup namespace's root is the fixture's cgroup: what it sees as / is ours.
	run sd_exec cat /proc/1/cgroup
	assert_line "1:cpu:/init.scope"
	[[ -d $(sd_cgroup_dir cpu)/init.scope ]]
	# Nothing of the boot sequence ran: no tmpfiles, no journal, no udev.
	run sd_systemctl list-units --no-legend --plain --state=active '*.service'
	refute_output --partial tmpfiles
	refute_output --partial journald
	run sd_systemctl is-enabled systemd-tmpfiles-setup.service
	assert_output masked-runtime
	# /proc/sys and /sys are read-only inside; /run and /dev are its own.
	run sd_exec sh -c 'echo 1 >/proc/sys/kernel/sysrq'
	assert_failure
	run sd_exec touch /sys/kernel/fbx-test
	assert_failure
	run sd_exec findmnt -n -o FSTYPE /run
	assert_output tmpfs
	run sd_exec findmnt -n -o SOURCE /dev/console
	assert_output --partial "$SD_NAME/systemd.log"
}

@test "fixture: its system bus starts on demand and stops again" {
	sd_start_dbus
	run sd_exec busctl --system call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
		org.freedesktop.DBus.Properties Get ss org.freedesktop.systemd1.Manager Version
	assert_success
	assert_output --partial 'v s "252'
	sd_stop_dbus
	run sd_exec busctl --system status
	assert_failure
}

@test "fixture: runc --systemd-cgroup run inside gets a delegated scope with its limits" {
	[[ -x /usr/sbin/runc ]] || skip "no /usr/sbin/runc"
	update_config '.linux.cgroupsPath = $p | .linux.resources.memory = {limit: 67108864} | .linux.resources.pids = {limit: 33}' \
		--arg p "system.slice:fbx:$CID"
	set_args /bin/sh -c 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes; sleep 100'
	sd_exec /usr/sbin/runc --root "$ROOT-runc" --systemd-cgroup run -d --bundle "$BUNDLE" "$CID" \
		</dev/null >"$BATS_TEST_TMPDIR/$CID.out" 2>&1 3>&- 4>&-
	run sd_unit_property "fbx-$CID.scope" Delegate
	assert_output yes
	run sd_unit_property "fbx-$CID.scope" MemoryLimit
	assert_output 67108864
	run sd_unit_property "fbx-$CID.scope" TasksMax
	assert_output 33
	wait_for_output "$CID" 67108864
	sd_exec /usr/sbin/runc --root "$ROOT-runc" delete --force "$CID"
	rm -rf "$ROOT-runc"
}

@test "create, start, exec, kill and delete: a delegated scope in system.slice, gone after delete" {
	set_cgroups_path "system.slice:fbx:$CID"
	set_args /bin/sh -c 'echo started; exec sleep 100'
	sd_create "$CID" || fail "create: $(container_err "$CID")"
	local unit=fbx-$CID.scope
	run sd_unit_property "$unit" ActiveState
	assert_output active
	run sd_unit_property "$unit" Delegate
	assert_output yes
	run sd_unit_property "$unit" Slice
	assert_output system.slice
	run sd_unit_property "$unit" ControlGroup
	assert_output "/system.slice/$unit"
	[[ $(container_status "$CID") == created ]]
	runtime start "$CID"
	wait_for_output "$CID" started
	local pid
	pid=$(container_pid "$CID")
	run cgroup_of "$pid"
	assert_output "/system.slice/$unit"
	run cgroup_of "$pid" memory
	assert_output "/system.slice/$unit"
	# An exec'd process joins the scope too.
	run runtime exec "$CID" cat /proc/self/cgroup
	assert_success
	assert_line "4:memory:/system.slice/$unit"
	assert_line "9:name=systemd:/system.slice/$unit"
	runtime kill "$CID" KILL
	wait_for_status "$CID" stopped
	runtime delete "$CID"
	assert_unit_gone "$unit"
	assert_no_cgroups_left "$unit"
}

@test "every process of the container is in its scope in every hierarchy, devices and cpuacct too" {
	set_cgroups_path "system.slice:fbx:$CID"
	set_args /bin/sleep 100
	sd_create "$CID" || fail "create: $(container_err "$CID")"
	local pid
	pid=$(container_pid "$CID")
	# Once systemd has settled (it applies a unit's cgroup settings after the start job).
	sleep 0.5
	skip_if_runc "runc 1.1.5 leaves the container's first process in system.slice's devices cgroup: it sets the device policy after the start, and systemd 252 then moves the slice's processes up"
	assert_in_cgroup "$pid" "/system.slice/fbx-$CID.scope"
	runtime start "$CID"
	run runtime exec "$CID" sh -c 'sleep 100 & cat /proc/$!/cgroup'
	assert_success
	refute_output --regexp ":/system.slice$|:/fbx-caller|:/$"
}

@test "the default cgroupsPath is <runtime>-<id>.scope in system.slice" {
	set_args /bin/true
	run runtime --systemd-cgroup run --bundle "$BUNDLE" "$CID"
	assert_success
	# Gone once run has deleted the container.
	local prefix=forkbox
	is_runc && prefix=runc
	assert_unit_gone "$prefix-$CID.scope"
	set_args /bin/sh -c 'cat /proc/self/cgroup'
	run runtime --systemd-cgroup run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_line "9:name=systemd:/system.slice/$prefix-$CID.scope"
}

@test "limits are the unit's properties and its cgroup files; devices outside the rules are refused" {
	set_cgroups_path "system.slice:fbx:$CID"
	# /dev/tty0 (c 4:0) is made in the container but not allowed by its device rules.
	update_config '.linux.resources.memory = {limit: 67108864}
		| .linux.resources.pids = {limit: 33}
		| .linux.resources.cpu = {shares: 512, quota: 50000, period: 100000, cpus: "0", mems: "0"}
		| .linux.devices += [{path: "/dev/tty0", type: "c", major: 4, minor: 0, fileMode: 438}]'
	set_args /bin/sh -c 'head -c1 /dev/tty0; echo opened; exec sleep 100'
	sd_create "$CID" || fail "create: $(container_err "$CID")"
	local unit=fbx-$CID.scope
	run sd_systemctl show -p MemoryLimit -p TasksMax -p CPUShares -p CPUQuotaPerSecUSec -p CPUQuotaPeriodUSec \
		-p AllowedCPUs -p DevicePolicy "$unit"
	assert_line MemoryLimit=67108864
	assert_line TasksMax=33
	assert_line CPUShares=512
	assert_line CPUQuotaPerSecUSec=500ms
	assert_line CPUQuotaPeriodUSec=100ms
	assert_line AllowedCPUs=0
	assert_line DevicePolicy=strict
	run sd_unit_property "$unit" DeviceAllow
	assert_output --partial "/dev/char/1:3 rwm"
	local d=/system.slice/$unit
	[[ $(cat "$(sd_cgroup_dir memory)$d/memory.limit_in_bytes") == 67108864 ]]
	[[ $(cat "$(sd_cgroup_dir pids)$d/pids.max") == 33 ]]
	[[ $(cat "$(sd_cgroup_dir cpu)$d/cpu.shares") == 512 ]]
	[[ $(cat "$(sd_cgroup_dir cpu)$d/cpu.cfs_quota_us") == 50000 ]]
	[[ $(cat "$(sd_cgroup_dir cpuset)$d/cpuset.cpus") == 0 ]]
	run cat "$(sd_cgroup_dir devices)$d/devices.list"
	assert_line "c 1:3 rwm"
	refute_line "a *:* rwm"
	runtime start "$CID"
	# An exec'd process and the container's first one (its shell's head) are refused.
	run runtime exec "$CID" sh -c 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes; head -c1 /dev/tty0'
	assert_line 67108864
	assert_output --partial "Operation not permitted"
	skip_if_runc "runc 1.1.5's first process is in system.slice's devices cgroup, which allows every device"
	wait_for_output "$CID" opened
	run container_err "$CID"
	assert_output --partial "/dev/tty0: Operation not permitted"
}

@test "update sets the unit's properties and the cgroup files" {
	set_cgroups_path "system.slice:fbx:$CID"
	update_config '.linux.resources.memory = {limit: 67108864} | .linux.resources.pids = {limit: 33}'
	set_args /bin/sleep 100
	sd_create "$CID" || fail "create: $(container_err "$CID")"
	runtime start "$CID"
	local unit=fbx-$CID.scope d=/system.slice/fbx-$CID.scope
	# No --systemd-cgroup: the driver comes from state.json, as podman calls update.
	runtime update --memory 134217728 --pids-limit 50 --cpu-share 256 "$CID"
	run sd_systemctl show -p MemoryLimit -p TasksMax -p CPUShares "$unit"
	assert_line MemoryLimit=134217728
	assert_line TasksMax=50
	assert_line CPUShares=256
	[[ $(cat "$(sd_cgroup_dir memory)$d/memory.limit_in_bytes") == 134217728 ]]
	[[ $(cat "$(sd_cgroup_dir pids)$d/pids.max") == 50 ]]
	[[ $(cat "$(sd_cgroup_dir cpu)$d/cpu.shares") == 256 ]]
	# systemd applying its settings again (a daemon-reload does) keeps the new ones.
	sd_systemctl daemon-reload
	[[ $(cat "$(sd_cgroup_dir memory)$d/memory.limit_in_bytes") == 134217728 ]]
	[[ $(cat "$(sd_cgroup_dir pids)$d/pids.max") == 50 ]]
}

@test "state, ps, pause, resume, exec, kill and delete find the driver in state.json" {
	set_cgroups_path "system.slice:fbx:$CID"
	set_args /bin/sleep 100
	sd_create "$CID" || fail "create: $(container_err "$CID")"
	runtime start "$CID"
	local pid
	pid=$(container_pid "$CID")
	run runtime ps "$CID"
	assert_success
	# runc 1.1.5 lists the devices cgroup of the scope, which its first process is not in.
	is_runc || assert_output --partial " $pid "
	runtime pause "$CID"
	[[ $(container_status "$CID") == paused ]]
	[[ $(cat "$(sd_cgroup_dir freezer)/system.slice/fbx-$CID.scope/freezer.state") == FROZEN ]]
	runtime resume "$CID"
	[[ $(container_status "$CID") == running ]]
	run runtime exec "$CID" cat /proc/self/cgroup
	assert_line "4:memory:/system.slice/fbx-$CID.scope"
	runtime kill "$CID" KILL
	wait_for_status "$CID" stopped
	runtime delete "$CID"
	assert_unit_gone "fbx-$CID.scope"
	assert_no_cgroups_left "fbx-$CID.scope"
}

@test "delete --force of a running container stops its scope" {
	set_cgroups_path "system.slice:fbx:$CID"
	set_args /bin/sleep 100
	sd_create "$CID" || fail "create: $(container_err "$CID")"
	runtime start "$CID"
	runtime delete --force "$CID"
	assert_unit_gone "fbx-$CID.scope"
	assert_no_cgroups_left "fbx-$CID.scope"
}

@test "a create that fails after its unit started (a failing createRuntime hook) leaves no unit and no cgroups" {
	set_cgroups_path "system.slice:fbx:$CID"
	update_config '.hooks.createRuntime = [{path: "/bin/false"}]'
	set_args /bin/sleep 100
	status=0
	sd_create "$CID" || status=$?
	[[ $status -ne 0 ]] || fail "create succeeded with a failing hook"
	# runc leaves the container to delete (runtime-spec: the lifecycle goes on with delete).
	runtime delete --force "$CID" >/dev/null 2>&1 || true
	assert_unit_gone "fbx-$CID.scope"
	assert_no_cgroups_left "fbx-$CID.scope"
}

@test "a slice in a slice: a-b.slice is /a.slice/a-b.slice" {
	local top=fbxt${CID//[^0-9]/}
	set_cgroups_path "$top-inner.slice:fbx:$CID"
	set_args /bin/sh -c 'cat /proc/self/cgroup'
	run runtime --systemd-cgroup run --bundle "$BUNDLE" "$CID"
	sd_systemctl stop "$top.slice" >/dev/null 2>&1 || true
	assert_success
	assert_line "4:memory:/$top.slice/$top-inner.slice/fbx-$CID.scope"
	assert_line "9:name=systemd:/$top.slice/$top-inner.slice/fbx-$CID.scope"
}

@test "a cgroupsPath not of the form slice:prefix:name is runc's error, and nothing is left" {
	local path
	for path in /fbx/$CID "system.slice:$CID" "a:b:c:$CID"; do
		set_cgroups_path "$path"
		status=0
		runtime --systemd-cgroup create --bundle "$BUNDLE" "$CID" </dev/null >"$BATS_TEST_TMPDIR/try.out" \
			2>"$BATS_TEST_TMPDIR/try.err" 3>&- 4>&- || status=$?
		stderr=$(cat "$BATS_TEST_TMPDIR/try.err")
		[[ $status -ne 0 ]] || fail "create with cgroupsPath $path succeeded"
		# (runc's log quotes the quotes: the message in two parts)
		assert_stderr_contains 'expected cgroupsPath to be of format'
		assert_stderr_contains "slice:prefix:name"
		assert_stderr_contains "for systemd cgroups, got"
		assert_stderr_contains "$path"
		run runtime list -q
		refute_output --partial "$CID"
	done
	# A slice that is not one: refused too, with no unit or state left.
	set_cgroups_path "notaslice:fbx:$CID"
	status=0
	runtime --systemd-cgroup create --bundle "$BUNDLE" "$CID" </dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/try.err" 3>&- 4>&- || status=$?
	[[ $status -ne 0 ]]
	run runtime list -q
	refute_output --partial "$CID"
	assert_unit_gone "fbx-$CID.scope"
}

@test "a failed unit of the same name is reset and the create goes on; an active one is refused" {
	skip_if_runc "runc 1.1.5 takes systemd's UnitExists for success: its container then runs in the cgroup of the failed (or someone else's active) unit, which it neither resets nor owns"
	set_cgroups_path "system.slice:fbx:$CID"
	set_args /bin/sleep 100
	local unit=fbx-$CID.scope
	# A scope that systemd stops at its RuntimeMaxSec= fails, and stays until reset.
	sd_exec systemd-run --quiet --scope --unit="$unit" -p RuntimeMaxSec=1 sleep 30 \
		</dev/null >/dev/null 2>&1 3>&- 4>&- || true
	run sd_unit_property "$unit" ActiveState
	assert_output failed
	sd_create "$CID" || fail "create: $(container_err "$CID")"
	run sd_unit_property "$unit" ActiveState
	[[ $output == active ]] || fail "$unit is $output after create: $(container_err "$CID"); $(sd_systemctl status "$unit")"
	local pid
	pid=$(container_pid "$CID")
	run cgroup_of "$pid"
	assert_output "/system.slice/$unit"
	runtime delete --force "$CID"
	# An active unit of that name is someone else's: create fails and leaves it alone.
	sd_exec systemd-run --quiet --scope --unit="$unit" sleep 100 </dev/null >/dev/null 2>&1 3>&- 4>&- &
	FB_PIDS+=($!)
	local i
	for ((i = 0; i < 100; i++)); do
		[[ $(sd_unit_property "$unit" ActiveState) == active ]] && break
		sleep 0.05
	done
	status=0
	sd_create "$CID" || status=$?
	[[ $status -ne 0 ]] || fail "create took over an active unit"
	run container_err "$CID"
	assert_output --partial "already loaded"
	run sd_unit_property "$unit" ActiveState
	assert_output active
	run runtime list -q
	refute_output --partial "$CID"
}

@test "without a system bus the driver talks to /run/systemd/private" {
	set_cgroups_path "system.slice:fbx:$CID"
	set_args /bin/true
	run --separate-stderr runtime --debug --systemd-cgroup run --bundle "$BUNDLE" "$CID"
	assert_success
	is_runc || assert_stderr_contains "through /run/systemd/private"
}

@test "with a system bus the driver talks to systemd through dbus-daemon" {
	sd_start_dbus
	set_cgroups_path "system.slice:fbx:$CID"
	set_args /bin/sleep 100
	run --separate-stderr runtime --debug --systemd-cgroup run -d --bundle "$BUNDLE" "$CID" 3>&- 4>&-
	local rc=$status err=$stderr
	if [[ $rc -eq 0 ]]; then
		runtime delete --force "$CID"
	fi
	sd_stop_dbus
	[[ $rc -eq 0 ]] || fail "run: $err"
	stderr=$err
	is_runc || assert_stderr_contains "through system bus"
	assert_unit_gone "fbx-$CID.scope"
}

@test "a system bus systemd is not on: the driver falls back to /run/systemd/private" {
	skip_if_runc "runc 1.1.5 uses a system bus it can connect to, whether systemd is on it or not"
	# dbus-daemon started by hand: systemd joins the bus only when dbus.service runs.
	sd_exec rm -f /run/dbus/system_bus_socket
	sd_exec dbus-daemon --system --fork --nopidfile --print-pid </dev/null >"$BATS_TEST_TMPDIR/dbus.pid" \
		2>"$BATS_TEST_TMPDIR/dbus.err" 3>&- 4>&- || fail "dbus-daemon: $(cat "$BATS_TEST_TMPDIR/dbus.err")"
	FB_DBUS_PID=$(cat "$BATS_TEST_TMPDIR/dbus.pid")
	sd_exec test -S /run/dbus/system_bus_socket
	set_cgroups_path "system.slice:fbx:$CID"
	set_args /bin/true
	run --separate-stderr runtime --debug --systemd-cgroup run --bundle "$BUNDLE" "$CID"
	sd_exec kill "$FB_DBUS_PID"
	sd_exec rm -f /run/dbus/system_bus_socket
	[[ $status -eq 0 ]] || fail "run: $stderr"
	assert_stderr_contains "using /run/systemd/private"
}

@test "zygote: a warm template's namespaces with the unit's own cgroups, no spare cgroups" {
	skip_if_runc "zygote mode is forkbox's own"
	local sock=$BATS_TEST_TMPDIR/zygote.sock
	sd_exec "$FORKBOX" --log "$BATS_TEST_TMPDIR/daemon.log" daemon --socket "$sock" --pool 1 \
		</dev/null >/dev/null 2>"$BATS_TEST_TMPDIR/daemon.err" 3>&- 4>&- &
	FB_PIDS+=($!)
	local i stats
	for ((i = 0; i < 100; i++)); do
		stats=$(sd_exec "$FORKBOX" daemon --socket "$sock" --stats 2>/dev/null) && break
		sleep 0.05
	done
	[[ -n $stats ]] || fail "no daemon: $(cat "$BATS_TEST_TMPDIR/daemon.err")"
	set_cgroups_path "system.slice:fbx:$CID"
	set_args /bin/sh -c 'cat /proc/self/cgroup'
	# The first request teaches the daemon this key (cold), the second takes a template.
	run runtime --systemd-cgroup --zygote="$sock" run --bundle "$BUNDLE" "$CID"
	assert_success
	for ((i = 0; i < 100; i++)); do
		stats=$(sd_exec "$FORKBOX" daemon --socket "$sock" --stats)
		[[ $stats == *" ready=1 "* ]] && break
		sleep 0.05
	done
	set_cgroups_path "system.slice:fbx:$CID-2"
	run runtime --systemd-cgroup --zygote="$sock" run --bundle "$BUNDLE" "$CID-2"
	assert_success
	assert_line "4:memory:/system.slice/fbx-$CID-2.scope"
	assert_line "6:freezer:/system.slice/fbx-$CID-2.scope"
	assert_line "9:name=systemd:/system.slice/fbx-$CID-2.scope"
	run sd_exec "$FORKBOX" daemon --socket "$sock" --stats
	assert_output --partial "served=1"
	# The daemon (its pid inside the fixture) stops before its spares are looked for.
	local daemon
	daemon=$(sd_exec pgrep -o -f -- "^$FORKBOX --log [^ ]* daemon --socket $sock")
	[[ -n $daemon ]] && sd_exec kill -TERM $daemon
	for ((i = 0; i < 100; i++)); do
		sd_exec test -e "/proc/$daemon" || break
		sleep 0.05
	done
	assert_unit_gone "fbx-$CID-2.scope"
	assert_no_cgroups_left ".zygote-*"
	assert_no_cgroups_left "fbx-$CID*"
}
