#!/usr/bin/env bats
# Escape classes that have hit runc and crun, each tried against the runtime.
# (Issue #3 extends this file: /proc/self/exe overwrite through exec, seccomp profiles.)

load helpers

# CVE-2021-30465 class: a mount destination that is a symlink in the image must be
# resolved inside the rootfs, never on the host.
@test "a mount destination that is an absolute symlink to a host path stays inside the rootfs" {
	local host_dir=$BATS_TEST_TMPDIR/host-target
	mkdir -p "$host_dir"
	ln -s "$host_dir" "$BUNDLE/rootfs/evil"
	update_config '.mounts += [{"destination": "/evil", "type": "tmpfs", "source": "tmpfs"}]'
	run_sh 'touch /evil/from-container && grep -c " - tmpfs " /proc/self/mountinfo >/dev/null && echo done'
	assert_success
	assert_output done
	# Nothing was mounted on, or written into, the host directory.
	[ ! -e "$host_dir/from-container" ] || fail "the container wrote into the host directory"
	run grep -F " $host_dir " /proc/self/mountinfo
	assert_failure
	# The symlink's target was created inside the rootfs instead.
	[ -d "$BUNDLE/rootfs$host_dir" ] || fail "the mount did not land inside the rootfs"
}

@test "a mount destination climbing out with .. through a symlink stays inside the rootfs" {
	local host_dir=$BATS_TEST_TMPDIR/outside
	mkdir -p "$host_dir"
	ln -s ../../../../../../../../.."$host_dir" "$BUNDLE/rootfs/climb"
	update_config '.mounts += [{"destination": "/climb", "type": "tmpfs", "source": "tmpfs"}]'
	run_sh 'touch /climb/x && echo done'
	assert_success
	[ ! -e "$host_dir/x" ] || fail "the container wrote outside its rootfs"
	run grep -F " $host_dir " /proc/self/mountinfo
	assert_failure
}

@test "a mount destination that reaches into /proc through a symlink is refused" {
	ln -s /proc/sys/kernel "$BUNDLE/rootfs/kernel-link"
	mkdir -p "$BATS_TEST_TMPDIR/src"
	update_config '.mounts += [{"destination": "/kernel-link", "type": "bind", "source": $s, "options": ["bind"]}]' \
		--arg s "$BATS_TEST_TMPDIR/src"
	set_args /bin/true
	try_create --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "resolves into /proc"
	[ ! -e "$ROOT/$CID" ]
}

# CVE-2019-16884 class: nothing may be mounted over /proc (or part of it) except procfs.
@test "a bind mount of a directory that is not a procfs onto /proc is refused" {
	mkdir -p "$BATS_TEST_TMPDIR/fakeproc"
	update_config '.mounts += [{"destination": "/proc", "type": "bind", "source": $s, "options": ["rbind"]}]' \
		--arg s "$BATS_TEST_TMPDIR/fakeproc"
	set_args /bin/true
	try_create --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "/proc"
	[ ! -e "$ROOT/$CID" ]
}

@test "a bind of a real procfs onto /proc is accepted, as runc does (a container sharing the host's pid namespace)" {
	remove_namespace pid
	update_config '.mounts |= map(select(.destination != "/proc"))
		| .mounts += [{"destination": "/proc", "type": "bind", "source": "/proc", "options": ["rbind"]}]'
	run_sh 'test -r /proc/1/stat && echo proc-ok'
	assert_success
	assert_output proc-ok
}

@test "a bind mount over a file under /proc is refused" {
	update_config '.mounts += [{"destination": "/proc/self/attr/exec", "type": "bind", "source": "/dev/null", "options": ["bind"]}]'
	set_args /bin/true
	try_create --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "/proc"
}

# CVE-2024-21626 class: no host fd, and no host working directory, reaches the container.
@test "the container process has only fds 0, 1 and 2 and its cwd inside the rootfs" {
	exec 7</etc/hostname
	run_sh 'ls /proc/self/fd; echo cwd=$(readlink /proc/self/cwd); ls /proc/self/cwd/ >/dev/null && echo listed'
	exec 7<&-
	assert_success
	# ls itself opens one directory fd (3); nothing else may be there.
	run grep -c -E '^[0-9]+$' <<<"$output"
	[ "$output" -le 4 ] || fail "unexpected fds in the container"
	run_sh 'for f in /proc/self/fd/*; do readlink "$f"; done'
	refute_output --partial /etc/hostname
	run_sh 'readlink /proc/self/cwd'
	assert_output /
}

