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
