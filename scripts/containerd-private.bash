# shellcheck shell=bash
# A private containerd for tests and benchmarks: its own root, state, sockets, config and
# plugin dirs under one directory, so it never touches (or is touched by) a system
# containerd. Sourced by integration/containerd.bats and bench/managers-containerd.sh.
#
#   ctrd_start DIR FORKBOX   writes DIR/config.toml, starts containerd (log: DIR/containerd.log),
#                            waits for its socket; sets CTRD_DIR, CTRD_SOCK, CTRD_PID
#   ctrd_ctr ARGS...         ctr against it, in namespace $CTRD_NS
#   ctrd_import ROOTFS NAME [CMD...]  builds an OCI image of ROOTFS (scripts/oci-image.sh) with
#                            Cmd CMD (default /bin/sh) and imports it as NAME (REPO:TAG)
#   ctrd_cleanup             kills and deletes every task and container of $CTRD_NS
#   ctrd_stop                ctrd_cleanup, then kills containerd by its pid, unmounts what is
#                            left under DIR and removes DIR
#
# Runtimes in the config: the runc v2 shim (`ctr run --runc-binary FORKBOX` picks forkbox per
# container), and the runc v1 runtime plugin whose `runtime` entry is FORKBOX
# (`ctr run --runtime io.containerd.runtime.v1.linux`). The CRI plugin is disabled unless
# CTRD_CRI_BINARY is set: then it serves on the same socket (host network only: no CNI),
# with a runtime entry "forkbox" of type io.containerd.runc.v2 whose BinaryName is
# $CTRD_CRI_BINARY, and $CTRD_CRI_SANDBOX_IMAGE as the pause image (import it into the
# k8s.io namespace first). CTRD_CRI_SYSTEMD_CGROUP=true sets that entry's SystemdCgroup (the
# shim then passes --systemd-cgroup, and pods need a cgroup parent ending in .slice).

CTRD_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CTRD_NS=${CTRD_NS:-forkbox-test}

ctrd_start() {
	local dir=$1 forkbox=$2 i
	mkdir -p "$dir"/{root,state,opt,runc,runc-v1}
	CTRD_DIR=$dir
	CTRD_SOCK=$dir/containerd.sock
	local cri='"io.containerd.grpc.v1.cri", '
	[[ -n ${CTRD_CRI_BINARY:-} ]] && cri=
	cat >"$dir/config.toml" <<EOF
version = 2
root = "$dir/root"
state = "$dir/state"
plugin_dir = "$dir/plugins"
disabled_plugins = [${cri}"io.containerd.internal.v1.tracing",
	"io.containerd.tracing.processor.v1.otlp", "io.containerd.snapshotter.v1.aufs",
	"io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
	"io.containerd.snapshotter.v1.devmapper"]
oom_score = 0

[grpc]
  address = "$CTRD_SOCK"

[ttrpc]
  address = "$CTRD_SOCK.ttrpc"

[debug]
  address = "$dir/debug.sock"
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"

[plugins."io.containerd.runtime.v1.linux"]
  shim = "containerd-shim"
  runtime = "$forkbox"
  runtime_root = "$dir/runc-v1"
  no_shim = false
EOF
	if [[ -n ${CTRD_CRI_BINARY:-} ]]; then
		mkdir -p "$dir"/cni/{bin,conf} "$dir/cri-forkbox"
		cat >>"$dir/config.toml" <<EOF

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${CTRD_CRI_SANDBOX_IMAGE:-}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  # Pods ask for oom_score_adj -998, which needs CAP_SYS_RESOURCE; clamp to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$dir/cni/bin"
    conf_dir = "$dir/cni/conf"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.forkbox]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.forkbox.options]
        BinaryName = "$CTRD_CRI_BINARY"
        Root = "$dir/cri-forkbox"
        SystemdCgroup = ${CTRD_CRI_SYSTEMD_CGROUP:-false}
