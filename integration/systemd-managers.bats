#!/usr/bin/env bats
# podman (cgroup_manager = "systemd") and containerd (CRI with SystemdCgroup = true) drive
# the runtime's systemd cgroup driver, inside the systemd fixture of systemd-helpers.bash:
# the managers run in the fixture's namespaces (sd_exec), with private configurations and
# storage under this file's tmpdir, as in podman.bats and containerd.bats.
#
# Validate against runc: FORKBOX=/usr/sbin/runc bats integration/systemd-managers.bats

load helpers
load systemd-helpers

PM_IMAGE=localhost/fbtest-busybox:latest
CRI_IMAGE=localhost/fb-busybox:latest
CRI_PAUSE_IMAGE=localhost/fb-pause:latest

setup_file() {
	sd_boot
	export PM_DIR=$BATS_FILE_TMPDIR/podman
	mkdir -p "$PM_DIR"/{tmp,volumes,image-tmp}
	local forkbox
	forkbox=$(readlink -f "$FORKBOX")
	# As podman.bats, but with systemd as the cgroup manager: conmon then passes
	# --systemd-cgroup to create, and cgroupsPath is machine.slice:libpod:<id>.
	cat >"$PM_DIR/containers.conf" <<-EOF
		[containers]
		default_ulimits = ["nofile=1024:4096", "nproc=2048:4096"]
		netns = "none"
		log_driver = "k8s-file"

		[network]
		network_backend = "cni"
		network_config_dir = "$PM_DIR/cni"

		[engine]
		cgroup_manager = "systemd"
		events_logger = "file"
		events_logfile_path = "$PM_DIR/events.log"
		image_copy_tmp_dir = "$PM_DIR/image-tmp"
		pull_policy = "never"
		runtime = "fbruntime"
		runtime_supports_json = ["fbruntime", "crun", "runc"]
		tmp_dir = "$PM_DIR/tmp"
		volume_path = "$PM_DIR/volumes"

		[engine.runtimes]
		fbruntime = ["$forkbox"]
	EOF
	cat >"$PM_DIR/storage.conf" <<-EOF
		[storage]
		driver = "overlay"
		graphroot = "$PM_DIR/graph"
		runroot = "$PM_DIR/run"
	EOF
	: >"$PM_DIR/registries.conf"
	export CONTAINERS_CONF=$PM_DIR/containers.conf
	export CONTAINERS_STORAGE_CONF=$PM_DIR/storage.conf
	export CONTAINERS_REGISTRIES_CONF=$PM_DIR/registries.conf
	export TMPDIR=$PM_DIR/image-tmp
	local base
	base=$(base_rootfs)
	tar -C "$base" -cf "$PM_DIR/rootfs.tar" .
	if command -v podman >/dev/null && command -v conmon >/dev/null; then
		pm import --change 'CMD ["/bin/sh"]' "$PM_DIR/rootfs.tar" "$PM_IMAGE" >/dev/null
	fi
	# A private containerd inside the fixture with the CRI plugin, whose runtime entry has
	# SystemdCgroup = true and the runtime as its BinaryName.
	if command -v containerd >/dev/null && command -v ctr >/dev/null &&
		/usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null; then
		ctrd_in_fixture
		CTRD_DIR=$(mktemp -d /tmp/fbsdctrd.XXXXXX)
		export CTRD_DIR CTRD_NS=k8s.io
		export CTRD_CRI_BINARY=$FORKBOX CTRD_CRI_SANDBOX_IMAGE=$CRI_PAUSE_IMAGE CTRD_CRI_SYSTEMD_CGROUP=true
		ctrd_start "$CTRD_DIR" "$FORKBOX"
		export CTRD_SOCK CTRD_PID
		ctrd_import "$base" "$CRI_IMAGE"
		ctrd_import "$base" "$CRI_PAUSE_IMAGE" /bin/fbhelper sigwait
	fi
}

teardown_file() {
	if [[ -n ${PM_DIR:-} && -d $PM_DIR && -n ${SD_PID:-} ]]; then
		pm rm --all --force --time 0 >/dev/null 2>&1
		pm rmi --all --force >/dev/null 2>&1
	fi
	[[ -n ${CTRD_DIR:-} && -n ${SD_PID:-} ]] && (ctrd_in_fixture && ctrd_cleanup)
	# Every mount and process of the managers lives in the fixture's namespaces: gone with it.
	sd_shutdown
	# containerd died with the fixture: what is left is its directory (ctrd_stop finds
	# stray shims by the socket's path on their command line: never run it without one).
	if [[ -n ${CTRD_DIR:-} && ${CTRD_SOCK:-} == "$CTRD_DIR/containerd.sock" ]]; then
		(ctrd_in_fixture && ctrd_stop) >/dev/null 2>&1
	fi
	[[ -n ${PM_DIR:-} ]] && rm -rf "$PM_DIR"
	return 0
}

setup() {
	[[ -n ${SD_PID:-} ]] || skip "no systemd fixture"
}

