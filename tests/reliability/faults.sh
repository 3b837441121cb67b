#!/usr/bin/env bash
# Resource faults (issue #18): each must end in a clear error (non-zero exit, one
# "forkbox: ..." line on stderr, an error line in --log) or a success, and leave nothing:
# no process, mount, cgroup or state directory; a failed state write never leaves a torn
# state.json, and the other containers of the root keep working.
#
# usage: faults.sh [--quick]   (run.sh enters a private mount namespace first)
# shellcheck source=tests/reliability/lib.bash
[[ ${1:-} == --quick ]] && REL_QUICK=1
. "$(dirname "$0")/lib.bash"

# Containers here get forkbox's own cgroups, /forkbox/<id> (ids carry the run's tag): two
# of one bundle may live at once.
B=$REL_WORK/bundle
rel_bundle "$B" /bin/fbhelper sleep 100 || exit 1
rel_jq "$B/config.json" 'del(.linux.cgroupsPath)'
TRUE_B=$REL_WORK/true
rel_bundle "$TRUE_B" || exit 1
rel_jq "$TRUE_B/config.json" 'del(.linux.cgroupsPath)'
# The seccomp cache each root gets with its first create is no leak: made beforehand.
warm_root() {
	"$FB" --root "$1" run --bundle "$TRUE_B" "$REL_TAG-warm" </dev/null >/dev/null 2>&1
}

# check_clean ROOT ID LOGFILE: nothing of the failed container ID stayed; prints problems.
check_clean() {
	local root=$1 id=$2 p
	[[ -e $root/$id ]] && echo "state dir $root/$id left"
	for p in $(rel_cgroup_pids); do
		grep -q "/$id\$" "/proc/$p/cgroup" 2>/dev/null && echo "process $p of $id left"
	done
	for p in $(rel_own_pids); do
		grep -qF -- "$id" "/proc/$p/cmdline" 2>/dev/null && echo "forkbox process $p left: $(tr '\0' ' ' <"/proc/$p/cmdline")"
	done
	local d
	d=$(rel_cgroup_dirs | grep -E "/$id\$")
	[[ -n $d ]] && echo "cgroups left: $(tr '\n' ' ' <<<"$d")"
	return 0
}

