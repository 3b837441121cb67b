#!/usr/bin/env bats
# The agent sandbox service (docs/sandbox-protocol.md): `forkbox daemon --socket S` serves
# sandboxes, `forkbox sandbox --socket S [options] -- CMD...` runs one command in a fresh
# one and exits with its code (124 at the deadline).
#
# setup_file copies the binary (the tree's build/forkbox may be rebuilt meanwhile) and
# starts one root daemon on a socket in a fresh directory; teardown_file stops it with
# SIGTERM and checks that it left no cgroup and no mount behind. Tests that need a daemon
# of their own (a user's, --no-sandboxes, one stopped mid-run) start it themselves and
# their teardown stops it.
#
# forkbox only: skipped against runc.

load sandbox-helpers

@test "sandbox: output and exit codes of the command pass through" {
	run --separate-stderr sb -- echo hello
	assert_success
	assert_output "hello"

	run --separate-stderr sb -- sh -c 'exit 3'
	assert_failure 3

	# A command killed by a signal: 128 + N. The command is pid 1 of its pid namespace: the
	# signals it sends itself are ignored (`kill -9 $$` too: docs/sandbox-protocol.md,
	# "Lifetime"), but a fault's SIGSEGV is forced on it.
	run --separate-stderr sb -- python3 -c 'import ctypes; ctypes.string_at(0)'
	assert_failure 139

	# A child killed by SIGKILL, its status passed on by the shell.
	run --separate-stderr sb -- sh -c 'sh -c "kill -9 \$\$"; exit $?'
	assert_failure 137
}

@test "sandbox: the deadline kills the whole sandbox: exit 124, a message, no process left" {
	local marker=$((98765000 + $$ % 1000))
	run --separate-stderr sb --timeout-ms 300 -- sh -c "sleep $marker & while :; do :; done"
	assert_failure 124
	assert_stderr_contains "deadline"
	no_process_matching "sleep $marker" 5
}

@test "sandbox: exec failures: 127 for a missing program or cwd, 126 for a file not executable" {
	run -127 --separate-stderr sb -- /no/such/program
	assert_failure 127
	assert_stderr_contains "No such file"

	run -127 --separate-stderr sb -- no-such-program-on-path
	assert_failure 127
	assert_stderr_contains "No such file"

	run -127 --separate-stderr sb --cwd /nonexistent -- true
	assert_failure 127
	assert_stderr_contains "/nonexistent"

	cp /bin/true "$TDIR/notexec"
	chmod a-x "$TDIR/notexec"
	run --separate-stderr sb -v "$TDIR:/work:rw" -- /work/notexec
	assert_failure 126
	assert_stderr_contains "Permission denied"
}

# --- the root filesystem ---

@test "sandbox: a write to /etc/hosts stays in the sandbox's overlay" {
	local before
	before=$(sha256sum /etc/hosts)
	run --separate-stderr sb -- sh -c 'echo payload >> /etc/hosts; tail -n 1 /etc/hosts'
	assert_success
	assert_output "payload"
	assert_equal "$(sha256sum /etc/hosts)" "$before"

	run --separate-stderr sb -- cat /etc/hosts
	assert_success
	refute_output --partial "payload"
	assert_output "$(cat /etc/hosts)"
}

# --- isolation ---

@test "sandbox: pid namespace: the command is pid 2 under the sandbox's init and sees only its own processes" {
	run --separate-stderr sb -- /bin/sh -c 'echo $$ $PPID'
	assert_success
	assert_output "2 1"
	# A line the warm shell does not take (another argv[0]): the command comes after it.
	run --separate-stderr sb -- sh -c 'echo $$ $PPID'
	assert_success
	assert_output "3 1"

	run --separate-stderr sb -- /bin/sh -c 'ls /proc'
	assert_success
	local pids
	pids=$(grep -E '^[0-9]+$' <<<"$output" | sort -n | tr '\n' ' ')
	# init (1), sh (2) and ls, nothing of the host's.
	[[ $pids == "1 2 "* ]] || fail "pids 1 and 2 missing from /proc: $pids"
	(($(wc -w <<<"$pids") <= 3)) || fail "more processes than init, sh and ls in /proc: $pids"
}

@test "sandbox: the command dies of a signal it sends itself (it is not the sandbox's init)" {
	run --separate-stderr sb -- sh -c 'kill -TERM $$; echo survived'
	assert_failure 143
	refute_output --partial survived
}

@test "sandbox: network namespace: only lo, the host's interfaces with --network" {
	run --separate-stderr sb -- cat /proc/net/dev
	assert_success
	local ifs
	ifs=$(awk -F: 'NR > 2 { gsub(/ /, "", $1); print $1 }' <<<"$output" | sort | tr '\n' ' ')
	assert_equal "$ifs" "lo "

	# With --network, the host's: more than lo (interfaces the host has; other suites may
	# add and remove some meanwhile, so not the exact list).
	local host_if
	host_if=$(awk -F: 'NR > 2 { gsub(/ /, "", $1); if ($1 != "lo") { print $1; exit } }' /proc/net/dev)
	[[ -n $host_if ]] || skip "the host has no interface but lo"
	run --separate-stderr sb --network -- cat /proc/net/dev
	assert_success
	ifs=$(awk -F: 'NR > 2 { gsub(/ /, "", $1); print $1 }' <<<"$output" | sort | tr '\n' ' ')
	[[ " $ifs" == *" lo "* ]] || fail "no lo with --network: $ifs"
	(($(wc -w <<<"$ifs") > 1)) || fail "only lo with --network"
	[[ " $ifs" == *" $host_if "* ]] || fail "the host's $host_if missing with --network: $ifs"
}

@test "sandbox: hostname, empty /root /home /run, a fresh /tmp, the daemon's socket not visible" {
	run --separate-stderr sb -- hostname
	assert_success
	assert_output "sandbox"

	local marker=/tmp/fb-sandbox-host-file.$$
	touch "$marker"
	run --separate-stderr sb -- sh -c 'for d in /root /home /run /tmp; do echo "$d:$(ls -A "$d" | tr "\n" " ")"; done'
	rm -f "$marker"
	assert_success
	assert_output "/root:
/home:
/run:
/tmp:"

	run --separate-stderr sb -- test -e "$SOCK"
	assert_failure 1
	run --separate-stderr sb -- test -e "$(dirname "$SOCK")"
	assert_failure 1
	run --separate-stderr sb -- test -e /run/forkbox
	assert_failure 1
}

# --- privileges ---

@test "sandbox: root of its user namespace, Docker's capabilities (none with --no-caps), no_new_privs, seccomp" {
	run --separate-stderr sb -- id
	assert_success
	assert_output --regexp '^uid=0\(root\) gid=0\(root\)'

	run --separate-stderr sb -- cat /proc/self/status
	assert_success
	assert_line --regexp '^CapEff:[[:space:]]+00000000a80425fb$'
	assert_line --regexp '^NoNewPrivs:[[:space:]]+1$'
	assert_line --regexp '^Seccomp:[[:space:]]+2$'

	run --separate-stderr sb --no-caps -- cat /proc/self/status
	assert_success
	assert_line --regexp '^CapEff:[[:space:]]+0000000000000000$'
	assert_line --regexp '^CapPrm:[[:space:]]+0000000000000000$'
	assert_line --regexp '^NoNewPrivs:[[:space:]]+1$'
	assert_line --regexp '^Seccomp:[[:space:]]+2$'
}