EOF
	fi
	# setsid: containerd (and the shims it starts, which re-parent to init) stay out of the
	# caller's session and process group, so a test's Ctrl-C or kill of its group misses them.
	setsid containerd --config "$dir/config.toml" </dev/null >"$dir/containerd.log" 2>&1 &
	CTRD_PID=$!
	echo "$CTRD_PID" >"$dir/containerd.pid"
	for ((i = 0; i < 300; i++)); do
		if [[ -S $CTRD_SOCK ]] && ctr -a "$CTRD_SOCK" version >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$CTRD_PID" 2>/dev/null || break
		sleep 0.1
	done
	echo "containerd did not come up; its log:" >&2
	tail -n 30 "$dir/containerd.log" >&2
	return 1
}

ctrd_ctr() {
	ctr -a "$CTRD_SOCK" -n "$CTRD_NS" "$@"
}

ctrd_import() {
	local rootfs=$1 name=$2 tar
	shift 2
	tar=$CTRD_DIR/image-$$.tar
	"$CTRD_SCRIPTS/oci-image.sh" "$rootfs" "$tar" "${name##*:}" "$@" || return 1
	ctrd_ctr images import --base-name "${name%:*}" "$tar" >/dev/null || return 1
	rm -f "$tar"
}

ctrd_cleanup() {
	# Best effort, also under errexit (bats, set -e scripts): one failed step must not skip the rest.
	local -
	set +e
	local id ids
	[[ -n ${CTRD_SOCK:-} && -S $CTRD_SOCK ]] || return 0
	mapfile -t ids < <(ctrd_ctr tasks list -q 2>/dev/null)
	for id in "${ids[@]}"; do
		[[ -n $id ]] || continue
		ctrd_ctr tasks resume "$id" >/dev/null 2>&1
		ctrd_ctr tasks kill --all -s SIGKILL "$id" >/dev/null 2>&1
		ctrd_ctr tasks delete --force "$id" >/dev/null 2>&1
	done
	mapfile -t ids < <(ctrd_ctr containers list -q 2>/dev/null)
	for id in "${ids[@]}"; do
		[[ -n $id ]] && ctrd_ctr containers delete "$id" >/dev/null 2>&1
	done
	return 0
}

ctrd_stop() {
	local -
	set +e
	local pid i mnt mnts
	[[ -n ${CTRD_DIR:-} && -d $CTRD_DIR ]] || return 0
	ctrd_cleanup
	pid=${CTRD_PID:-$(cat "$CTRD_DIR/containerd.pid" 2>/dev/null)}
	if [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null; then
		for ((i = 0; i < 100; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null
	fi
	# Shims that outlived their tasks (a task delete failed): found by our socket address
	# on their command line, killed by pid.
	for pid in $(grep -l -s -a -F -- "$CTRD_SOCK" /proc/[0-9]*/cmdline | cut -d/ -f3); do
		[[ $pid != "$$" && $pid != "$BASHPID" ]] && kill -KILL "$pid" 2>/dev/null
	done
	mapfile -t mnts < <(awk -v d="$CTRD_DIR/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r)
	for mnt in "${mnts[@]}"; do
		umount -l "$mnt" 2>/dev/null
	done
	rm -rf "$CTRD_DIR"
	# The runc shim's --root for our namespace, outside CTRD_DIR: by now it holds only
	# forkbox's compiled-seccomp cache (rmdir keeps it if a container was left behind).
	if [[ -n ${CTRD_NS:-} && $CTRD_NS != k8s.io ]]; then
		rm -f "/run/containerd/runc/$CTRD_NS"/.seccomp=* 2>/dev/null
		rmdir "/run/containerd/runc/$CTRD_NS" 2>/dev/null
		# The shim puts containers under /NAMESPACE/ID: the namespace's parent cgroups stay
		# after the last delete (rmdir keeps any that is still in use).
		local cg
		for cg in "/sys/fs/cgroup/$CTRD_NS" /sys/fs/cgroup/*/"$CTRD_NS"; do
			[[ -d $cg ]] && rmdir "$cg" 2>/dev/null
		done
	fi
	return 0
}
