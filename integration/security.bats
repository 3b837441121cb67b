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
@test "a bind mount onto /proc is refused" {
	mkdir -p "$BATS_TEST_TMPDIR/fakeproc"
	update_config '.mounts += [{"destination": "/proc", "type": "bind", "source": $s, "options": ["rbind"]}]' \
		--arg s "$BATS_TEST_TMPDIR/fakeproc"
	set_args /bin/true
	try_create --bundle "$BUNDLE" "$CID"
	assert_failure
	assert_stderr_contains "/proc"
	[ ! -e "$ROOT/$CID" ]
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