@test "sandbox: the escape syscalls fail: EPERM (clone3: ENOSYS), unshare -U fails" {
	[[ $(uname -m) == x86_64 ]] || skip "the syscall numbers below are x86_64's"
	# Harmless arguments: were a call let through, it would fail on them (EFAULT, EINVAL).
	local script='
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = [("mount", 165, 5), ("umount2", 166, 2), ("ptrace", 101, 4), ("bpf", 321, 3),
         ("reboot", 169, 4), ("unshare", 272, [0x10000000]), ("setns", 308, 2),
         ("keyctl", 250, 5), ("add_key", 248, 5), ("perf_event_open", 298, 5),
         ("userfaultfd", 323, 1), ("init_module", 175, 3), ("finit_module", 313, 3),
         ("delete_module", 176, 2), ("kexec_load", 246, 4), ("open_by_handle_at", 304, 3),
         ("clone3", 435, 2)]
for name, nr, args in calls:
    if isinstance(args, int):
        args = [0] * args
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    e = ctypes.get_errno()
    print(name, errno.errorcode.get(e, e) if r < 0 else "allowed")
'
	run --separate-stderr sb -- python3 -c "$script"
	assert_success
	assert_output "mount EPERM
umount2 EPERM
ptrace EPERM
bpf EPERM
reboot EPERM
unshare EPERM
setns EPERM
keyctl EPERM
add_key EPERM
perf_event_open EPERM
userfaultfd EPERM
init_module EPERM
finit_module EPERM
delete_module EPERM
kexec_load EPERM
open_by_handle_at EPERM
clone3 ENOSYS"

	run --separate-stderr sb -- unshare -U true
	assert_failure
	assert_stderr_contains "Operation not permitted"
}

# --- mounts ---

@test "sandbox: -v HOST:SANDBOX is read-only by default, :rw writes reach the host (owned by root)" {
	mkdir -m 0755 "$TDIR/share"
	echo "from the host" >"$TDIR/share/in"

	run --separate-stderr sb -v "$TDIR/share:/work" -- cat /work/in
	assert_success
	assert_output "from the host"

	run --separate-stderr sb -v "$TDIR/share:/work:ro" -- sh -c 'echo x > /work/out'
	assert_failure
	assert_stderr_contains "Read-only file system"
	[[ ! -e $TDIR/share/out ]]

	run --separate-stderr sb -v "$TDIR/share:/work:rw" -- sh -c 'echo from the sandbox > /work/out'
	assert_success
	assert_equal "$(cat "$TDIR/share/out")" "from the sandbox"
	assert_equal "$(stat -c '%u %g' "$TDIR/share/out")" "0 0"
}

@test "sandbox: a FIFO or a text file bound over /bin/sh does not hold up the sandbox's making" {
	# An embryo reads its shell's ELF headers while it is built (libforkbox/sandbox/warm.cpp):
	# a FIFO there must not block it, nor garbage upset it.
	mkfifo "$TDIR/fifo"
	printf 'not an ELF file' >"$TDIR/text"
	for source in fifo text; do
		run --separate-stderr sb -v "$TDIR/$source:/bin/sh" -- /usr/bin/stat -L -c %F /bin/sh
		assert_success
		assert_output "$([[ $source == fifo ]] && echo fifo || echo 'regular file')"
	done
}

@test "sandbox: a missing mount source and a destination under /proc are refused with a message" {
	run --separate-stderr sb -v "$TDIR/missing:/work" -- true
	assert_failure
	assert_stderr_contains "$TDIR/missing"
	assert_stderr_contains "No such file"

	run --separate-stderr sb -v "$TDIR:/proc/x" -- true
	assert_failure
	assert_stderr_contains "/proc/x"
	assert_stderr_contains "invalid_request"
}

# --- standard input and output ---

@test "sandbox: -i passes standard input, binary data intact" {
	abc_through_cat() { printf abc | sb -i -- cat; }
	run --separate-stderr abc_through_cat
	assert_success
	assert_output "abc"

	head -c 1048576 /dev/urandom >"$TDIR/random"
	sb -i --max-output 2000000 -- cat <"$TDIR/random" >"$TDIR/random.out"
	cmp "$TDIR/random" "$TDIR/random.out"
}

@test "sandbox: --max-output keeps the head and the tail and reports what it dropped" {
	sb --max-output 1000 -- sh -c 'yes | head -c 100000' >"$TDIR/out" 2>"$TDIR/err"
	assert_equal "$(wc -c <"$TDIR/out")" 1000
	# 500 bytes of the head and 500 of the tail, both "y\n" pairs.
	cmp "$TDIR/out" <(yes | head -c 1000)
	grep -q "stdout_dropped 99000" "$TDIR/err" || fail "no drop count on stderr: $(cat "$TDIR/err")"
}

# --- limits ---

@test "sandbox: a root daemon limits memory and processes with cgroups" {
	run "$SB_FB" sandbox --socket "$SOCK" --info
	assert_success
	assert_equal "$(jq -c '.limits | [.memory, .pids]' <<<"$output")" '["cgroup","cgroup"]'

	run --separate-stderr sb --memory 64 -- python3 -c 'b = bytearray(256 << 20)'
	((status == 137 || status == 1)) || fail "256 MiB in a 64 MiB sandbox: status $status, stderr: $stderr"

	run --separate-stderr sb --pids 32 -- python3 -c "$FORK_BOMB_PY"
	assert_success
	[[ $output =~ ^[0-9]+$ ]] || fail "no count: $output / $stderr"
	((output < 32)) || fail "$output processes forked under --pids 32"
}

@test "sandbox: a run's cgroups carry its limits and are removed when it ends" {
	local marker=$((76543000 + $$ % 1000)) pid cg
	sb --memory 64 --pids 32 -- sleep "$marker" </dev/null >/dev/null 2>"$TDIR/err" 3>&- 4>&- &
	local client=$!
	EXTRA_PIDS+=("$client")
	pid=$(wait_for_process sleep "sleep $marker") || fail "the sandbox's sleep did not start: $(cat "$TDIR/err")"
	cg=$(awk -F: '$2 == "memory" { print $3 }' "/proc/$pid/cgroup")
	[[ $cg == /forkbox-sandbox/"$SERVICE_PID"-* ]] || fail "memory cgroup $cg, expected /forkbox-sandbox/$SERVICE_PID-N"
	assert_equal "$(cat "/sys/fs/cgroup/memory$cg/memory.limit_in_bytes")" $((64 << 20))
	# The sandbox's init counts too.
	assert_equal "$(cat "/sys/fs/cgroup/pids$cg/pids.max")" 33
	kill -KILL "$pid"
	wait "$client" || true
	no_process_matching "sleep $marker" 5
	local i
	for ((i = 0; i < 50; i++)); do
		[[ ! -d /sys/fs/cgroup/memory$cg && ! -d /sys/fs/cgroup/pids$cg ]] && break
		sleep 0.1
	done
	[[ ! -d /sys/fs/cgroup/memory$cg ]] || fail "cgroup memory$cg left after the run"
	[[ ! -d /sys/fs/cgroup/pids$cg ]] || fail "cgroup pids$cg left after the run"
}

# --- environment ---

@test "sandbox: -e sets the environment (PATH kept), -w the working directory" {
	run --separate-stderr sb -e FOO=bar -- sh -c 'echo "$FOO"; echo "$PATH"'
	assert_success
	assert_line -n 0 "bar"
	assert_line -n 1 --regexp '^/.*/bin'

	run --separate-stderr sb -w /tmp -- pwd
	assert_success
	assert_output "/tmp"
}

# --- bad input ---

@test "sandbox: no daemon at the socket, or no command: non-zero with a clear message" {
	run --separate-stderr "$SB_FB" sandbox --socket /nonexistent/sock -- true
	assert_failure
	assert_stderr_contains "/nonexistent/sock"
	assert_stderr_contains "forkbox daemon"

	run --separate-stderr sb
	assert_failure
	assert_stderr_contains "no command"

	run --separate-stderr sb --
	assert_failure
	assert_stderr_contains "no command"
}