# CVE-2022-29162 class: inheritable and ambient capabilities are exactly what the spec says.
@test "inheritable and ambient capabilities are empty unless the spec names them" {
	update_config '.process.capabilities.inheritable = [] | .process.capabilities.ambient = []'
	run_helper caps
	assert_success
	assert_line --regexp '^CapInh:[[:space:]]+0000000000000000$'
	assert_line --regexp '^CapAmb:[[:space:]]+0000000000000000$'
}

@test "without CAP_SYS_ADMIN the container cannot remount /proc/sys writable or unmount a mask" {
	run_sh 'mount -o remount,rw /proc/sys 2>&1; echo "remount=$?"; umount /proc/kcore 2>&1; echo "umount=$?"; echo 1 > /proc/sys/kernel/domainname 2>&1; echo "write=$?"'
	assert_success
	refute_line "remount=0"
	refute_line "umount=0"
	refute_line "write=0"
}

# CVE-2019-5736 class (the exec half comes with #4): until execve, init is a copy of the
# forkbox process; it is non-dumpable, so its /proc files (exe included) stay root's and
# a container user cannot open them.
@test "the container's init is not dumpable while it waits for start" {
	update_config '.process.user.uid = 1000 | .process.user.gid = 1000'
	set_args /bin/true
	create_container "$CID"
	local pid
	pid=$(runtime state "$CID" | jq -r .pid)
	run awk '/^Uid:/ {print $2}' "/proc/$pid/status"
	assert_output 1000
	# A dumpable process's /proc files belong to its uid; a non-dumpable one's to root.
	run stat -c %u "/proc/$pid/environ"
	assert_output 0
}

