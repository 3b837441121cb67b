#!/usr/bin/env bash
# sandbox.sh - the agent sandbox service (`forkbox daemon`, docs/sandbox-protocol.md) timed:
# latency of one sandbox from Python (the SDK when python/ imports, else the protocol inline)
# and from a C client (bench/sandbox-client.c) against the same commands bare (posix_spawn:
# the floor), under bwrap, under firejail and as `forkbox run` of an OCI bundle, in one
# round-robin loop; the watchdog's overshoot past timeout_ms; sandboxes per second with 2
# concurrent clients and the daemon's CPU. Then the latency loop again as an unprivileged user
# with that user's daemon. bench/sandbox_bench.py is the timing loop (Debian's /usr/bin/python3).
#
# usage: bench/sandbox.sh [-n RUNS] [-f RUNS] [-w RUNS] [-t SECONDS] [--no-rootless] [--rootless-only]
#                         [--no-settle] [--pause-ms MS]
#   -n RUNS          timed iterations of the latency loop (default 200)
#   -f RUNS          timed firejail runs, spread over the loop (default 50: it is slow)
#   -w RUNS          watchdog runs (default 200, 0.5 s each)
#   -t SECONDS       throughput window per kind of client (default 10)
#   --no-rootless    leave out the unprivileged section
#   --rootless-only  only the unprivileged section
#   --no-settle      no wait for an idle daemon with a full pool before each timed latency run
#   --pause-ms MS    then MS of idle (sleep) before each timed run of the latency loop and the
#                    sessions section, as an agent waiting for its model leaves the machine:
#                    caches cool, CPUs idle (default 0: the settle's polling keeps them warm)
# environment: FORKBOX (default build/forkbox; copied, so a rebuild mid-run changes nothing),
#   SANDBOX_CLIENT (default build/sandbox-client), RUNC (the bundle's config template),
#   BENCH_USER (default fbrootless, uid 23456: made when missing, as bench/rootless.sh does)
#
# Prints medians, p90 and p99 in milliseconds with each one's ratio to the reference (ratio
# > 1: forkbox is faster), and each figure against the issue's target; asserts nothing.
# Needs root; bwrap (bubblewrap) and firejail are skipped with a note when missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
runs=200
firejail_runs=50
watchdog_runs=200
seconds=10
root_section=1
rootless_section=1
extra=()
while [[ $# -gt 0 ]]; do
	case $1 in
	-n) runs=$2; shift 2 ;;
	-f) firejail_runs=$2; shift 2 ;;
	-w) watchdog_runs=$2; shift 2 ;;
	-t) seconds=$2; shift 2 ;;
	--no-rootless) rootless_section=0; shift ;;
	--rootless-only) root_section=0; shift ;;
	--no-settle) extra+=(--no-settle); shift ;;
	--pause-ms) extra+=(--pause-ms "$2"); shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "sandbox.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
for v in "$runs" "$firejail_runs" "$watchdog_runs" "$seconds"; do
	[[ $v =~ ^[0-9]+$ && $v -gt 0 ]] || { echo "sandbox.sh: -n/-f/-w/-t want positive numbers" >&2; exit 2; }
done
[[ $(id -u) -eq 0 ]] || { echo "sandbox.sh: needs root" >&2; exit 1; }
python=/usr/bin/python3  # Debian's: the python3 first on PATH may be another interpreter
FORKBOX=$(readlink -f "${FORKBOX:-$repo/build/forkbox}")
client=${SANDBOX_CLIENT:-$repo/build/sandbox-client}
RUNC=${RUNC:-$(command -v runc || echo /usr/sbin/runc)}
BUSYBOX=${BUSYBOX:-/bin/busybox}
user=${BENCH_USER:-fbrootless}
[[ -x $python ]] || { echo "sandbox.sh: $python missing (apt-get install python3)" >&2; exit 1; }
command -v jq >/dev/null || { echo "sandbox.sh: jq missing (apt-get install jq)" >&2; exit 1; }
[[ -x $FORKBOX ]] || { echo "sandbox.sh: $FORKBOX is not built (make)" >&2; exit 1; }
[[ -x $client ]] || { echo "sandbox.sh: $client is not built (make build/sandbox-client)" >&2; exit 1; }