@test "sandbox: a malformed request gets an error message, and the daemon serves the next one" {
	run python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(30)
s.connect(sys.argv[1])
s.send(b"sandbox/1 run\n{not json")
sys.stdout.write(repr(s.recv(70000)))
' "$SOCK"
	assert_success
	assert_output --regexp "^b'!"
	assert_output --partial "invalid_request"

	run --separate-stderr sb -- true
	assert_success
}

# --- concurrency ---

@test "sandbox: 20 concurrent runs all succeed, each in its own pid namespace" {
	local i pids=()
	for ((i = 0; i < 20; i++)); do
		sb -- /bin/sh -c 'echo $$' </dev/null >"$TDIR/out.$i" 2>"$TDIR/err.$i" 3>&- 4>&- &
		pids+=($!)
	done
	local failed=()
	for ((i = 0; i < 20; i++)); do
		wait "${pids[i]}" || failed+=("run $i: status $? stderr: $(cat "$TDIR/err.$i")")
	done
	((${#failed[@]} == 0)) || fail "$(printf '%s\n' "${failed[@]}")"
	for ((i = 0; i < 20; i++)); do
		assert_equal "$(cat "$TDIR/out.$i")" "2"
	done
}

@test "sandbox: input sent while the sandbox is still being made reaches the command (no pool)" {
	local sock=$TDIR/nopool.sock
	start_daemon_as_root "$sock" --sandbox-pool 0
	run --separate-stderr bash -c 'printf abc | timeout 30 "$0" sandbox --socket "$1" -i -- cat' "$SB_FB" "$sock"
	assert_success
	assert_output "abc"
	run --separate-stderr bash -c 'head -c 300000 /dev/zero | timeout 30 "$0" sandbox --socket "$1" -i -- wc -c' "$SB_FB" "$sock"
	assert_success
	assert_output "300000"
}

# --- the warm shell ---

# settled SOCKET [user]: waits (10 s at most) until the daemon's pool is full, none being
# made (`user`: the test user's daemon, asked as that user).
settled() {
	local i
	local -a as=()
	[[ ${2-} == user ]] && as=(as_user)
	for ((i = 0; i < 1000; i++)); do
		"${as[@]}" "$SB_FB" sandbox --socket "$1" --info | grep -q '"pool":{"ready":2,"building":0' && return 0
		sleep 0.01
	done
}

@test "sandbox: a shell line runs in a /bin/sh started before it came; --no-warm-shell starts it for the line" {
	local sock=$TDIR/warm.sock cold=$TDIR/cold.sock
	start_daemon_as_root "$sock"
	start_daemon_as_root "$cold" --no-warm-shell
	run --separate-stderr "$SB_FB" sandbox --socket "$sock" --info
	assert_output --partial '"warm_shell":true'
	run --separate-stderr "$SB_FB" sandbox --socket "$cold" --info
	assert_output --partial '"warm_shell":false'
	settled "$sock"
	run -127 --separate-stderr sb_on "$sock" -- /bin/sh -c 'tr "\0" " " </proc/$$/cmdline; echo $$; nosuch'
	assert_output "/bin/sh -c . /dev/fd/3 2"
	assert_equal "$stderr" "/bin/sh: 1: eval: nosuch: not found"
	settled "$cold"
	run -127 --separate-stderr sb_on "$cold" -- /bin/sh -c 'tr "\0" " " </proc/$$/cmdline; echo $$; nosuch'
	assert_output "/bin/sh -c tr \"\\0\" \" \" </proc/\$\$/cmdline; echo \$\$; nosuch 2"
	assert_equal "$stderr" "/bin/sh: 1: nosuch: not found"
}

@test "sandbox: a warm shell's line ends before the shell's exit, and reads as a line of a shell started for it" {
	local sock=$TDIR/warm.sock cold=$TDIR/cold.sock line warm_status warm_out warm_err
	FORKBOX_TRACE=$TDIR/trace start_daemon_as_root "$sock"
	start_daemon_as_root "$cold" --no-warm-shell
	local -a shell_lines=(
		'echo out; echo err >&2; exit 3'
		'echo hi; false'
		'trap "echo bye; echo bye2 >&2" EXIT; echo hi; (exit 4)'
		'trap "" INT; echo ignored'
		'set -x; true'
		'printf() { echo shadowed; }; printf "x\n"'
		'readonly __forkbox_status=1 x=2; f() { return 6; }; f'
		'echo a; (sleep 0.3; echo late) & echo b'
		'set -e; false; echo no'
		'kill -9 $$'
		'exec echo execd'
		'echo $# $0; ls /proc/self/fd'
	)
	for line in "${shell_lines[@]}"; do
		settled "$sock"
		run --separate-stderr sb_on "$sock" -- /bin/sh -c "$line"
		warm_status=$status warm_out=$output warm_err=${stderr//eval: /}
		settled "$cold"
		run --separate-stderr sb_on "$cold" -- /bin/sh -c "$line"
		assert_equal "$warm_status $warm_out|$warm_err" "$status $output|$stderr"
	done
	# The lines that set no trap and ran to their end ended on their shell's word, before its exit.
	(($(grep -c 'sandbox: line ended' "$TDIR/trace") >= 5)) || fail "$(grep -E 'sandbox: (line|command) ended' "$TDIR/trace")"
	# The service wrote each line to its shell itself, in another environment too (the
	# script makes it); one the sandbox's init must prepare first (another cwd: it checks it
	# as for any command; limits by rlimit), or too long for one write, goes through the init
	# and reads the same.
	local given long
	given=$(grep -c 'sandbox: line given' "$TDIR/trace")
	((given == ${#shell_lines[@]})) || fail "$given of ${#shell_lines[@]} lines given"
	local -a args=("0 -e A=b -- /bin/sh -c env" "0 -w /tmp -- /bin/sh -c pwd" "127 -w /nosuch -- /bin/sh -c pwd")
	for line in "${args[@]}"; do
		settled "$sock"
		# shellcheck disable=SC2086 # the options split as written
		run -"${line%% *}" sb_on "$sock" ${line#* }
		warm_out=$output
		settled "$cold"
		# shellcheck disable=SC2086
		run -"${line%% *}" sb_on "$cold" ${line#* }
		assert_equal "$warm_out" "$output"
	done
	long="x=$(head -c 6000 /dev/zero | tr '\0' y); echo \${#x}"
	settled "$sock"
	run sb_on "$sock" -- /bin/sh -c "$long"
	assert_success
	assert_output 6000
	given=$(grep -c 'sandbox: line given' "$TDIR/trace")
	((given == ${#shell_lines[@]} + 1)) || fail "$given lines given, ${#shell_lines[@]} + 1 expected"
}

@test "sandbox: a root whose /bin/sh is not dash runs each line in a shell started for it" {
	busybox_root "$TDIR/img"
	local sock=$TDIR/busybox.sock
	start_daemon_as_root "$sock" --rootfs "$TDIR/img"
	settled "$sock"
	run --separate-stderr sb_on "$sock" -- /bin/sh -c 'tr "\0" " " </proc/$$/cmdline; echo $$'
	assert_success
	assert_output "/bin/sh -c tr \"\\0\" \" \" </proc/\$\$/cmdline; echo \$\$ 2"
}

# --- a chosen root (--rootfs) ---

# busybox_root DIR: a busybox tree in DIR with /etc/marker ("from the image"), readable by all.
busybox_root() {
	mkdir -p "$1/bin" "$1/etc"
	cp "${BUSYBOX:-/bin/busybox}" "$1/bin/busybox"
	chroot "$1" /bin/busybox --install -s /bin
	echo "from the image" >"$1/etc/marker"
	chmod -R a+rX "$1"
}

@test "sandbox --rootfs: a directory is the read-only root instead of the host's, the writes the sandbox's alone" {
	busybox_root "$TDIR/img"
	run --separate-stderr sb --rootfs "$TDIR/img" -- sh -c 'cat /etc/marker; test -e /usr/bin/python3 && echo host || echo no-host; test -r /proc/self/status && echo proc; echo w >/etc/written; cat /etc/written; id -u'
	assert_success
	assert_output "from the image
no-host
proc
w
0"
	[ ! -e "$TDIR/img/etc/written" ] || fail "the write reached the image"
	run --separate-stderr sb --rootfs "$TDIR/img" -- sh -c 'test -e /etc/written && echo seen || echo fresh'
	assert_output "fresh"
	# An OCI bundle: its config.json's root.path, relative to the bundle.
	mkdir "$TDIR/bundle"
	ln -s ../img "$TDIR/bundle/rootfs"
	echo '{"ociVersion": "1.2.0", "root": {"path": "rootfs"}}' >"$TDIR/bundle/config.json"
	run --separate-stderr sb --rootfs "$TDIR/bundle" -- cat /etc/marker
	assert_success
	assert_output "from the image"
	run --separate-stderr sb --rootfs "$TDIR/nothing" -- true
	assert_failure
	assert_stderr_contains "rootfs: $TDIR/nothing"
}

@test "sandbox --rootfs: a session keeps its root, and its forks have it too" {
	busybox_root "$TDIR/img"
	local sid kid
	sid=$("$SB_FB" sandbox create --socket "$SOCK" --rootfs "$TDIR/img")
	run --separate-stderr sb -s "$sid" -- sh -c 'cat /etc/marker; echo state >/tmp/s'
	assert_output "from the image"
	kid=$("$SB_FB" sandbox fork --socket "$SOCK" "$sid")
	run --separate-stderr sb -s "$kid" -- sh -c 'cat /etc/marker /tmp/s'
	assert_success
	assert_output "from the image
state"
	# A run in the session cannot change it.
	run --separate-stderr sb -s "$sid" --rootfs / -- true
	assert_failure
	assert_stderr_contains "the session's"
	"$SB_FB" sandbox close --socket "$SOCK" "$kid"
	"$SB_FB" sandbox close --socket "$SOCK" "$sid"
}

@test "daemon --rootfs: the root of every sandbox that names none; a bad one stops the daemon at start" {
	busybox_root "$TDIR/img"
	local sock=$TDIR/rootfs.sock
	start_daemon_as_root "$sock" --rootfs "$TDIR/img"
	run --separate-stderr sb_on "$sock" -- cat /etc/marker
	assert_success
	assert_output "from the image"
	run "$SB_FB" sandbox --socket "$sock" --info
	assert_equal "$(jq -r .rootfs <<<"$output")" "$TDIR/img"
	# Each root asked for is a kind kept ready, until --evict-after passes without a request.
	local evicting=$TDIR/evict.sock
	start_daemon_as_root "$evicting" --evict-after 1
	run --separate-stderr sb_on "$evicting" --rootfs "$TDIR/img" -- cat /etc/marker
	assert_output "from the image"
	run "$SB_FB" sandbox --socket "$evicting" --info
	assert_equal "$(jq -r .pool.kinds <<<"$output")" 2
	local i kinds=
	for ((i = 0; i < 50; i++)); do
		kinds=$("$SB_FB" sandbox --socket "$evicting" --info | jq -r .pool.kinds)
		[[ $kinds == 1 ]] && break
		sleep 0.1
	done
	[[ $kinds == 1 ]] || fail "the image's pool is still kept: $kinds kinds"
	run --separate-stderr "$SB_FB" daemon --socket "$TDIR/bad.sock" --rootfs "$TDIR/nothing"
	assert_failure
	assert_stderr_contains "--rootfs"
}

# --- a user's daemon ---

@test "sandbox (user's daemon): runs a command; --info says rootless, rlimits" {
	start_user_daemon
	run --separate-stderr usb -- echo hello
	assert_success
	assert_output "hello"

	run --separate-stderr usb -- id -u
	assert_success
	assert_output "0"

	run as_user "$SB_FB" sandbox --socket "$USOCK" --info
	assert_success
	assert_equal "$(jq -r .mode <<<"$output")" rootless
	assert_equal "$(jq -r .uid <<<"$output")" "$RL_UID"
	assert_equal "$(jq -c '.limits | [.memory, .pids]' <<<"$output")" '["rlimit","rlimit"]'

	# A shell line runs under its request's rlimits, whether the daemon wrote it to a pooled
	# sandbox's warm shell itself (the default limits: the shell started under them) or
	# the sandbox's init gave it (other limits).
	settled "$USOCK" user
	run --separate-stderr usb -- /bin/sh -c 'ulimit -v; ulimit -Hv'
	assert_success
	assert_output "$((512 * 1024))
$((512 * 1024))"
	settled "$USOCK" user
	run --separate-stderr usb --memory 64 -- /bin/sh -c 'ulimit -v'
	assert_success
	assert_output "$((64 * 1024))"
}

@test "sandbox (user's daemon): --rootfs, one overlay of a plain directory" {
	busybox_root "$TDIR/img"
	chmod 0755 "$TDIR"
	start_user_daemon
	run --separate-stderr usb --rootfs "$TDIR/img" -- sh -c 'cat /etc/marker; test -e /usr/bin/python3 && echo host || echo no-host; echo w >/tmp/x && cat /tmp/x'
	assert_success
	assert_output "from the image
no-host
w"
}

@test "sandbox (user's daemon): /etc/hosts cannot be written" {
	start_user_daemon
	local before
	before=$(sha256sum /etc/hosts)
	run --separate-stderr usb -- sh -c 'echo payload >> /etc/hosts'
	assert_failure
	assert_stderr_contains "Permission denied"
	assert_equal "$(sha256sum /etc/hosts)" "$before"
}

@test "sandbox (user's daemon): the deadline kills the whole sandbox" {
	start_user_daemon
	local marker=$((98764000 + $$ % 1000))
	run --separate-stderr usb --timeout-ms 300 -- sh -c "sleep $marker & while :; do :; done"
	assert_failure 124
	assert_stderr_contains "deadline"
	no_process_matching "sleep $marker" 5
}

@test "sandbox (user's daemon): a fork bomb under --pids 32 is contained" {
	start_user_daemon
	run --separate-stderr usb --pids 32 -- python3 -c "$FORK_BOMB_PY"
	assert_success
	[[ $output =~ ^[0-9]+$ ]] || fail "no count: $output / $stderr"
	((output < 32)) || fail "$output processes forked under --pids 32"
}

@test "sandbox (user's daemon): root's client is refused: serves only its own user" {
	start_user_daemon
	run --separate-stderr "$SB_FB" sandbox --socket "$USOCK" -- true
	assert_failure
	if [[ $stderr == *"Connection reset by peer"* ]]; then
		skip "known issue: the refusal's '!' message is lost (ECONNRESET: the daemon closes with the request unread)"
	fi
	assert_stderr_contains "serves only its own user"
}

@test "sandbox (user's daemon): SIGTERM stops it and leaves no process of the user" {
	start_user_daemon
	run --separate-stderr usb -- echo hello
	assert_success
	kill -TERM "$USER_DAEMON"
	wait "$USER_DAEMON" || fail "the user's daemon exited with $? on SIGTERM: $(cat "$TDIR/user-daemon.err")"
	EXTRA_PIDS=()
	no_process_matching "$UDIR" 5
	[[ ! -S $USOCK ]] || fail "the socket $USOCK was left"
}

# --- other daemons ---

@test "sandbox: a root daemon stopped by SIGTERM leaves no cgroup, no mount, no process" {
	local sock=$TDIR/stop.sock
	start_daemon_as_root "$sock"
	local daemon=$LAST_DAEMON svc
	svc=$("$SB_FB" sandbox --socket "$sock" --info | jq -r .service_pid)
	[[ $svc =~ ^[0-9]+$ ]] || fail "no service_pid"
	run --separate-stderr sb_on "$sock" -- true
	assert_success
	run --separate-stderr sb_on "$sock" --network -- true
	assert_success
	# The pools refilled (ready sandboxes, each with its cgroups) before the stop.
	local i
	for ((i = 0; i < 50; i++)); do
		[[ $("$SB_FB" sandbox --socket "$sock" --info | jq -r .pool.building) == 0 ]] && break
		sleep 0.1
	done
	kill -TERM "$daemon"
	wait "$daemon" || fail "the daemon exited with $? on SIGTERM: $(cat "$sock.err")"
	EXTRA_PIDS=()
	[[ ! -e /proc/$svc ]] || fail "the sandbox service $svc outlived the daemon"
	no_process_matching "$sock" 5
	run grep -F -- "$TDIR" /proc/self/mountinfo
	assert_failure
	local left
	left=$(service_cgroups "$svc")
	if [[ -n $left ]]; then
		local busy
		busy=$(busy_cgroups "$left")
		# shellcheck disable=SC2086 # one directory a word
		rmdir $left 2>/dev/null
		fail "cgroups left after SIGTERM: $(tr '\n' ' ' <<<"$left") (with processes: $busy)"
	fi
}

@test "sandbox: a root daemon stopped while it refills its pool leaves no cgroup" {
	# SIGTERM right after a run, while the sandbox that replaces it is being made (its
	# cgroups made, its process not yet): in 2 of 12 such stops those cgroups were left.
	local sock=$TDIR/refill.sock round daemon svc left
	for ((round = 0; round < 12; round++)); do
		start_daemon_as_root "$sock"
		daemon=$LAST_DAEMON
		svc=$("$SB_FB" sandbox --socket "$sock" --info | jq -r .service_pid)
		[[ $svc =~ ^[0-9]+$ ]] || fail "no service_pid"
		sb_on "$sock" -- true || fail "round $round: the run failed"
		kill -TERM "$daemon"
		wait "$daemon" || fail "round $round: the daemon exited with $? on SIGTERM: $(cat "$sock.err")"
		EXTRA_PIDS=()
		left=$(service_cgroups "$svc")
		if [[ -n $left ]]; then
			# shellcheck disable=SC2086 # one directory a word
			remove_cgroup_trees $left
			fail "round $round: cgroups left after SIGTERM: $(tr '\n' ' ' <<<"$left")"
		fi
	done
}

@test "sandbox: a root daemon on a v1 freezer holds an empty frozen cgroup of its own while it runs, and removes it" {
	# It keeps the kernel's freezer static key on, so a fork's freeze patches no code.
	[[ -d /sys/fs/cgroup/freezer ]] || skip "no v1 freezer hierarchy"
	local sock=$TDIR/hold.sock daemon svc hold
	start_daemon_as_root "$sock"
	daemon=$LAST_DAEMON
	svc=$("$SB_FB" sandbox --socket "$sock" --info | jq -r .service_pid)
	[[ $svc =~ ^[0-9]+$ ]] || fail "no service_pid"
	hold=/sys/fs/cgroup/freezer/forkbox-sandbox/$svc-freezer
	[[ -d $hold ]] || fail "no $hold"
	assert_equal "$(cat "$hold/freezer.state")" FROZEN
	assert_equal "$(cat "$hold/cgroup.procs")" ""
	# Sandboxes are served beside it.
	run sb_on "$sock" -- true
	assert_success
	kill -TERM "$daemon"
	wait "$daemon" || fail "the daemon exited with $? on SIGTERM: $(cat "$sock.err")"
	EXTRA_PIDS=()
	[[ ! -d $hold ]] || fail "$hold left after SIGTERM"
}

@test "sandbox: a root daemon whose socket is in a 0700 directory still makes sandboxes" {
	mkdir -m 0700 "$TDIR/private"
	start_daemon_as_root "$TDIR/private/sandbox.sock"
	run --separate-stderr sb_on "$TDIR/private/sandbox.sock" -- echo hello
	assert_success
	assert_output "hello"
}

@test "sandbox: signals the daemon's caller ignored are not ignored in the sandbox, and none is blocked" {
	local sock=$TDIR/ignoring.sock
	# As nohup or a runner starts it: SIG_IGN survives execve, into the daemon.
	(trap '' HUP INT QUIT PIPE USR1 && exec "$SB_FB" daemon --socket "$sock" </dev/null >/dev/null 2>"$sock.err" 3>&- 4>&-) &
	LAST_DAEMON=$!
	EXTRA_PIDS+=("$LAST_DAEMON")
	wait_for_socket "$sock" root
	run --separate-stderr sb_on "$sock" -- grep -E '^Sig(Ign|Blk)' /proc/self/status
	assert_success
	assert_line "SigIgn:	0000000000000000"
	assert_line "SigBlk:	0000000000000000"
}

@test "sandbox: a daemon started from a terminal does not lend it to its sandboxes (TIOCSTI, CVE-2017-5226)" {
	command -v script >/dev/null || skip "script (bsdutils) is not installed"
	local sock=$TDIR/tty.sock
	# script(1) runs the daemon with a pty as its controlling terminal, as a user's shell does.
	script -qfec "exec $SB_FB daemon --socket $sock 2>$sock.err" /dev/null </dev/null >/dev/null 2>&1 3>&- 4>&- &
	EXTRA_PIDS+=("$!")
	wait_for_socket "$sock" root
	local daemon
	daemon=$(pgrep -P "${EXTRA_PIDS[0]}")
	[[ $daemon =~ ^[0-9]+$ ]] || fail "no daemon under script: '$daemon'"
	EXTRA_PIDS=("$daemon" "${EXTRA_PIDS[@]}") # stopped first
	local tty_nr
	tty_nr=$(sed 's/.*) //' "/proc/$daemon/stat" | cut -d' ' -f5)
	[[ $tty_nr != 0 ]] || fail "the daemon has no controlling terminal"
	# /proc/self/stat's tty_nr (field 7), then the terminal by /dev/tty.
	run --separate-stderr sb_on "$sock" -- sh -c 'sed "s/.*) //" /proc/self/stat | cut -d" " -f5; (echo typed >/dev/tty) 2>/dev/null && echo reached-the-terminal; true'
	assert_success
	assert_output "0"
}

@test "sandbox: --tmpfs-mb caps the writable layer's bytes and its files, and /dev/shm's files" {
	local sock=$TDIR/small.sock
	start_daemon_as_root "$sock" --tmpfs-mb 4
	# Bytes: 5 MiB do not fit in 4.
	run --separate-stderr sb_on "$sock" -- sh -c 'head -c 5242880 /dev/zero > /tmp/big && echo fits; ls -l /tmp/big | cut -d" " -f5'
	assert_success
	refute_line fits
	[[ ${lines[-1]} -le 4194304 ]] || fail "wrote ${lines[-1]} bytes"
	assert_stderr_contains "No space left on device"
	# Files: an empty file costs kernel memory, not blocks; one inode per 4 KiB of the cap.
	# (`true >`: a failed redirection on `:` would end dash.)
	run --separate-stderr sb_on "$sock" -- sh -c 'df -i / | tail -1; i=0; while [ $i -lt 2000 ]; do true > /tmp/f$i 2>/dev/null || break; i=$((i+1)); done; echo made $i'
	assert_success
	[[ ${lines[0]} == *" 1024 "* ]] || fail "inodes: ${lines[0]}"
	[[ ${lines[1]} =~ ^made\ ([0-9]+)$ && ${BASH_REMATCH[1]} -gt 900 && ${BASH_REMATCH[1]} -lt 1024 ]] || fail "${lines[1]}"
	run --separate-stderr sb_on "$sock" -- sh -c 'df -i /dev/shm /dev | tail -2'
	assert_success
	assert_line --index 0 --regexp '^shm +16384 '
	assert_line --index 1 --regexp '^tmpfs +16384 '
}

@test "sandbox: a daemon's --max-timeout-ms is the deadline of a run that sets none" {
	local sock=$TDIR/max.sock marker=$((98763000 + $$ % 1000))
	start_daemon_as_root "$sock" --max-timeout-ms 300
	run --separate-stderr sb_on "$sock" -- sh -c "sleep $marker & while :; do :; done"
	assert_failure 124
	no_process_matching "sleep $marker" 5
	# The daemon's deadline, not the client's (none): the run's duration, never "0 ms".
	assert_stderr_contains "killed at the deadline, after"
	[[ $stderr != *"after 0 ms"* ]]
}

@test "sandbox: a daemon with FORKBOX_TRACE marks a run's steps, the sandbox's init's included" {
	local sock=$TDIR/traced.sock trace=$TDIR/trace
	: >"$trace"
	FORKBOX_TRACE=$trace start_daemon_as_root "$sock"
	run sb_on "$sock" -- true
	assert_success
	local mark
	for mark in "sandbox: request" "sandbox: released" "embryo: released" "embryo: spawned" \
		"embryo: command reaped" "sandbox: command ended" "sandbox: replied"; do
		grep -q " $mark\$" "$trace" || fail "no '$mark' in the trace: $(cat "$trace")"
	done
	# The file is the daemon's: the command never sees it (close-on-exec).
	run sb_on "$sock" -- sh -c 'ls -l /proc/self/fd | grep -c trace'
	assert_output 0
}

@test "sandbox: a --no-sandboxes daemon refuses with a clear error" {
	local sock=$TDIR/nosb.sock
	"$SB_FB" daemon --no-sandboxes --socket "$sock" </dev/null >/dev/null 2>"$sock.err" 3>&- 4>&- &
	EXTRA_PIDS+=($!)
	wait_for_socket "$sock" socket
	run --separate-stderr sb_on "$sock" -- true
	assert_failure
	if [[ $stderr == *"Connection reset by peer"* ]]; then
		skip "known issue: the --no-sandboxes '!' message is lost (ECONNRESET: the daemon closes with the request unread)"
	fi
	assert_stderr_contains "no-sandboxes"
}

@test "sandbox: a daemon stopped with a run in flight: the client fails with a message, the run is gone" {
	local sock=$TDIR/third.sock marker=$((87654000 + $$ % 1000))
	start_daemon_as_root "$sock"
	local daemon=$LAST_DAEMON
	sb_on "$sock" -- sleep "$marker" </dev/null >"$TDIR/out" 2>"$TDIR/err" 3>&- 4>&- &
	local client=$!
	EXTRA_PIDS+=("$client")
	wait_for_process sleep "sleep $marker" >/dev/null || fail "the run did not start: $(cat "$TDIR/err")"
	kill -TERM "$daemon"
	local st=0
	wait "$client" || st=$?
	((st != 0 && st != 137)) || fail "client status $st (137: killed by the test's timeout)"
	[[ -s $TDIR/err ]] || fail "the client printed no message"
	grep -q "stopped" "$TDIR/err" || fail "unexpected message: $(cat "$TDIR/err")"
	wait "$daemon" || fail "the daemon exited with $? on SIGTERM: $(cat "$sock.err")"
	no_process_matching "sleep $marker" 5
}

@test "sandbox: --allow-group serves that group's members on a root daemon, and only them" {
	rl_setup_user || fail "cannot make the test user"
	export RL_PATH=/usr/sbin:/usr/bin:/sbin:/bin
	RL_XDG=$TDIR/xdg RL_HOME=$TDIR/home
	mkdir -p "$RL_XDG" "$RL_HOME" "$TDIR/shared"
	chown "$RL_UID:$RL_GID" "$RL_XDG" "$RL_HOME"
	chgrp "$RL_GID" "$TDIR/shared" && chmod 0750 "$TDIR/shared"
	chmod 0755 "$TDIR"
	local sock=$TDIR/shared/forkbox.sock
	start_daemon_as_root "$sock" --allow-group "$RL_GID"
	[[ $(stat -c '%a %g' "$sock") == "660 $RL_GID" ]] || fail "socket mode/group: $(stat -c '%a %g' "$sock")"
	run --separate-stderr as_user timeout 30 "$SB_FB" sandbox --socket "$sock" -- sh -c 'echo served; id -u'
	assert_success
	assert_output "served
0"
	# The group's members get sandboxes, not the daemon's zygote templates.
	run as_user python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect(sys.argv[1]); s.settimeout(5)
s.send(b"stats")
try:
    print(s.recv(4096))
except OSError as e:
    print("closed", e)
' "$sock"
	refute_output --partial "served="
}

# A root daemon's own sandboxes see the host's files as their root's (an idmapped lower
# layer); a group member's must not: it would read /etc/shadow, and bind and write what
# only root may.
@test "sandbox: an --allow-group member's sandbox has no more rights over the host's files than the member" {
	rl_setup_user || fail "cannot make the test user"
	export RL_PATH=/usr/sbin:/usr/bin:/sbin:/bin
	RL_XDG=$TDIR/xdg RL_HOME=$TDIR/home
	mkdir -p "$RL_XDG" "$RL_HOME" "$TDIR/shared" "$TDIR/private"
	chown "$RL_UID:$RL_GID" "$RL_XDG" "$RL_HOME"
	chgrp "$RL_GID" "$TDIR/shared" && chmod 0750 "$TDIR/shared"
	chmod 0755 "$TDIR"
	echo secret >"$TDIR/private/s" && chmod 0700 "$TDIR/private"
	local sock=$TDIR/shared/forkbox.sock
	start_daemon_as_root "$sock" --allow-group "$RL_GID"
	# The owner (root) reads root's files, as before.
	run --separate-stderr timeout 30 "$SB_FB" sandbox --socket "$sock" -- head -c 5 /etc/shadow
	assert_success
	assert_output "root:"
	run --separate-stderr as_user timeout 30 "$SB_FB" sandbox --socket "$sock" -- sh -c 'cat /etc/shadow; echo "rc=$?"; echo x >>/etc/hosts; echo "rc=$?"'
	assert_success
	assert_line --index 0 "rc=1"
	assert_line --index 1 --regexp "^rc=[12]$"
	assert_stderr_contains "Permission denied"
	# Its own /tmp and /root are writable, as a rootless daemon's sandbox's.
	run --separate-stderr as_user timeout 30 "$SB_FB" sandbox --socket "$sock" -- sh -c 'echo t >/tmp/x && echo r >/root/y && cat /tmp/x /root/y'
	assert_success
	assert_output "t
r"
	# A bind is looked up with the member's rights, not the daemon's (next test).
	run --separate-stderr as_user timeout 30 "$SB_FB" sandbox --socket "$sock" -v "$TDIR/private:/mnt" -- cat /mnt/s
	assert_failure
	refute_output --partial secret
	assert_stderr_contains "Permission denied"
	# Its sandboxes still run, from a pool of their own; the owner's keep their idmapped lower.
	run as_user "$SB_FB" sandbox --socket "$sock" --info
	assert_success
	assert_equal "$(jq -r .idmapped_lower <<<"$output")" true
}

# A member's binds and chosen root: opened with the member's uid, gid and groups and no
# capability but the one open_tree needs (no /proc/PID/root on the way), then idmapped so
# that what the member owns is the sandbox root's and the rest anyone's; files the sandbox
# makes in a bind are the member's.
@test "sandbox: an --allow-group member binds host paths and chooses a root with its own rights, never the daemon's" {
	rl_setup_user || fail "cannot make the test user"
	export RL_PATH=/usr/sbin:/usr/bin:/sbin:/bin
	RL_XDG=$TDIR/xdg RL_HOME=$TDIR/home
	mkdir -p "$RL_XDG" "$RL_HOME" "$TDIR/shared" "$TDIR/private" "$TDIR/work"
	chown "$RL_UID:$RL_GID" "$RL_XDG" "$RL_HOME" "$TDIR/work"
	chgrp "$RL_GID" "$TDIR/shared" && chmod 0750 "$TDIR/shared"
	chmod 0755 "$TDIR"
	echo secret >"$TDIR/private/s" && chmod 0700 "$TDIR/private"
	echo mine >"$TDIR/work/mine" && chown "$RL_UID:$RL_GID" "$TDIR/work/mine"
	echo roots >"$TDIR/work/roots" && chmod 0600 "$TDIR/work/roots"
	local sock=$TDIR/shared/forkbox.sock
	start_daemon_as_root "$sock" --allow-group "$RL_GID"
	run --separate-stderr as_user timeout 30 "$SB_FB" sandbox --socket "$sock" -v "$TDIR/work:/w:rw" -- sh -c '
		stat -c "%n %u:%g" /w/mine /w/roots; cat /w/mine; cat /w/roots || echo "roots: denied"
		echo made >/w/made && chmod 0600 /w/mine && echo "wrote"'
	assert_success
	assert_output "/w/mine 0:0
/w/roots 65534:65534
mine
roots: denied
wrote"
	[[ $(stat -c '%u:%g %a' "$TDIR/work/made") == "$RL_UID:$RL_GID 644" ]] || fail "made: $(stat -c '%u:%g %a' "$TDIR/work/made")"
	[[ $(stat -c '%a' "$TDIR/work/mine") == 600 ]] || fail "the member's own file kept its mode"
	# What the member may read it reads; what it may not stays shut, read-only or not.
	run --separate-stderr as_user timeout 30 "$SB_FB" sandbox --socket "$sock" -v /etc:/mnt -- sh -c 'cat /mnt/hostname >/dev/null && echo hostname; cat /mnt/shadow || echo "shadow: denied"'
	assert_success
	assert_output "hostname
shadow: denied"
	# The daemon's capabilities are not the member's: no magic links (a root process's root
	# or cwd), no directory the member cannot search.
	for source in /proc/1/root/etc /proc/1/cwd "$TDIR/private/s"; do
		run --separate-stderr as_user timeout 30 "$SB_FB" sandbox --socket "$sock" -v "$source:/mnt" -- true
		assert_failure
		assert_stderr_contains "bind mount source $source"
	done
	run --separate-stderr as_user timeout 30 "$SB_FB" sandbox --socket "$sock" -v "$TDIR/work/roots:/mnt/r:rw" -- sh -c 'echo x >>/mnt/r'
	assert_failure
	assert_stderr_contains "Permission denied"
	[[ $(cat "$TDIR/work/roots") == roots ]] || fail "root's file changed"
	# The owner's binds keep the daemon's rights.
	run --separate-stderr timeout 30 "$SB_FB" sandbox --socket "$sock" -v "$TDIR/private:/mnt" -- cat /mnt/s
	assert_success
	assert_output secret
	# A chosen root likewise: the member's own image is the sandbox root's (it writes /etc in
	# its overlay), root's image is anyone's, and one behind a 0700 directory is refused.
	busybox_root "$TDIR/work/img" && chown -R "$RL_UID:$RL_GID" "$TDIR/work/img"
	busybox_root "$TDIR/rootimg"
	busybox_root "$TDIR/private/img"
	run --separate-stderr as_user timeout 30 "$SB_FB" sandbox --socket "$sock" --rootfs "$TDIR/work/img" -- sh -c 'stat -c %u /etc/marker; echo w >/etc/w && cat /etc/w'
	assert_success
	assert_output "0
w"
	run --separate-stderr as_user timeout 30 "$SB_FB" sandbox --socket "$sock" --rootfs "$TDIR/rootimg" -- sh -c 'cat /etc/marker; stat -c %u /etc/marker; echo w >/etc/w'
	assert_failure
	assert_output "from the image
65534"
	for source in "$TDIR/private/img" /proc/1/root; do
		run --separate-stderr as_user timeout 30 "$SB_FB" sandbox --socket "$sock" --rootfs "$source" -- true
		assert_failure
		assert_stderr_contains "rootfs: $source: Permission denied"
	done
	[[ ! -e $TDIR/work/img/etc/w ]] || fail "the write reached the image"
	# The daemon is itself again after acting as the member, failures included.
	run --separate-stderr timeout 30 "$SB_FB" sandbox --socket "$sock" --rootfs "$TDIR/private/img" -v "$TDIR/private:/mnt" -- cat /etc/marker /mnt/s
	assert_success
	assert_output "from the image
secret"
}

# Membership by a supplementary group, as the kernel knew the peer's groups when it
# connected (SO_PEERGROUPS); its binds are looked up with those groups, and the group's
# files in them keep the group's rights inside (member_groups_inside).
@test "sandbox: a member by a supplementary group is served, and its binds carry its groups' rights" {
	rl_setup_user || fail "cannot make the test user"
	local group=47113
	getent group "$group" >/dev/null && skip "gid $group is taken here"
	mkdir -p "$TDIR/shared" "$TDIR/bygroup/work/team"
	chgrp "$group" "$TDIR/shared" "$TDIR/bygroup" && chmod 0750 "$TDIR/shared" "$TDIR/bygroup"
	chown "$RL_UID:$RL_GID" "$TDIR/bygroup/work"
	echo reached >"$TDIR/bygroup/work/f" && chown "$RL_UID:$RL_GID" "$TDIR/bygroup/work/f"
	# A team directory: root's, the group's (setgid), with a file the group may read and edit.
	chgrp "$group" "$TDIR/bygroup/work/team" && chmod 2770 "$TDIR/bygroup/work/team"
	echo shared >"$TDIR/bygroup/work/team/doc" && chgrp "$group" "$TDIR/bygroup/work/team/doc" && chmod 0660 "$TDIR/bygroup/work/team/doc"
	echo ours >"$TDIR/bygroup/work/ours" && chown "$RL_UID:$group" "$TDIR/bygroup/work/ours" && chmod 0660 "$TDIR/bygroup/work/ours"
	chmod 0755 "$TDIR"
	local sock=$TDIR/shared/forkbox.sock
	start_daemon_as_root "$sock" --allow-group "$group"
	member() { env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin setpriv --reuid "$RL_UID" --regid "$RL_GID" --groups "$RL_GID,$group" "$@"; }
	# The group's read and search rights hold; a write to what root owns does not: an
	# idmapped mount refuses writes to inodes whose owner it does not map.
	run --separate-stderr member timeout 30 "$SB_FB" sandbox --socket "$sock" -v "$TDIR/bygroup/work:/w:rw" -- sh -c \
		'cat /w/f; id -G; stat -c "%g %a" /w/team; ls /w/team; cat /w/team/doc; stat -c "%u %g" /w/ours
		echo more >>/w/ours && echo "ours: written"; echo edited >>/w/team/doc || echo "doc: refused"'
	assert_success
	assert_output "reached
0 $group
$group 2770
doc
shared
0 $group
ours: written
doc: refused"
	[[ $(cat "$TDIR/bygroup/work/team/doc") == shared ]] || fail "doc: $(cat "$TDIR/bygroup/work/team/doc")"
	[[ $(stat -c '%u:%g' "$TDIR/bygroup/work/ours") == "$RL_UID:$group" ]] || fail "ours: $(stat -c '%u:%g' "$TDIR/bygroup/work/ours")"
	# Only a request naming host paths carries the member's groups: a plain one holds none
	# (its sandbox is from the pool members share).
	run --separate-stderr member timeout 30 "$SB_FB" sandbox --socket "$sock" -- id -G
	assert_success
	assert_output 0
	# Without the group: not served at all.
	run --separate-stderr env -i PATH=/usr/bin:/bin setpriv --reuid "$RL_UID" --regid "$RL_GID" --clear-groups \
		timeout 30 "$SB_FB" sandbox --socket "$TDIR/shared/forkbox.sock" -- true
	assert_failure
}

# Root in a container holds no CAP_SYS_ADMIN (podman.bats runs the daemon in one): the
# private id range stays, the embryos build their roots as a user's do, and the host's
# files keep owners the sandbox does not map.
@test "sandbox: a root daemon without CAP_SYS_ADMIN keeps its id range; its sandboxes build their own roots" {
	local sock=$TDIR/nosysadmin.sock
	setpriv --bounding-set=-sys_admin "$SB_FB" daemon --socket "$sock" </dev/null >/dev/null 2>"$sock.err" 3>&- 4>&- &
	EXTRA_PIDS+=("$!")
	wait_for_socket "$sock" root
	run --separate-stderr timeout 30 "$SB_FB" sandbox --socket "$sock" -- sh -c 'id -u; head -c1 /etc/shadow || echo denied; echo w >/tmp/w && cat /tmp/w; cat /proc/self/uid_map'
	assert_success
	assert_line --index 0 0
	assert_line --index 1 denied
	assert_line --index 2 w
	[[ ${lines[3]} =~ ^\ *0\ +[0-9]+\ +65536$ ]] || fail "uid_map: ${lines[3]}"
	run "$SB_FB" sandbox --socket "$sock" --info
	assert_success
	[[ $(jq -r '.mode + " " + (.idmapped_lower | tostring)' <<<"$output") == "root false" ]] || fail "info: $output"
	grep -q "root without CAP_SYS_ADMIN" "$sock.err" || fail "no warning: $(cat "$sock.err")"
	# Without CAP_SETUID it would be a user's daemon with root's rights: no --allow-group then.
	run --separate-stderr setpriv --bounding-set=-setuid,-setgid "$SB_FB" daemon --socket "$TDIR/nosetuid.sock" --allow-group 0
	assert_failure
	assert_stderr_contains "--allow-group needs a root daemon (with CAP_SETUID and CAP_SETGID)"
}

@test "sandbox: a user's daemon refuses --allow-group (the members would get that user's rights)" {
	rl_setup_user || fail "cannot make the test user"
	export RL_PATH=/usr/sbin:/usr/bin:/sbin:/bin
	run --separate-stderr as_user "$SB_FB" daemon --socket "$TDIR/u.sock" --allow-group "$RL_GID"
	assert_failure
	assert_stderr_contains "--allow-group needs a root daemon"
	[ ! -e "$TDIR/u.sock" ] || fail "the socket was made"
}

# With --network a sandbox shares the host's network namespace, where abstract Unix sockets
# live: X11's @/tmp/.X11-unix/X0, D-Bus and containerd listeners. A Landlock scope (kernel
# 6.12) confines its connects and signals to its own domain.
ABSTRACT_PROBE_PY='
import os, socket, sys
c = socket.socket(socket.AF_UNIX)
try:
    c.connect(b"\0" + sys.argv[1].encode())
    print("host: connected")
except OSError as e:
    print("host:", e.strerror)
s = socket.socket(socket.AF_UNIX)
s.bind(b"\0own-" + sys.argv[1].encode())
s.listen()
if os.fork() == 0:
    d = socket.socket(socket.AF_UNIX)
    d.connect(b"\0own-" + sys.argv[1].encode())
    d.send(b"ok")
    os._exit(0)
print("own:", s.accept()[0].recv(2).decode())
'

# abstract_listener NAME: a host process listening on @NAME until the test ends.
abstract_listener() {
	/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(b"\0" + sys.argv[1].encode())
s.listen()
print("listening", flush=True)
time.sleep(120)' "$1" >"$TDIR/listener.out" 2>&1 3>&- 4>&- &
	EXTRA_PIDS+=("$!")
	local i
	for ((i = 0; i < 50; i++)); do
		[[ -s $TDIR/listener.out ]] && return 0
		sleep 0.1
	done
	fail "the listener did not start: $(cat "$TDIR/listener.out")"
}

@test "sandbox: with --network the host's abstract Unix sockets are out of reach, its own work" {
	[[ $(jq -r .ipc_scope "$SB_BASE/root/info.json") == landlock ]] || skip "the kernel has no Landlock scopes (6.12+)"
	local name=fb-abstract-$$-$BATS_TEST_NUMBER
	abstract_listener "$name"
	run --separate-stderr sb --network -- /usr/bin/python3 -c "$ABSTRACT_PROBE_PY" "$name"
	assert_success
	assert_output "host: Operation not permitted
own: ok"
	# Without --network the namespace is the sandbox's own: nothing of the host's is there.
	run --separate-stderr sb -- /usr/bin/python3 -c "$ABSTRACT_PROBE_PY" "$name"
	assert_success
	assert_output "host: Connection refused
own: ok"
	# A user's daemon too.
	start_user_daemon
	run --separate-stderr usb --network -- /usr/bin/python3 -c "$ABSTRACT_PROBE_PY" "$name"
	assert_success
	assert_output "host: Operation not permitted
own: ok"
}

# CVE-2023-25809 class: with --network the sandbox's /sys is the host's, rbound (its own
# sysfs needs a network namespace of its own), and the host's mounts under it (the cgroup
# hierarchies, which a rootless daemon's user may own) come along: read-only all the way down.
@test "sandbox: with --network every mount under /sys is read-only" {
	run --separate-stderr sb --network -- grep " /sys" /proc/self/mountinfo
	assert_success
	local line n=0
	while read -r line; do
		n=$((n + 1))
		[[ $(awk '{print $6}' <<<"$line") =~ (^|,)ro(,|$) ]] || fail "writable: $line"
	done <<<"$output"
	((n > 1)) || fail "expected the host's mounts under /sys: $output"
}

@test "sandbox: a read-only bind is read-only with what is mounted under its source" {
	mkdir -p "$TDIR/src/sub"
	mount -t tmpfs -o size=1m,mode=0777 tmpfs "$TDIR/src/sub"
	run --separate-stderr sb -v "$TDIR/src:/data:ro" -- sh -c 'echo x >/data/sub/f'
	assert_failure
	assert_stderr_contains "Read-only file system"
	[ ! -e "$TDIR/src/sub/f" ]
	run --separate-stderr sb -v "$TDIR/src:/data:rw" -- sh -c 'echo x >/data/sub/f'
	assert_success
	[ -e "$TDIR/src/sub/f" ]
}