@test "exec --cwd through a leaked fd (/proc/self/fd/N) never lands outside the rootfs (CVE-2024-21626)" {
	setup_bundle /bin/fbhelper sleep 100
	run_detached "$CID"
	wait_for_status "$CID" running
	local n
	for n in $(seq 3 20); do
		run runtime exec --cwd "/proc/self/fd/$n" "$CID" /bin/fbhelper cwd
		if [[ $status -eq 0 ]]; then
			# Whatever it reached must be inside the container: a path from its own root.
			[[ $output == /* && $output != *unreachable* ]] || fail "fd $n: cwd $output is outside the rootfs"
		fi
	done
}

@test "a process.cwd through a leaked fd (/proc/self/fd/N) never lands outside the rootfs (CVE-2024-21626)" {
	local n
	for n in 3 4 5 6 7 8; do
		setup_bundle /bin/fbhelper cwd
		update_config ".process.cwd = \"/proc/self/fd/$n\""
		run runtime run --bundle "$BUNDLE" "$CID-$n"
		if [[ $status -eq 0 ]]; then
			[[ $output == /* && $output != *unreachable* ]] || fail "fd $n: cwd $output is outside the rootfs"
		fi
	done
}

# TIOCSTI class (bubblewrap's CVE-2017-5226, firejail's CVE-2016-7545): a process that shares
# its caller's session can type into the caller's terminal, whose shell then runs it. Every
# container process gets a session of its own (runc's setsid), so the terminal on its stdin
# is not its controlling one and TIOCSTI needs CAP_SYS_ADMIN, which the template lacks.
@test "a container (run and exec) with the caller's terminal on stdin cannot type into it (TIOCSTI)" {
	command -v script >/dev/null || skip "script (bsdutils) is not installed"
	# The control: the helper in the terminal's own session types into it.
	run script -qec "$FBHELPER syscall tiocsti" /dev/null </dev/null
	assert_success
	[[ $output == *"tiocsti errno=0"* ]] || fail "the control could not type into its terminal: $output"

	setup_bundle /bin/fbhelper syscall tiocsti
	run script -qec "$FORKBOX --root $ROOT run --bundle $BUNDLE $CID" /dev/null </dev/null
	assert_success
	[[ $output == *"tiocsti errno=1"* ]] || fail "run: $output"

	setup_bundle /bin/fbhelper sleep 100
	run_detached "$CID"
	wait_for_status "$CID" running
	run script -qec "$FORKBOX --root $ROOT exec $CID /bin/fbhelper syscall tiocsti" /dev/null </dev/null
	assert_success
	[[ $output == *"tiocsti errno=1"* ]] || fail "exec: $output"
}

# ---- the default seccomp profile `spec` writes (issue #3) ----
# Most calls below also need a capability the template does not grant, so they would fail
# with EPERM anyway; unshare(CLONE_NEWUSER), keyctl and PTRACE_TRACEME need none, and init_module
# and kexec_load answer ENOSYS on kernels built without them: for those, EPERM is the
# profile's answer (the control test shows them succeeding without it).

# use_default_seccomp: $BUNDLE runs with the profile `spec` wrote. runc's template has none:
# against runc the tests borrow build/forkbox's, which also shows the profile works there.
use_default_seccomp() {
	if jq -e '.linux.seccomp' "$BUNDLE/config.json" >/dev/null; then
		return 0
	fi
	is_runc || fail "spec wrote no linux.seccomp"
	local fb=$REPO_DIR/build/forkbox dir=$BATS_TEST_TMPDIR/forkbox-spec
	[[ -x $fb ]] || skip "runc: its spec has no seccomp profile and build/forkbox is not built"
	mkdir -p "$dir"
	"$fb" spec --bundle "$dir"
	update_config '.linux.seccomp = $s' --argjson s "$(jq .linux.seccomp "$dir/config.json")"
}

@test "the default seccomp profile refuses mount, unshare, ptrace, bpf, kexec_load, init_module and reboot with EPERM" {
	use_default_seccomp
	# The template grants no CAP_SYS_ADMIN (nor CAP_SYS_PTRACE, CAP_SYS_BOOT, CAP_SYS_MODULE).
	run jq -r '.process.capabilities.bounding[]' "$BUNDLE/config.json"
	refute_line CAP_SYS_ADMIN
	refute_line CAP_SYS_BOOT
	local calls=(mount umount2 unshare-user setns pivot_root ptrace bpf perf_event_open kexec_load
		init_module finit_module delete_module reboot swapon keyctl userfaultfd)
	run_helper syscall "${calls[@]}"
	assert_success
	local c
	for c in "${calls[@]}"; do
		assert_line "$c errno=1"
	done
}

@test "without linux.seccomp the unprivileged calls succeed: the profile is what refuses them" {
	update_config 'del(.linux.seccomp)'
	# ptrace last: once traced, a signal would stop the helper for its parent, the runtime.
	run_helper syscall unshare-user keyctl ptrace
	assert_success
	assert_line "unshare-user errno=0"
	assert_line "keyctl errno=0"
	assert_line "ptrace errno=0"
}

@test "the default seccomp profile allows clone without namespace flags and answers clone3 with ENOSYS" {
	use_default_seccomp
	run_helper syscall clone clone-newuser clone3
	assert_success
	assert_line "clone errno=0"
	assert_line "clone-newuser errno=1"
	assert_line "clone3 errno=38"
}

@test "ordinary work runs under the default seccomp profile: busybox sh, ls, cat, date, sleep, fork" {
	use_default_seccomp
	run_sh 'grep "^Seccomp:" /proc/self/status
		ls / >/dev/null && cat /etc/passwd >/dev/null && date +%s >/dev/null && sleep 0.1 || exit 1
		echo hello >/dev/shm/f && cat /dev/shm/f && rm /dev/shm/f
		( echo subshell ) && echo "$(echo substitution)"
		/bin/fbhelper echo child & wait $! && echo waited
		echo a b | wc -w'
	assert_success
	assert_line --regexp '^Seccomp:[[:space:]]+2$'
	assert_line hello
	assert_line subshell
	assert_line substitution
	assert_line child
	assert_line waited
	assert_line --regexp '^ *2$'
}

@test "the compiled seccomp program is cached in the state root and a damaged entry is compiled again" {
	skip_if_runc "forkbox's seccomp cache"
	run_helper syscall mount
	assert_success
	assert_output "mount errno=1"
	local entries=("$ROOT"/.seccomp=*)
	[ "${#entries[@]}" -eq 1 ] && [ -s "${entries[0]}" ] || fail "no cache entry in $ROOT: $(ls -a "$ROOT")"
	# `list` shows containers only.
	run runtime list -q
	assert_output ""
	echo garbage >"${entries[0]}"
	CID=$CID-again run_helper syscall mount
	assert_success
	assert_output "mount errno=1"
	[ "$(stat -c %s "${entries[0]}")" -gt 100 ] || fail "the damaged entry was not replaced"
}

@test "a cached profile's program is used without parsing the profile, and a changed profile is compiled anew" {
	skip_if_runc "forkbox's seccomp cache"
	run_helper syscall mount
	assert_output "mount errno=1"
	set_args /bin/fbhelper syscall mount
	run --separate-stderr runtime --debug run --bundle "$BUNDLE" "$CID-2"
	assert_success
	assert_output "mount errno=1"
	[[ $stderr == *"the profile's program is cached"* ]] || fail "the profile was parsed: $stderr"
	# Another text is another profile: never the old program.
	update_config '.linux.seccomp.defaultErrnoRet = 38'
	run --separate-stderr runtime --debug run --bundle "$BUNDLE" "$CID-3"
	assert_success
	assert_output "mount errno=38"
	[[ $stderr != *"the profile's program is cached"* ]] || fail "a changed profile was served from the cache"
	local entries=("$ROOT"/.seccomp=*)
	assert_equal "${#entries[@]}" 2
}

# ---------------------------------------------------------------------------------------
# CVE-2019-5736 class, the exec half (issue #3): the host's runtime binary behind
# /proc/self/exe. forkbox's container process is a fork of the forkbox binary, so its
# final exec goes through a sealed memfd stub (libforkbox/process/exec_guard.hpp): a program
# starting "#!/proc/self/exe" must get the stub as its interpreter, never the host file.
# Each test runs the runtime from a copy in its tmpdir and compares the copy's sha256
# before and after, so a failure damages only the copy.

# use_runtime_copy: points $FORKBOX (for this test) at a copy of the runtime binary named
# fbhost-runtime, whose path the attacker below looks for.
use_runtime_copy() {
	RUNTIME_COPY=$BATS_TEST_TMPDIR/fbhost-runtime
	cp "$FORKBOX" "$RUNTIME_COPY"
	FORKBOX=$RUNTIME_COPY
	RUNTIME_SHA=$(sha256sum <"$RUNTIME_COPY")
}

# assert_runtime_copy_unchanged: the copy still has the sha256 use_runtime_copy saw.
assert_runtime_copy_unchanged() {
	[[ $(sha256sum <"$RUNTIME_COPY") == "$RUNTIME_SHA" ]] || fail "the container modified the host's runtime binary"
}

# add_self_exe_script PATH (in $BUNDLE/rootfs): a script whose interpreter is /proc/self/exe.
add_self_exe_script() {
	printf '#!/proc/self/exe\n' >"$BUNDLE/rootfs$1"
	chmod 755 "$BUNDLE/rootfs$1"
}

# exec_failure_flag: `run`'s status check for a container process whose exec fails:
# forkbox exits 127 (runc's code differs, so any failure there).
exec_failure_flag() {
	if is_runc; then echo '!'; else echo -127; fi
}

# refute_exe_hunt_hits ID: the exe-hunt attacker in container ID finished and neither
# opened nor wrote any binary with fbhost-runtime in its path.
refute_exe_hunt_hits() {
	wait_for_output "$1" "hunt done" 30
	run container_out "$1"
	refute_line --regexp '^(open|wrote) '
	assert_line "hunt done"
}

@test "a container process that is a #!/proc/self/exe script cannot reach the host's runtime binary" {
	use_runtime_copy
	add_self_exe_script /evil
	set_args /evil
	run "$(exec_failure_flag)" --separate-stderr runtime run --bundle "$BUNDLE" "$CID"
	# forkbox: the stub stood in as the interpreter and refused to run as one.
	if ! is_runc; then
		assert_failure 127
		assert_stderr_contains "forkbox-exec: not to be run directly"
	fi
	assert_runtime_copy_unchanged
}

@test "a container sharing the pid namespace cannot open the runtime binary through /proc/PID/exe" {
	use_runtime_copy
	# The attacker: holds every /proc/PID/exe naming fbhost-runtime it can open, then writes.
	set_args /bin/fbhelper exe-hunt 3 fbhost-runtime
	run_detached attacker
	wait_for_output attacker hunting
	local attacker_pid
	attacker_pid=$(container_pid attacker)
	# The victims join its pid namespace and exec a #!/proc/self/exe script (their init,
	# still the runtime binary before that, is not dumpable: readlink and open fail).
	local victim=$BATS_TEST_TMPDIR/victim i
	make_bundle "$victim" /evil
	printf '#!/proc/self/exe\n' >"$victim/rootfs/evil"
	chmod 755 "$victim/rootfs/evil"
	# A 5% cpu quota stretches the victims' life, and so the attacker's window (a
	# runtime without the guard is then caught every time, not now and then).
	jq_edit "$victim/config.json" '.linux.namespaces |= map(if .type == "pid" then .path = $p else . end)
		| .linux.resources.cpu = {"quota": 1000, "period": 20000}' --arg p "/proc/$attacker_pid/ns/pid"
	for i in 1 2 3 4 5; do
		run "$(exec_failure_flag)" runtime run --bundle "$victim" "$CID-victim$i"
	done
	refute_exe_hunt_hits attacker
	assert_runtime_copy_unchanged
}

@test "a process hunting /proc/PID/exe cannot open the runtime binary while exec joins its container" {
	if ! runtime exec --help >/dev/null 2>&1; then
		skip_until_issue 4 "exec is not implemented yet"
	fi
	use_runtime_copy
	add_self_exe_script /evil
	set_args /bin/fbhelper exe-hunt 3 fbhost-runtime
	run_detached "$CID"
	wait_for_output "$CID" hunting
	local i
	for i in 1 2 3 4 5; do
		run "$(exec_failure_flag)" runtime exec "$CID" /evil
		run runtime exec "$CID" /bin/fbhelper true
		assert_success
	done
	refute_exe_hunt_hits "$CID"
	assert_runtime_copy_unchanged
}

# use_read_only_runtime_copy: as use_runtime_copy, with the copy bind-mounted read-only
# onto itself (teardown unmounts it): every open of it for writing fails with EROFS, so
# forkbox execs container programs without the stub (exec_guard.hpp).
use_read_only_runtime_copy() {
	use_runtime_copy
	mount --bind "$RUNTIME_COPY" "$RUNTIME_COPY"
	mount -o remount,bind,ro "$RUNTIME_COPY"
}

@test "a runtime on a read-only mount execs the program without the stub, and still no container can change it" {
	is_runc && skip "forkbox's exec guard"
	use_read_only_runtime_copy
	add_self_exe_script /evil
	set_args /evil
	run --separate-stderr runtime --debug run --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "programs are exec'd without the stub"
	# No stub stood in: the copy itself ran as the script's interpreter, in the container.
	assert_stderr_contains "forkbox: no such command: /evil"
	assert_runtime_copy_unchanged
	# What such a process (or one holding its /proc/PID/exe) could then do with the file,
	# tried as the host's root, who may do more than any container: open it for writing.
	set_args /bin/fbhelper sleep 100
	run_detached "$CID-running"
	wait_for_status "$CID-running" running
	"$FORKBOX" --root "$ROOT" events --interval 1s "$CID-running" >/dev/null 2>&1 &
	local pid=$! i
	FB_PIDS+=("$pid")
	for ((i = 0; i < 100; i++)); do
		[[ $(readlink "/proc/$pid/exe") == "$RUNTIME_COPY" ]] && break
		sleep 0.05
	done
	# CVE-2019-5736's way: hold it, and reopen it for writing once it no longer runs.
	exec 8<"/proc/$pid/exe"
	kill -KILL "$pid"
	wait "$pid" || true
	run sh -c 'exec 3>>/proc/self/fd/8'
	exec 8<&-
	assert_failure
	assert_output --partial "Read-only file system"
	assert_runtime_copy_unchanged
}

@test "without the stub, a failed exec reads as it does through the stub, in init and in exec" {
	is_runc && skip "forkbox's exec guard"
	printf 'not a program' >"$BUNDLE/rootfs/junk"
	chmod 755 "$BUNDLE/rootfs/junk"
	set_args /junk
	run -127 --separate-stderr runtime run --bundle "$BUNDLE" "$CID-stub"
	local stub_status=$status stub_stderr=$stderr
	[[ $stub_stderr == *'exec: "/junk": exec format error'* ]] || fail "through the stub: $stub_stderr"
	set_args /bin/fbhelper sleep 100
	run_detached "$CID-running"
	wait_for_status "$CID-running" running
	run --separate-stderr runtime exec "$CID-running" /junk
	local stub_exec_status=$status stub_exec_stderr=$stderr
	use_read_only_runtime_copy
	set_args /junk
	run -127 --separate-stderr runtime run --bundle "$BUNDLE" "$CID-direct"
	assert_equal "$status" "$stub_status"
	assert_equal "$stderr" "$stub_stderr"
	run --separate-stderr runtime exec "$CID-running" /junk
	assert_equal "$status" "$stub_exec_status"
	assert_equal "$stderr" "$stub_exec_stderr"
	run runtime exec "$CID-running" /bin/fbhelper echo direct
	assert_success
	assert_output direct
}

# The stub is exec'd with execveat on its memfd; a profile refusing execveat (even by
# killing) must neither break the container nor reopen the hole.
@test "a seccomp profile that refuses execveat with an errno still runs the container, guarded" {
	update_config '.linux.seccomp = {"defaultAction": "SCMP_ACT_ALLOW",
		"syscalls": [{"names": ["execveat"], "action": "SCMP_ACT_ERRNO"}]}'
	run_helper echo through
	assert_success
	assert_output through
	use_runtime_copy
	add_self_exe_script /evil
	set_args /evil
	run "$(exec_failure_flag)" --separate-stderr runtime run --bundle "$BUNDLE" "$CID-2"
	if ! is_runc; then
		assert_failure 127
		assert_stderr_contains "forkbox-exec: not to be run directly"
	fi
	assert_runtime_copy_unchanged
}

@test "a seccomp profile that kills on execveat still runs the container, with or without noNewPrivileges" {
	update_config '.linux.seccomp = {"defaultAction": "SCMP_ACT_ALLOW",
		"syscalls": [{"names": ["execveat"], "action": "SCMP_ACT_KILL_PROCESS"}]}'
	run_helper echo nnp
	assert_success
	assert_output nnp
	update_config '.process.noNewPrivileges = false'
	run_helper echo privs
	assert_success
	assert_output privs
}

@test "a container without /proc whose profile refuses execveat runs its process" {
	skip_if_runc "it needs /proc in the container (error closing exec fds: open /proc/self/fd)"
	update_config '.mounts |= map(select(.destination != "/proc"))
		| .linux.maskedPaths = [] | .linux.readonlyPaths = []
		| .linux.seccomp = {"defaultAction": "SCMP_ACT_ALLOW",
			"syscalls": [{"names": ["execveat"], "action": "SCMP_ACT_ERRNO"}]}'
	run_helper echo no proc
	assert_success
	assert_output "no proc"
	add_self_exe_script /evil
	set_args /evil
	# No /proc: the script's interpreter does not exist.
	run -127 --separate-stderr runtime run --bundle "$BUNDLE" "$CID-2"
	assert_stderr_contains 'exec: "/evil": no such file or directory'
}

@test "an exec'd file the kernel cannot run is still reported by exec and run (through the stub)" {
	printf 'not a program\n' >"$BUNDLE/rootfs/junk"
	chmod 755 "$BUNDLE/rootfs/junk"
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	wait_for_status "$CID" running
	run ! --separate-stderr runtime exec "$CID" /junk
	assert_stderr_contains "exec format error"
	run ! --separate-stderr runtime exec --detach "$CID" /junk
	assert_stderr_contains "exec format error"
	set_args /junk
	run ! --separate-stderr runtime run --bundle "$BUNDLE" "$CID-2"
	assert_stderr_contains "exec format error"
}

@test "a rootfs whose /proc or /sys is a symlink fails create: proc and sysfs need an ordinary directory" {
	local d
	for d in proc sys; do
		rm -rf "$BUNDLE/rootfs/$d"
		mkdir -p "$BUNDLE/rootfs/elsewhere-$d"
		ln -s "/elsewhere-$d" "$BUNDLE/rootfs/$d"
		set_args /bin/true
		try_create --bundle "$BUNDLE" "$CID"
		assert_failure
		assert_stderr_contains "must be mounted on ordinary directory"
		[ ! -e "$ROOT/$CID" ]
		rm "$BUNDLE/rootfs/$d"
		mkdir "$BUNDLE/rootfs/$d"
	done
}

# runc's rule: linux.devices are made in the rootfs, and the device cgroup allows only the
# default devices and linux.resources.devices. A device the rules deny stays denied in
# run, in exec, and after an update that does not touch the device rules. /dev/kmsg is
# opened for writing only (nothing is written): a read open needs CAP_SYSLOG when
# kernel.dmesg_restrict is 1, which would fail with EPERM whatever the device cgroup says.
@test "a device in linux.devices but denied by the device rules cannot be opened, in run, exec and after update" {
	update_config '.linux.devices = [{"path": "/dev/kmsg", "type": "c", "major": 1, "minor": 11, "fileMode": 420}]
		| .linux.resources.devices = [{"allow": false, "access": "rwm"}]
		| .linux.cgroupsPath = $p' --arg p "/$CID-dev"
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	run runtime exec "$CID" /bin/sh -c 'test -c /dev/kmsg && echo made; { true >/dev/kmsg; } 2>/dev/null || echo denied'
	assert_success
	assert_output "made
denied"
	run runtime update --pids-limit 50 "$CID"
	assert_success
	run runtime exec "$CID" /bin/sh -c '{ true >/dev/kmsg; } 2>/dev/null || echo denied; echo x >/dev/null && echo null-ok'
	assert_success
	assert_output "denied
null-ok"
}

# runc's specconv: without linux.resources.devices (or without linux.resources at all) a
# container still gets a deny-all and runc's default devices, never its parent's "a *:* rwm".
# The nodes: /dev/kmsg from linux.devices (made, not allowed; opened for writing, as above),
# loop-control (c 10:237) made by the host in the rootfs (no capability needed inside);
# neither is a default device.
no_device_rules_config() {
	update_config '.linux.devices = [{"path": "/dev/kmsg", "type": "c", "major": 1, "minor": 11, "fileMode": 420}]
		| .linux.cgroupsPath = $p | del(.linux.resources.devices)' --arg p "/$CID-dev"
	mknod "$BUNDLE/rootfs/tmp/loopctl" c 10 237
}

# check_default_devices_only: the container's device access as runc's defaults give it, seen
# from `exec` (a process that joins the container's cgroup) and from the v1 devices.list.
check_default_devices_only() {
	run --separate-stderr runtime exec "$CID" /bin/sh -c ': >/dev/kmsg'
	assert_failure
	assert_stderr_contains "can't create /dev/kmsg: Operation not permitted"
	run --separate-stderr runtime exec "$CID" /bin/sh -c ': </tmp/loopctl'
	assert_failure
	assert_stderr_contains "can't open /tmp/loopctl: Operation not permitted"
	run runtime exec "$CID" /bin/sh -c 'echo x >/dev/null && head -c 3 /dev/zero | wc -c && head -c 1 /dev/urandom >/dev/null && test -c /dev/tty && echo ok'
	assert_success
	assert_output "3
ok"
	local list=/sys/fs/cgroup/devices/$CID-dev/devices.list
	if [[ -f $list ]]; then
		run cat "$list"
		refute_line "a *:* rwm"
		assert_line "c 1:3 rwm"
		assert_line "c 136:* rwm"
		assert_line "c 5:2 rwm"
	fi
}

@test "without device rules a container opens only the default devices: others fail with EPERM (run and exec)" {
	no_device_rules_config
	set_args /bin/sh -c ': >/dev/kmsg'
	run --separate-stderr runtime run --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "can't create /dev/kmsg: Operation not permitted"
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	check_default_devices_only
	# An update without device rules leaves them as they are.
	run runtime update --pids-limit 50 "$CID"
	assert_success
	check_default_devices_only
}

@test "without linux.resources at all a container still gets the deny-all and the default devices" {
	no_device_rules_config
	update_config 'del(.linux.resources)'
	set_args /bin/fbhelper sleep 100
	run_detached "$CID"
	check_default_devices_only
}

# CVE-2025-31133 class: masked files are bound over with "/dev/null"; a /dev/null another
# container swapped for a symlink to a procfs file (sharing /dev, racing) made runc bind that
# file, writable, over /proc/keys. A createContainer hook (after /dev is made, before the
# masks) stands in for the racing container, with a harmless target.
@test "masked paths are never bound over with a /dev/null that is not the null device (CVE-2025-31133)" {
	skip_if_runc "runc 1.1 in Debian 12 predates the fix"
	local rootfs=$BUNDLE/rootfs
	echo witness >"$rootfs/witness"
	update_config '.hooks.createContainer = [{"path": "/bin/sh", "args": ["sh", "-c", $swap]}]' \
		--arg swap "rm -f $rootfs/dev/null && ln -s /witness $rootfs/dev/null"
	set_args /bin/fbhelper read /proc/keys
	run --separate-stderr runtime run --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "the container's /dev/null is not the null device"
	run runtime list -q
	assert_output ""
}

# CVE-2025-52881 class: a write meant for one procfs file (a sysctl) redirected to another by
# what is mounted in the container's /proc. Here a tmpfs over /proc/sys/net/ipv4 holds an
# ip_forward that is a symlink to a file of the container's: the sysctl must reach the real
# file (a procfs of the runtime's own) and never the link's target.
@test "linux.sysctl writes are not redirected by mounts or symlinks in the container's /proc (CVE-2025-52881)" {
	skip_if_runc "runc 1.1 in Debian 12 predates the fix"
	local rootfs=$BUNDLE/rootfs
	: >"$rootfs/witness"
	update_config '.linux.sysctl = {"net.ipv4.ip_forward": "1"}
		| .hooks.createContainer = [{"path": "/bin/sh", "args": ["sh", "-c", $swap]}]' \
		--arg swap "mount -t tmpfs tmpfs $rootfs/proc/sys/net/ipv4 && ln -s /witness $rootfs/proc/sys/net/ipv4/ip_forward"
	set_args /bin/fbhelper read /witness
	run --separate-stderr runtime run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_output ""
	[ ! -s "$rootfs/witness" ] || fail "the sysctl was written to the symlink's target"
}

# The same class for process.oomScoreAdj: written through the runtime's /proc, not the
# container's, where a tmpfs over init's /proc/1 could hold a symlink in its place.
@test "oomScoreAdj is not redirected by mounts in the container's /proc (CVE-2025-52881)" {
	skip_if_runc "runc 1.1 in Debian 12 predates the fix"
	local rootfs=$BUNDLE/rootfs
	: >"$rootfs/witness"
	update_config '.process.oomScoreAdj = 500
		| .hooks.createContainer = [{"path": "/bin/sh", "args": ["sh", "-c", $swap]}]' \
		--arg swap "mount -t tmpfs tmpfs $rootfs/proc/1 && ln -s /witness $rootfs/proc/1/oom_score_adj"
	set_args /bin/fbhelper read /witness
	run --separate-stderr runtime run --bundle "$BUNDLE" "$CID"
	assert_success
	assert_output ""
	[ ! -s "$rootfs/witness" ] || fail "oom_score_adj was written to the symlink's target"
}