# Everything on one tmpfs: the binaries' copies, the SDK's copy, the sockets, the bundle, the
# state root. The directory is 0755, not mktemp's 0700: sandboxes are built from inside their
# own user namespace (mapped uids), and a stage next to a socket in a directory those uids
# cannot search failed every sandbox ("mount the stage tmpfs: Permission denied"; a root
# daemon's stage is /run/forkbox-sandbox since, the user's still sits beside its socket).
work=$(mktemp -d -p /dev/shm forkbox-bench-sandbox.XXXXXX)
chmod 0755 "$work"
daemons=()
# shellcheck disable=SC2317  # called through the trap
cleanup() {
	trap - EXIT
	local pid
	for pid in "${daemons[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [[ -d $work/state ]]; then
		for id in $("$work/forkbox" --root "$work/state" list -q 2>/dev/null); do
			"$work/forkbox" --root "$work/state" delete --force "$id" >/dev/null 2>&1 || true
		done
	fi
	rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cp "$FORKBOX" "$work/forkbox"
cp "$client" "$work/sandbox-client"
cp "$here/sandbox_bench.py" "$work/"
mkdir -p "$work/py"
if [[ -d $repo/python/forkbox ]]; then
	cp -r "$repo/python/forkbox" "$work/py/"
fi
chmod -R a+rX "$work"

# Waits for a daemon's socket to answer info with a ready pool; prints its info.
wait_daemon() { # SOCKET LOG [setpriv prefix...]
	local sock=$1 log=$2 i
	shift 2
	for ((i = 0; i < 200; i++)); do
		if out=$("$@" "$work/forkbox" sandbox --socket "$sock" --info 2>/dev/null) &&
			[[ $(jq -r '.pool.ready' <<<"$out") -gt 0 ]]; then
			echo "$out"
			return 0
		fi
		sleep 0.05
	done
	echo "sandbox.sh: the daemon on $sock does not answer:" >&2
	cat "$log" >&2
	exit 1
}

echo "$("$work/forkbox" --version 2>/dev/null | head -2 | paste -sd' '), kernel $(uname -r), $(nproc) CPUs," \
	"bwrap $(bwrap --version 2>/dev/null | awk '{print $2}' || true), firejail $(firejail --version 2>/dev/null | awk 'NR==1{print $3}' || true)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ $root_section -eq 1 ]]; then
	# The `forkbox run` subject: the busybox true bundle of bench/run-true.sh (its seccomp
	# profile, forkbox's default), state root on this tmpfs.
	bundle_arg=()
	if [[ -x $RUNC ]]; then
		# shellcheck disable=SC2034  # build_bundle's inputs
		bundle=$work/bundle use_seccomp=1 prog=sandbox.sh
		# shellcheck source=bench/bundle.bash
		source "$here/bundle.bash"
		build_bundle 2>/dev/null
		mkdir -p "$work/state"
		bundle_arg=(--bundle "$work/bundle" --state-root "$work/state")
	else
		echo "note: runc missing: no \`forkbox run\` subject"
	fi
	sock=$work/root.sock
	(exec "$work/forkbox" daemon --socket "$sock" </dev/null >"$work/daemon.log" 2>&1) &
	daemons+=($!)
	echo "daemon (root): $(wait_daemon "$sock" "$work/daemon.log")"
	echo
	PYTHONPATH=$work/py "$python" "$work/sandbox_bench.py" --socket "$sock" --client "$work/sandbox-client" \
		--forkbox "$work/forkbox" "${bundle_arg[@]}" -n "$runs" --firejail-n "$firejail_runs" \
		--watchdog "$watchdog_runs" --seconds "$seconds" --label root "${extra[@]}"
	echo "  (firejail runs as root here: it is setuid, so an unprivileged user's firejail pays the same)"
	if grep -v '^$' "$work/daemon.log" >/dev/null 2>&1; then
		echo "daemon log (root), last lines:"
		tail -5 "$work/daemon.log" | sed 's/^/  /'
	fi
	kill -TERM "${daemons[0]}" 2>/dev/null || true
	wait "${daemons[0]}" 2>/dev/null || true
	daemons=()
fi

if [[ $rootless_section -eq 1 ]]; then
	if ! id -u "$user" >/dev/null 2>&1; then
		groupadd -g 23456 "$user" 2>/dev/null || true
		useradd -u 23456 -g 23456 -M -d /nonexistent -s /usr/sbin/nologin "$user"
	fi
	uid=$(id -u "$user")
	gid=$(id -g "$user")
	as_user=(setpriv --reuid "$uid" --regid "$gid" --init-groups)
	mkdir -p "$work/xdg"
	chown "$uid:$gid" "$work/xdg"
	chmod 0700 "$work/xdg"
	usock=$work/xdg/forkbox.sock
	# exec: $! is the daemon's own pid, for the kill.
	(exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/nonexistent USER="$user" XDG_RUNTIME_DIR="$work/xdg" \
		"${as_user[@]}" "$work/forkbox" daemon --socket "$usock" </dev/null >"$work/daemon-user.log" 2>&1) &
	daemons+=($!)
	echo
	echo "daemon ($user, uid $uid): $(wait_daemon "$usock" "$work/daemon-user.log" "${as_user[@]}")"
	echo
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/nonexistent USER="$user" XDG_RUNTIME_DIR="$work/xdg" \
		PYTHONPATH="$work/py" "${as_user[@]}" "$python" "$work/sandbox_bench.py" --socket "$usock" \
		--client "$work/sandbox-client" --forkbox "$work/forkbox" -n "$runs" --firejail-n "$firejail_runs" \
		--sections latency --label "$user" "${extra[@]}"
fi
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
