#!/usr/bin/env bash
# demo.sh [BUILD]: the main job. Makes a demo bundle from busybox-static, runs it through
# `forkbox run`, prints its output and how long the run took.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
forkbox=$here/$build/forkbox
work=$(mktemp -d /tmp/forkbox-demo.XXXXXX)
chmod 0755 "$work"
trap 'rm -rf --one-file-system "$work"' EXIT
"$here/scripts/make-bundle.sh" "$work/bundle" "$forkbox" \
	sh -c 'echo "hello from forkbox: hostname=$(hostname) pid=$$ uid=$(id -u)"; echo "rootfs: $(ls /)"'
echo "== forkbox --version"
"$forkbox" --version
echo "== forkbox run demo"
start=$(date +%s%N)
"$forkbox" --root "$work/state" run --bundle "$work/bundle" forkbox-demo
end=$(date +%s%N)
echo "== forkbox run took $(( (end - start) / 1000 )) us (whole process, wall clock)"
# The first container in a state root compiles the seccomp profile `spec` wrote (milliseconds
# in libseccomp) and caches the program there; the next ones load it from the cache.
start=$(date +%s%N)
"$forkbox" --root "$work/state" run --bundle "$work/bundle" forkbox-demo-2 >/dev/null
end=$(date +%s%N)
echo "== a second forkbox run (seccomp program from the state root's cache) took $(( (end - start) / 1000 )) us"
# The CI use: the bundle's path instead of an id, a generated id, a deadline.
echo "== cd $work && forkbox run --timeout 1s bundle/   (a container that would sleep 60 s)"
jq '.process.args = ["sh", "-c", "echo sleeping; sleep 60"]' "$work/bundle/config.json" >"$work/bundle/config.json.new"
mv "$work/bundle/config.json.new" "$work/bundle/config.json"
code=0
(cd "$work" && "$forkbox" --root "$work/state" run --timeout 1s bundle/) || code=$?
echo "== exit code $code (124: killed at the deadline); containers left: $("$forkbox" --root "$work/state" list -q | wc -l)"

# The agent sandbox: `forkbox daemon` is the parent of every sandbox; `forkbox sandbox` (and
# the Python SDK, python/) asks it for one per command.
sock="$work/forkbox.sock"
"$forkbox" daemon --socket "$sock" >"$work/daemon.log" 2>&1 &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf --one-file-system "$work"' EXIT
for _ in $(seq 100); do "$forkbox" sandbox --socket "$sock" --info >/dev/null 2>&1 && break; sleep 0.05; done
sandbox() { "$forkbox" sandbox --socket "$sock" "$@"; }
echo "== forkbox sandbox -- python3 -c 'import math; print(math.factorial(20))'"
sandbox -- python3 -c 'import math; print(math.factorial(20))'
echo "== inside: uid, pid, processes seen, network interfaces"
sandbox -- sh -c 'echo "uid=$(id -u) pid=$$ processes=$(ls /proc | grep -c "^[0-9]") interfaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\n" " ")"'
echo "== echo payload >> /etc/hosts inside (the write lands in the sandbox's RAM layer)"
before=$(sha256sum /etc/hosts)
sandbox -- sh -c 'echo payload >> /etc/hosts && tail -1 /etc/hosts'
[[ $(sha256sum /etc/hosts) == "$before" ]] && echo "== the host's /etc/hosts is unchanged"
echo "== forkbox sandbox --rootfs bundle/ (an image instead of the host's /): $(sandbox --rootfs "$work/bundle" -- sh -c 'echo "$(ls /bin | wc -l) busybox applets in /bin,"; test -e /usr/bin/python3 || echo "no python3 of the host"' | tr '\n' ' ')"
echo "== mount(2) inside: $(sandbox -- python3 -c 'import ctypes,os; l=ctypes.CDLL(None,use_errno=True); l.syscall(165,0,0,0,0,0); print(os.strerror(ctypes.get_errno()))')"
echo "== a busy loop with --timeout-ms 300"
start=$(date +%s%N)
code=0
sandbox --timeout-ms 300 -- sh -c 'while :; do :; done' 2>/dev/null || code=$?
end=$(date +%s%N)
echo "== exit code $code after $(( (end - start) / 1000 )) us (124: killed at the deadline, every process of the sandbox with it)"
start=$(date +%s%N)
for _ in $(seq 20); do sandbox -- true; done
end=$(date +%s%N)
echo "== 20 sandboxes of true, one after another: $(( (end - start) / 20000 )) us each, with the forkbox client's own start-up"

# Sessions: a sandbox kept across runs, its files, a fork of its state, warm Python.
session=$(sandbox create --ttl-s 120)
echo "== a session: $session"
echo 'print(6 * 7)' | sandbox put "$session" /work/main.py
echo "== forkbox sandbox --session $session -- python3 /work/main.py: $(sandbox --session "$session" -- python3 /work/main.py)"
echo "== its diff: $(sandbox diff "$session")"
child=$(sandbox fork "$session")
sandbox --session "$child" -- sh -c 'echo "print(\"the child changed it\")" > /work/main.py'
echo "== a fork $child changed its copy: $(sandbox --session "$child" -- python3 /work/main.py); the parent still prints $(sandbox --session "$session" -- python3 /work/main.py)"
sandbox close "$child"
sandbox close "$session"
echo "== warm Python (the interpreter started before the request): $(sandbox --python 'import math; print(math.factorial(20))')"