# states_intact ROOT: every state.json under ROOT is whole JSON with an id.
states_intact() {
	local f
	for f in "$1"/*/state.json; do
		[[ -e $f ]] || continue
		jq -e .id "$f" >/dev/null 2>&1 || echo "torn $f: $(head -c 80 "$f" | od -c | head -2)"
	done
}

# verdict OUT ERR RC LOG: "" when the run either succeeded or failed clearly.
unclear() {
	local err=$1 rc=$2 log=${3:-}
	((rc == 0)) && return 0
	# 255: exec's own failure (runc's code too); 129-254: a signal.
	((rc > 128 && rc < 255)) && { echo "killed by signal $((rc - 128))"; return 0; }
	rel_clear_error "$err" || echo "unclear error (rc $rc): $(head -c 300 "$err")"
	if [[ -n $log ]] && ! grep -q '"level":"error"' "$log"; then echo "no error in --log"; fi
	return 0
}

# --- a state root on a tiny tmpfs: ENOSPC (blocks, then inodes) at every step of create ---
scenario_state_enospc() {
	local root=$REL_WORK/tiny runs=0 leaks=0 defects=0 k problems out
	rel_tmpfs "$root" 1m || { rel_report state-root-enospc 0 0 1 "mount tmpfs failed"; return; }
	REL_ROOTS+=("$root")
	# A container made while there was room: it must keep working throughout.
	"$FB" --root "$root" create --bundle "$B" "$REL_TAG-keep" </dev/null >/dev/null 2>"$REL_WORK/keep.err" ||
		{ rel_report state-root-enospc 0 0 1 "first create failed: $(cat "$REL_WORK/keep.err")"; return; }
	local iroot=$REL_WORK/tiny-inodes
	rel_tmpfs "$iroot" 1m nr_inodes=16 || return
	REL_ROOTS+=("$iroot")
	warm_root "$root"
	warm_root "$iroot"
	local before
	before=$(rel_snapshot "$root" "$iroot")
	# Free space from 0 to 40 KiB in pages, then free inodes from 0 to 8.
	local avail step
	for step in $(seq 0 10); do
		rm -f "$root/filler"
		avail=$(df --output=avail -B1 "$root" | tail -1)
		fallocate -l $((avail - step * 4096 > 0 ? avail - step * 4096 : 0)) "$root/filler" 2>/dev/null
		out=$REL_WORK/enospc.$step
		"$FB" --root "$root" --log "$out.log" --log-format json create --bundle "$B" "$REL_TAG-nospc" \
			</dev/null >/dev/null 2>"$out.err"
		local rc=$?
		runs=$((runs + 1))
		problems=$(unclear "$out.err" $rc "$out.log")
		if ((rc == 0)); then
			"$FB" --root "$root" delete --force "$REL_TAG-nospc" 2>>"$out.err" || problems+=" delete after success failed: $(cat "$out.err")"
		fi
		problems+=$(check_clean "$root" "$REL_TAG-nospc")
		problems+=$(states_intact "$root")
		"$FB" --root "$root" state "$REL_TAG-keep" 2>&1 | jq -e '.status == "created"' >/dev/null ||
			problems+=" the other container's state is unreadable: $("$FB" --root "$root" state "$REL_TAG-keep" 2>&1 | head -c 200)"
		if [[ -n $problems ]]; then
			defects=$((defects + 1))
			echo "  state-root-enospc: free $((step * 4)) KiB: $problems" >&2
		fi
	done
	rm -f "$root/filler"
	# Inodes: a second tmpfs with few of them.
	"$FB" --root "$iroot" create --bundle "$B" "$REL_TAG-ikeep" </dev/null >/dev/null 2>"$REL_WORK/ikeep.err" ||
		echo "  state-root-enospc: inode root: first create failed: $(cat "$REL_WORK/ikeep.err")" >&2
	for step in $(seq 0 8); do
		rm -rf "$iroot/fill"
		mkdir -p "$iroot/fill"
		local i=0
		while touch "$iroot/fill/$i" 2>/dev/null; do i=$((i + 1)); done
		for ((k = 0; k < step && i > 0; k++)); do i=$((i - 1)); rm -f "$iroot/fill/$i"; done
		out=$REL_WORK/enospc-i.$step
		"$FB" --root "$iroot" --log "$out.log" --log-format json create --bundle "$B" "$REL_TAG-inodes" \
			</dev/null >/dev/null 2>"$out.err"
		local rc=$?
		runs=$((runs + 1))
		problems=$(unclear "$out.err" $rc "$out.log")
		((rc == 0)) && { "$FB" --root "$iroot" delete --force "$REL_TAG-inodes" 2>>"$out.err" || problems+=" delete failed"; }
		problems+=$(check_clean "$iroot" "$REL_TAG-inodes")
		problems+=$(states_intact "$iroot")
		if [[ -n $problems ]]; then
			defects=$((defects + 1))
			echo "  state-root-enospc: free inodes $step: $problems" >&2
		fi
	done
	rm -rf "$iroot/fill"
	# The survivors still start, stop and delete.
	local id r
	for id in "$root:$REL_TAG-keep" "$iroot:$REL_TAG-ikeep"; do
		r=${id%%:*}
		id=${id#*:}
		[[ -d $r/$id ]] || continue
		{ "$FB" --root "$r" start "$id" && "$FB" --root "$r" kill "$id" KILL && sleep 0.2 &&
			"$FB" --root "$r" delete --force "$id"; } 2>"$REL_WORK/keep2.err" ||
			{ defects=$((defects + 1)); echo "  state-root-enospc: $id afterwards: $(cat "$REL_WORK/keep2.err")" >&2; }
	done
	local after
	after=$(rel_snapshot "$root" "$iroot")
	out=$(rel_compare "$before" "$after") || leaks=$?
	rel_report state-root-enospc "$runs" "$leaks" "$defects" "$out"
}

# --- a cgroup parent at its pids limit (v1 pids controller) ---
scenario_pids_limit() {
	local runs=0 leaks=0 defects=0 problems
	local pids_h=/sys/fs/cgroup/pids
	[[ -d $pids_h ]] || { rel_report pids-limit 0 0 0 "skipped: no v1 pids hierarchy"; return; }
	local root=$REL_WORK/pids-root
	REL_ROOTS+=("$root")
	warm_root "$root"
	local parent=$REL_CG/pidsfull
	mkdir -p "$pids_h$parent"
	local before
	before=$(rel_snapshot "$root")
	local limit id rc b=$REL_WORK/pids-b kind
	rel_bundle "$b" /bin/fbhelper sleep 100
	rel_jq "$b/config.json" '.linux.cgroupsPath = $p' --arg p "$parent/c"
	local bu=$REL_WORK/pids-bu
	rel_bundle "$bu" /bin/sh -c '/bin/fbhelper true && /bin/fbhelper sleep 100'
	# A user namespace: create forks an intermediate inside the cgroup.
	rel_jq "$bu/config.json" '.linux.cgroupsPath = $p | .linux.namespaces += [{"type":"user"}]
		| .linux.uidMappings = [{"containerID":0,"hostID":0,"size":65536}]
		| .linux.gidMappings = [{"containerID":0,"hostID":0,"size":65536}]' --arg p "$parent/c"
	for limit in 0 1 2 3; do
		echo "$limit" >"$pids_h$parent/pids.max"
		for kind in plain userns; do
			id=$REL_TAG-pids-$limit-$kind
			local bundle=$b
			[[ $kind == userns ]] && bundle=$bu
			local err=$REL_WORK/$id.err
			timeout 30 "$FB" --root "$root" --log "$err.log" --log-format json create --bundle "$bundle" "$id" \
				</dev/null >/dev/null 2>"$err"
			rc=$?
			runs=$((runs + 1))
			problems=""
			((rc == 124)) && problems+="create hung "
			problems+=$(unclear "$err" $rc "$err.log")
			if ((rc == 0)); then
				"$FB" --root "$root" start "$id" 2>>"$err" || problems+="start failed: $(cat "$err") "
				sleep 0.1
				# exec forks in the full cgroup: it must fail clearly (or run).
				timeout 30 "$FB" --root "$root" exec "$id" /bin/fbhelper true </dev/null >/dev/null 2>"$err.exec"
				local erc=$?
				runs=$((runs + 1))
				((erc == 124)) && problems+="exec hung "
				problems+=$(unclear "$err.exec" $erc)
				"$FB" --root "$root" delete --force "$id" 2>>"$err" || problems+="delete failed: $(cat "$err") "
			fi
			problems+=$(check_clean "$root" "$id")
			if [[ -n $problems ]]; then
				defects=$((defects + 1))
				echo "  pids-limit: pids.max=$limit $kind: $problems" >&2
			fi
		done
	done
	rmdir "$pids_h$parent/c" 2>/dev/null
	local after
	after=$(rel_snapshot "$root")
	out=$(rel_compare "$before" "$after") || leaks=$?
	rel_report pids-limit "$runs" "$leaks" "$defects" "$out"
}

# --- EMFILE: forkbox itself under a low RLIMIT_NOFILE, swept ---
scenario_emfile() {
	local runs=0 leaks=0 defects=0 problems n rc verb
	local root=$REL_WORK/emfile-root
	REL_ROOTS+=("$root")
	warm_root "$root"
	"$FB" --root "$root" create --bundle "$B" "$REL_TAG-emkeep" </dev/null >/dev/null 2>&1
	local before
	before=$(rel_snapshot "$root")
	local max
	max=$(rel_count 40 24)
	for ((n = 3; n <= max; n++)); do
		local id=$REL_TAG-em-$n err=$REL_WORK/em-$n.err
		# run: create + start + wait in one process with n fds.
		timeout 30 prlimit --nofile="$n" "$FB" --root "$root" --log "$err.log" --log-format json run --bundle "$TRUE_B" "$id" \
			</dev/null >/dev/null 2>"$err"
		rc=$?
		runs=$((runs + 1))
		problems=""
		((rc == 124)) && problems+="run hung "
		problems+=$(unclear "$err" $rc)
		# --log may be the very fd that could not be opened: then stderr must say so.
		"$FB" --root "$root" delete --force "$id" 2>/dev/null
		problems+=$(check_clean "$root" "$id")
		# The verbs on an existing container.
		for verb in state ps "kill 0" exec; do
			local cmd=($verb "$REL_TAG-emkeep")
			[[ $verb == exec ]] && cmd=(exec "$REL_TAG-emkeep" /bin/fbhelper true)
			timeout 30 prlimit --nofile="$n" "$FB" --root "$root" "${cmd[@]}" </dev/null >/dev/null 2>"$err.v"
			rc=$?
			runs=$((runs + 1))
			((rc == 124)) && problems+="$verb hung "
			problems+=$(unclear "$err.v" $rc)
			[[ $verb == exec && $rc == 0 ]] || true
		done
		if [[ -n $problems ]]; then
			defects=$((defects + 1))
			echo "  emfile: nofile=$n: $problems" >&2
		fi
		[[ $verb == exec ]] && "$FB" --root "$root" start "$REL_TAG-emkeep" 2>/dev/null
	done
	"$FB" --root "$root" delete --force "$REL_TAG-emkeep" 2>/dev/null
	local after
	after=$(rel_snapshot "$root")
	out=$(rel_compare "$before" "$after") || leaks=$?
	rel_report emfile "$runs" "$leaks" "$defects" "$out"
}

# --- the bundle removed (or moved) between create and start ---
scenario_bundle_removed() {
	local runs=0 leaks=0 defects=0 problems rc how
	local root=$REL_WORK/rm-root
	REL_ROOTS+=("$root")
	warm_root "$root"
	local before
	before=$(rel_snapshot "$root")
	for how in rm mv rootfs; do
		local b=$REL_WORK/rm-bundle-$how id=$REL_TAG-rm-$how err=$REL_WORK/rm-$how.err
		rel_bundle "$b" /bin/fbhelper echo hello
		"$FB" --root "$root" create --bundle "$b" "$id" </dev/null >"$err.out" 2>"$err" ||
			{ defects=$((defects + 1)); echo "  bundle-removed: create failed: $(cat "$err")" >&2; continue; }
		case $how in
		rm) rm -rf "$b" ;;
		mv) mv "$b" "$b.moved" ;;
		rootfs) rm -rf "$b/rootfs" ;;
		esac
		timeout 30 "$FB" --root "$root" --log "$err.log" --log-format json start "$id" 2>>"$err"
		rc=$?
		runs=$((runs + 1))
		problems=""
		((rc == 124)) && problems+="start hung "
		problems+=$(unclear "$err" $rc)
		local st
		for st in 1 2 3 4 5 6 7 8 9 10; do
			[[ $("$FB" --root "$root" state "$id" 2>/dev/null | jq -r .status) == stopped ]] && break
			sleep 0.1
		done
		"$FB" --root "$root" state "$id" >/dev/null 2>"$err.state" || problems+="state failed: $(cat "$err.state") "
		timeout 30 "$FB" --root "$root" delete "$id" 2>"$err.del" || problems+="delete failed: $(cat "$err.del") "
		problems+=$(check_clean "$root" "$id")
		if [[ -n $problems ]]; then
			defects=$((defects + 1))
			echo "  bundle-removed ($how): $problems" >&2
		fi
		rm -rf "$b.moved"
	done
	local after
	after=$(rel_snapshot "$root")
	out=$(rel_compare "$before" "$after") || leaks=$?
	rel_report bundle-removed "$runs" "$leaks" "$defects" "$out"
}

# --- a config.json of 50 MB: in an annotation, in the environment, in one string ---
scenario_big_config() {
	local runs=0 leaks=0 defects=0 problems rc what
	local root=$REL_WORK/big-root
	REL_ROOTS+=("$root")
	warm_root "$root"
	local before
	before=$(rel_snapshot "$root")
	for what in annotations env mounts; do
		local b=$REL_WORK/big-$what id=$REL_TAG-big-$what err=$REL_WORK/big-$what.err
		rel_bundle "$b"
		case $what in
		annotations) python3 - "$b/config.json" <<'EOF' ;;
import json, sys
c = json.load(open(sys.argv[1]))
c.setdefault("annotations", {})
for i in range(50 * 1024):
    c["annotations"]["fbrel.big.%d" % i] = "x" * 1000
json.dump(c, open(sys.argv[1], "w"))
EOF
		env) python3 - "$b/config.json" <<'EOF' ;;
import json, sys
c = json.load(open(sys.argv[1]))
c["process"]["env"] += ["BIG%d=%s" % (i, "y" * 1000) for i in range(50 * 1024)]
json.dump(c, open(sys.argv[1], "w"))
EOF
		mounts) python3 - "$b/config.json" <<'EOF' ;;
import json, sys
c = json.load(open(sys.argv[1]))
c["process"]["args"] = ["/bin/fbhelper", "echo", "z" * (50 * 1024 * 1024)]
json.dump(c, open(sys.argv[1], "w"))
EOF
		esac
		local t0 t1
		t0=$(date +%s%N)
		timeout 120 /usr/bin/time -f %M -o "$err.rss" "$FB" --root "$root" --log "$err.log" --log-format json \
			run --bundle "$b" "$id" </dev/null >/dev/null 2>"$err"
		rc=$?
		t1=$(date +%s%N)
		runs=$((runs + 1))
		problems=""
		((rc == 124)) && problems+="run hung "
		problems+=$(unclear "$err" $rc)
		"$FB" --root "$root" delete --force "$id" 2>/dev/null
		problems+=$(check_clean "$root" "$id")
		echo "  big-config ($what, $(($(stat -c %s "$b/config.json") / 1048576)) MB): rc $rc in $(((t1 - t0) / 1000000)) ms, max RSS $(($(tail -1 "$err.rss" 2>/dev/null || echo 0) / 1024)) MB: $(head -c 160 "$err")" >&2
		if [[ -n $problems ]]; then
			defects=$((defects + 1))
			echo "  big-config ($what): $problems" >&2
		fi
		rm -rf "$b"
	done
	local after
	after=$(rel_snapshot "$root")
	out=$(rel_compare "$before" "$after") || leaks=$?
	rel_report big-config-50mb "$runs" "$leaks" "$defects" "$out"
}

# --- deeply nested JSON: config.json, process.json of exec, update's resources, the
# sandbox protocol ---
scenario_deep_json() {
	local runs=0 leaks=0 defects=0 problems rc depth where
	local root=$REL_WORK/deep-root
	REL_ROOTS+=("$root")
	warm_root "$root"
	"$FB" --root "$root" run --detach --bundle "$B" "$REL_TAG-deepkeep" </dev/null >/dev/null 2>&1
	local before
	before=$(rel_snapshot "$root")
	for depth in 100000 1000000; do
		for where in member annotation top process update; do
			local b=$REL_WORK/deep id=$REL_TAG-deep err=$REL_WORK/deep-$where-$depth.err
			rm -rf "$b"
			rel_bundle "$b"
			local deep
			deep=$REL_WORK/deep.json
			python3 -c "import sys; d=int(sys.argv[1]); sys.stdout.write('['*d + ']'*d)" "$depth" >"$deep"
			local cmd=()
			case $where in
			member) python3 - "$b/config.json" "$deep" <<'EOF'
import sys
c = open(sys.argv[1]).read().rstrip()
assert c.endswith("}")
open(sys.argv[1], "w").write(c[:-1] + ', "fbrelDeep": ' + open(sys.argv[2]).read() + "}")
EOF
				cmd=(run --bundle "$b" "$id") ;;
			annotation) python3 - "$b/config.json" "$deep" <<'EOF'
import sys
c = open(sys.argv[1]).read().rstrip()
open(sys.argv[1], "w").write(c[:-1] + ', "annotations": {"a": ' + open(sys.argv[2]).read() + "}}")
EOF
				cmd=(run --bundle "$b" "$id") ;;
			top) cp "$deep" "$b/config.json"
				cmd=(run --bundle "$b" "$id") ;;
			process) cmd=(exec --process "$deep" "$REL_TAG-deepkeep") ;;
			update) cmd=(update --resources "$deep" "$REL_TAG-deepkeep") ;;
			esac
			timeout 60 "$FB" --root "$root" "${cmd[@]}" </dev/null >/dev/null 2>"$err"
			rc=$?
			runs=$((runs + 1))
			problems=""
			((rc == 124)) && problems+="hung "
			# An unknown member is ignored (as runc does), whatever its depth.
			((rc == 0)) && [[ $where != member ]] && problems+="accepted "
			problems+=$(unclear "$err" $rc)
			"$FB" --root "$root" delete --force "$id" 2>/dev/null
			problems+=$(check_clean "$root" "$id")
			if [[ -n $problems ]]; then
				defects=$((defects + 1))
				echo "  deep-json ($where, depth $depth): $problems" >&2
			fi
		done
	done
	"$FB" --root "$root" delete --force "$REL_TAG-deepkeep" 2>/dev/null
	local after
	after=$(rel_snapshot "$root")
	out=$(rel_compare "$before" "$after") || leaks=$?
	rel_report deep-json "$runs" "$leaks" "$defects" "$out"
}

# --- the sandbox daemon: its socket on a full tmpfs, deep and huge requests, clients
# exhausting its fds ---
scenario_daemon_faults() {
	local runs=0 leaks=0 defects=0 problems rc
	local dir=$REL_WORK/dfull
	rel_tmpfs "$dir" 64k nr_inodes=8
	# A full tmpfs: the socket cannot be made.
	local avail
	avail=$(df --output=avail -B1 "$dir" | tail -1)
	fallocate -l "$avail" "$dir/filler" 2>/dev/null
	local i=0
	while touch "$dir/f$i" 2>/dev/null; do i=$((i + 1)); done
	timeout 30 "$FB" daemon --socket "$dir/d.sock" </dev/null >/dev/null 2>"$REL_WORK/dfull.err"
	rc=$?
	runs=$((runs + 1))
	problems=""
	((rc == 0)) && problems+="the daemon served on a full tmpfs? "
	((rc == 124)) && problems+="hung "
	problems+=$(unclear "$REL_WORK/dfull.err" $rc)
	[[ -n $(rel_own_pids) ]] && problems+="processes left: $(rel_own_pids | tr '\n' ' ') "
	[[ -n $problems ]] && { defects=$((defects + 1)); echo "  daemon-faults (full tmpfs): $problems" >&2; }

	# A live daemon: requests of 100k nested arrays, and of 50 MB.
	local sdir=$REL_WORK/sd
	mkdir -p "$sdir"
	chmod 0711 "$sdir"
	local sock=$sdir/s.sock
	rel_daemon "$sock" "$sdir/daemon.log" --pool 1 || { rel_report daemon-faults "$runs" 0 $((defects + 1)) "no daemon"; return; }
	local dpid=$REL_DAEMON_PID
	"$FB" sandbox --socket "$sock" -- true >/dev/null 2>&1 # the service starts
	local spid
	spid=$("$FB" sandbox --socket "$sock" --info 2>/dev/null | jq -r .service_pid)
	REL_EXCLUDE_PIDS=$dpid
	local before
	before=$(rel_snapshot)
	local what
	for what in deep deep-env huge garbage; do
		/usr/bin/python3 - "$sock" "$what" >"$REL_WORK/dreq.out" 2>&1 <<'EOF'
import socket, struct, sys, json
path, what = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(path)
head = b"sandbox/1 run\n"
if what == "deep":  # as deep as the 128 KiB of a first message allow
    body = head + b'{"argv": ["true"], "x": ' + b"[" * 65000 + b"]" * 65000 + b"}"
elif what == "deep-env":
    body = head + b'{"argv": ["true"], "env": ' + b"[" * 65000 + b"]" * 65000 + b"}"
elif what == "huge":
    body = head + json.dumps({"argv": ["echo", "x" * (128 << 10)]}).encode()
else:
    body = b"\xff" * 4096
try:
    s.send(body)
    s.settimeout(20)
    print(s.recv(65536)[:300])
except Exception as e:
    print("client:", type(e).__name__, e)
EOF
		runs=$((runs + 1))
		problems=""
		kill -0 "$dpid" 2>/dev/null || problems+="the daemon died "
		"$FB" sandbox --socket "$sock" -- true >/dev/null 2>"$REL_WORK/dreq.err" ||
			problems+="the next sandbox failed: $(cat "$REL_WORK/dreq.err") "
		[[ -n $problems ]] && { defects=$((defects + 1)); echo "  daemon-faults ($what request): $problems; reply: $(head -c 300 "$REL_WORK/dreq.out")" >&2; }
	done

	# fd exhaustion: the service and the daemon at a low RLIMIT_NOFILE, clients holding
	# connections until accept fails; the daemon must not spin, and serve again after.
	local pid limits=()
	for pid in "$spid" "$dpid"; do
		[[ $pid =~ ^[0-9]+$ ]] || continue
		limits+=("$pid:$(prlimit --pid "$pid" --nofile --output SOFT --noheadings | tr -d ' ')")
		prlimit --pid "$pid" --nofile=$(($(rel_fds "$pid") + 8)):
	done
	cat >"$REL_WORK/fd-clients.py" <<'EOF'
import socket, sys, time, os
path, spid, dpid = sys.argv[1], sys.argv[2], sys.argv[3]
def cpu(pid):
    f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])
conns = []
for i in range(64):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.setblocking(False)
    try:
        s.connect(path)
    except BlockingIOError:
        pass
    except OSError as e:
        print("connect", i, e)
        break
    conns.append(s)
time.sleep(0.5)
c0 = {p: cpu(p) for p in (spid, dpid)}
time.sleep(2)
c1 = {p: cpu(p) for p in (spid, dpid)}
for p in (spid, dpid):
    print("cpu_ticks_2s", p, c1[p] - c0[p])
for s in conns:
    s.close()
EOF
	/usr/bin/python3 - "$sock" "$spid" "$dpid" >"$REL_WORK/dfd.out" 2>&1 <"$REL_WORK/fd-clients.py"
	runs=$((runs + 1))
	problems=""
	local ticks
	ticks=$(awk '/cpu_ticks_2s/ { if ($3 > m) m = $3 } END { print m + 0 }' "$REL_WORK/dfd.out")
	# 2 s of a spinning loop is ~200 ticks; an idle one, a few.
	((ticks > 50)) && problems+="the daemon spins at EMFILE ($ticks ticks in 2 s) "
	kill -0 "$dpid" 2>/dev/null || problems+="the daemon died "
	# A client while still at the limit is told so, clearly.
	timeout 20 "$FB" sandbox --socket "$sock" -- true >/dev/null 2>"$REL_WORK/dfd1.err"
	rc=$?
	((rc == 124)) && problems+="a client at the limit hung "
	((rc != 0)) && ! grep -qE 'busy|Too many open files' "$REL_WORK/dfd1.err" && problems+="a client at the limit got: $(head -c 200 "$REL_WORK/dfd1.err") "
	for pid in "${limits[@]}"; do prlimit --pid "${pid%%:*}" --nofile="${pid#*:}:"; done
	sleep 0.5
	timeout 20 "$FB" sandbox --socket "$sock" -- true >/dev/null 2>"$REL_WORK/dfd.err" ||
		problems+="no sandbox after the clients left: $(cat "$REL_WORK/dfd.err") "
	timeout 20 "$FB" daemon --socket "$sock" --stats >/dev/null 2>>"$REL_WORK/dfd.err" || problems+="no stats after the clients left "
	[[ -n $problems ]] && { defects=$((defects + 1)); echo "  daemon-faults (fd exhaustion): $problems $(cat "$REL_WORK/dfd.out")" >&2; }
	local after
	after=$(rel_snapshot)
	out=$(rel_compare "$before" "$after") || leaks=$?
	rel_stop_daemon "$dpid"
	REL_EXCLUDE_PIDS=

	# The same without the sandbox service: the zygote loop accepts itself.
	local zsock=$sdir/z.sock
	if rel_daemon "$zsock" "$sdir/zdaemon.log" --pool 1 --no-sandboxes; then
		dpid=$REL_DAEMON_PID
		local zlimit
		zlimit=$(prlimit --pid "$dpid" --nofile --output SOFT --noheadings | tr -d ' ')
		prlimit --pid "$dpid" --nofile=$(($(rel_fds "$dpid") + 8)):
		/usr/bin/python3 - "$zsock" "$dpid" "$dpid" >"$REL_WORK/zfd.out" 2>&1 <"$REL_WORK/fd-clients.py"
		runs=$((runs + 1))
		problems=""
		ticks=$(awk '/cpu_ticks_2s/ { if ($3 > m) m = $3 } END { print m + 0 }' "$REL_WORK/zfd.out")
		((ticks > 50)) && problems+="the zygote loop spins at EMFILE ($ticks ticks in 2 s) "
		prlimit --pid "$dpid" --nofile="$zlimit:"
		sleep 0.5
		timeout 20 "$FB" daemon --socket "$zsock" --stats >/dev/null 2>"$REL_WORK/zfd.err" || problems+="no stats after the clients left "
		[[ -n $problems ]] && { defects=$((defects + 1)); echo "  daemon-faults (zygote loop, fd exhaustion): $problems $(cat "$REL_WORK/zfd.out")" >&2; }
		rel_stop_daemon "$dpid"
	else
		defects=$((defects + 1))
	fi
	rel_report daemon-faults "$runs" "$leaks" "$defects" "$out"
}

for s in ${REL_SCENARIOS:-state_enospc pids_limit emfile bundle_removed big_config deep_json daemon_faults}; do
	"scenario_$s"
done
exit "$REL_FAILED"