teardown() {
	[[ -n ${PM_DIR:-} ]] && pm rm --all --force --time 0 >/dev/null 2>&1
	return 0
}

# pm ARGS...: podman inside the fixture, with this file's storage (fds 3 and 4 closed).
pm() {
	sd_exec podman --root "$PM_DIR/graph" --runroot "$PM_DIR/run" "$@" 3>&- 4>&-
}

skip_without_podman() {
	command -v podman >/dev/null && command -v conmon >/dev/null || skip "podman and conmon are not installed"
}

@test "podman, cgroup_manager=systemd: the container runs in machine.slice's libpod-<id>.scope" {
	skip_without_podman
	run pm run --name "fbt$BATS_TEST_NUMBER" "$PM_IMAGE" cat /proc/self/cgroup
	assert_success
	local id
	id=$(pm inspect --format '{{.Id}}' "fbt$BATS_TEST_NUMBER")
	assert_line "9:name=systemd:/machine.slice/libpod-$id.scope"
	assert_line "4:memory:/machine.slice/libpod-$id.scope"
	pm rm "fbt$BATS_TEST_NUMBER" >/dev/null
	assert_unit_gone "libpod-$id.scope"
	skip_if_runc "runc 1.1.5 leaves the container's first process in machine.slice's devices cgroup (systemd.bats says why)"
	assert_line "5:devices:/machine.slice/libpod-$id.scope"
}

@test "podman, cgroup_manager=systemd: limits, exec, stop and rm (the runtime's later verbs come without the flag)" {
	skip_without_podman
	local name=fbt$BATS_TEST_NUMBER id
	pm run -d --name "$name" --memory 64m --pids-limit 50 "$PM_IMAGE" sleep 1000 >/dev/null
	id=$(pm inspect --format '{{.Id}}' "$name")
	local unit=libpod-$id.scope
	run sd_systemctl show -p MemoryLimit -p TasksMax -p Delegate -p Slice "$unit"
	assert_line MemoryLimit=67108864
	assert_line TasksMax=50
	assert_line Delegate=yes
	assert_line Slice=machine.slice
	run pm exec "$name" cat /sys/fs/cgroup/memory/memory.limit_in_bytes
	assert_success
	assert_output 67108864
	run pm exec "$name" sh -c 'grep -c libpod-'"$id"'.scope /proc/self/cgroup'
	assert_output 10
	run pm stop --time 1 "$name"
	assert_success
	pm rm "$name" >/dev/null
	assert_unit_gone "$unit"
}

# ctrd_in_fixture: scripts/containerd-private.bash's commands, run inside the fixture.
ctrd_in_fixture() {
	ctr() { sd_exec /usr/bin/ctr "$@"; }
	setsid() { sd_exec /usr/bin/setsid "$@"; }
	# shellcheck source=../scripts/containerd-private.bash
	source "$REPO_DIR/scripts/containerd-private.bash"
}

# ctrd_up: skips without the containerd that setup_file started.
ctrd_up() {
	[[ -n ${CTRD_SOCK:-} ]] || skip "containerd, ctr, python3-grpcio or python3-protobuf is missing"
}

# cri VERB ARGS...: integration/helper/cri-client.py against the fixture's containerd, with
# the runtime handler "forkbox"; the pod's cgroup parent is $CRI_CGROUP_PARENT.
cri() {
	sd_exec /usr/bin/python3 "$INTEGRATION_DIR/helper/cri-client.py" "$CTRD_DIR/containerd.sock" forkbox "$@"
}

@test "containerd CRI, SystemdCgroup=true: a pod's containers run in cri-containerd-<id>.scope in the pod's slice" {
	ctrd_up
	local logs=$BATS_TEST_TMPDIR/logs pod cid slice=kubepods-besteffort-podfbt$BATS_TEST_NUMBER.slice
	mkdir -p "$logs"
	export CRI_CGROUP_PARENT=$slice
	pod=$(cri run-pod "pod$BATS_TEST_NUMBER" "$logs")
	cid=$(cri create "$pod" "pod$BATS_TEST_NUMBER" "$logs" sleeper "$CRI_IMAGE" /bin/fbhelper sleep 1000)
	cri start "$cid"
	local unit=cri-containerd-$cid.scope
	run sd_unit_property "$unit" ControlGroup
	assert_output "/kubepods.slice/kubepods-besteffort.slice/$slice/$unit"
	run cri exec-sync "$cid" /bin/sh -c 'cat /proc/self/cgroup'
	assert_success
	assert_line "4:memory:/kubepods.slice/kubepods-besteffort.slice/$slice/$unit"
	# UpdateContainerResources: the unit's properties and the cgroup files.
	run cri update "$cid" 67108864 50000 100000
	assert_success
	run sd_unit_property "$unit" MemoryLimit
	assert_output 67108864
	run cri exec-sync "$cid" cat /sys/fs/cgroup/memory/memory.limit_in_bytes
	assert_output 67108864
	cri stop-pod "$pod"
	cri rm-pod "$pod"
	assert_unit_gone "$unit"
	sd_systemctl stop kubepods.slice
}
