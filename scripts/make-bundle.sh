#!/usr/bin/env bash
# make-bundle.sh DIR [FORKBOX] [ARGS...]: an OCI bundle with a busybox-static rootfs (plus
# build/fbhelper when built) and the default config.json from `forkbox spec`, non-terminal,
# running ARGS (default: sh -c 'echo hello from forkbox').
set -euo pipefail
dir=$1; shift
forkbox=${1:-$(dirname "$0")/../build/forkbox}; [ $# -gt 0 ] && shift
busybox=$(command -v busybox || echo /bin/busybox)
[ -x "$busybox" ] || { echo "make-bundle: busybox-static is not installed" >&2; exit 1; }
rm -rf "$dir"
mkdir -p "$dir/rootfs/bin" "$dir/rootfs/proc" "$dir/rootfs/sys" "$dir/rootfs/dev" "$dir/rootfs/tmp" "$dir/rootfs/etc"
cp "$busybox" "$dir/rootfs/bin/busybox"
for applet in $("$dir/rootfs/bin/busybox" --list); do
	[ "$applet" = busybox ] || ln -sf busybox "$dir/rootfs/bin/$applet"
done
helper=$(dirname "$0")/../build/fbhelper
[ -x "$helper" ] && cp "$helper" "$dir/rootfs/bin/fbhelper"
echo "root:x:0:0:root:/root:/bin/sh" >"$dir/rootfs/etc/passwd"
echo "root:x:0:" >"$dir/rootfs/etc/group"
(cd "$dir" && "$forkbox" spec)
args='["sh","-c","echo hello from forkbox"]'
if [ $# -gt 0 ]; then args=$(printf '%s\n' "$@" | jq -R . | jq -s -c .); fi
jq --argjson a "$args" '.process.terminal = false | .process.args = $a' "$dir/config.json" >"$dir/config.json.new"
mv "$dir/config.json.new" "$dir/config.json"
