# shellcheck shell=bash
# A systemd fixture for the systemd cgroup driver's tests: systemd (252 on Debian 12) as
# PID 1 of fresh namespaces, so `--systemd-cgroup` has a real manager to talk to on hosts
# whose own PID 1 is not systemd. Load after helpers.bash.
#
# What it is (sd_boot):
# - a child cgroup of the caller's own in every hierarchy ($SD_CGROUP_DIRS, host paths; cpuset
#   cpus/mems copied from the parent), which becomes the root of a new cgroup namespace;
# - `unshare --cgroup --pid --fork --mount --uts --ipc --net --propagation private`, inside
#   which a fresh /proc (/proc/sys read-only), /sys read-only, a tmpfs /sys/fs/cgroup with fresh
#   mounts of the same hierarchies the host has (a cgroup namespace shows its root only), a
#   tmpfs /run, a private /dev (the host's device nodes bound, a new devpts; /dev/console is the
#   fixture's log file and /dev/kmsg is /dev/null, so systemd's messages never reach the host's
#   console or kernel log), a tmpfs over /var/lib/systemd;
# - /run/systemd/system/$SD_NAME.target (DefaultDependencies=no) as the unit to boot, and in
#   /run/systemd/system.control (which outranks /etc and /lib) every boot-sequence unit masked:
#   systemd-tmpfiles-setup would empty the host's shared /tmp, others set sysctls, swap and the
#   clock. dbus.socket and dbus.service are replaced there by units that pull nothing else, so
#   `sd_start_dbus` gives the fixture a system bus (systemd connects to it once dbus.service
#   runs) without the boot sequence;
# - systemd itself runs without CAP_SYS_TIME, CAP_SYS_MODULE and CAP_SYSLOG in its bounding set.
#
# Every command a test runs inside goes through sd_exec, which first moves itself into the
# fixture's fbx-caller cgroup (made again when systemd trims it), so nothing a runtime does can
# land in a cgroup outside the fixture's subtree. sd_shutdown kills the namespace's PID 1 (every
# process of the pid namespace dies with it) and removes the cgroups depth first.
#
#   $SD_NAME          fixture name: fbsd-<bats pid>-<n>, also the target's and $container's
#   $SD_PID           host pid of the fixture's systemd (its PID 1)
#   $SD_DIR           the fixture's files (log, launcher pid, cgroup list)
#   $SD_CGROUP_DIRS   host paths of the fixture's root cgroup, one per hierarchy, ':'-separated
#
# With SD_CGROUP2_ONLY=1, sd_boot gives the fixture the host's cgroup2 hierarchy alone, mounted
# at its /sys/fs/cgroup: systemd runs in unified mode and a runtime inside sees a pure v2 host
# (on a hybrid host that hierarchy holds the controllers v1 does not, e.g. hugetlb alone).

# Units a booting systemd would start that must not run here (they act on the host: /tmp,
# sysctls, swap, the clock, udev, the journal).
SD_MASKED_UNITS=(
	sysinit.target basic.target local-fs.target swap.target timers.target sockets.target
	systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service systemd-tmpfiles-clean.service
	systemd-tmpfiles-clean.timer systemd-sysctl.service systemd-remount-fs.service
	systemd-journald.service systemd-journald.socket systemd-journald-dev-log.socket
	systemd-journald-audit.socket systemd-journal-flush.service systemd-udevd.service
	systemd-udev-trigger.service systemd-timesyncd.service systemd-random-seed.service
	systemd-logind.service systemd-update-utmp.service systemd-binfmt.service
	systemd-modules-load.service systemd-machine-id-commit.service systemd-firstboot.service
	systemd-sysusers.service systemd-hwdb-update.service systemd-boot-system-token.service
	apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer logrotate.timer
	man-db.timer dpkg-db-backup.timer
)

# _sd_cgroup_mounts: "MOUNTPOINT FSTYPE CONTROLLERS" per cgroup hierarchy root of this
# mount namespace (CONTROLLERS: the v1 super options naming them, "-" for cgroup2).
_sd_cgroup_mounts() {
	awk '{
		for (i = 7; $i != "-"; i++) {}
		fstype = $(i + 1); super = $(i + 3)
		if ($4 != "/" || (fstype != "cgroup" && fstype != "cgroup2")) next
		if (fstype == "cgroup2") { print $5, fstype, "-"; next }
		n = split(super, o, ","); c = ""
		for (j = 1; j <= n; j++) {
			if (o[j] ~ /^(rw|ro|clone_children|noprefix|xattr|cpuset_v2_mode|favordynmods)$/ || o[j] ~ /^release_agent=/) continue
			c = c (c == "" ? "" : ",") o[j]
		}
		if (c != "" && !(c in seen)) { seen[c] = 1; print $5, fstype, c }
	}' /proc/self/mountinfo
}

# _sd_sorted_list LIST: a comma-separated list, sorted ("cpuacct,cpu" -> "cpu,cpuacct").
_sd_sorted_list() {
	tr ',' '\n' <<<"$1" | sort | paste -sd,
}

# _sd_own_cgroup_dirs: this process's cgroup dir in every hierarchy, as host paths, one a
# line: "MOUNTPOINT FSTYPE CONTROLLERS DIR". /proc/self/cgroup is read whole before anything
# moves (reading it while moving made nested junk directories).
_sd_own_cgroup_dirs() {
	local self mp fstype ctl want line path
	self=$(cat /proc/self/cgroup) || return 1
	while read -r mp fstype ctl; do
		path=
		if [[ $fstype == cgroup2 ]]; then
			path=$(awk -F: '$1 == "0" && $2 == "" { sub(/^0::/, ""); print; exit }' <<<"$self")
		else
			want=$(_sd_sorted_list "$ctl")
			while IFS= read -r line; do
				local c=${line#*:}
				c=${c%%:*}
				if [[ -n $c && $(_sd_sorted_list "$c") == "$want" ]]; then
					path=${line#*:*:}
					break
				fi
			done <<<"$self"
		fi
		[[ -n $path ]] || continue
		path=${path%/}
		echo "$mp $fstype $ctl $mp$path"
	done < <(_sd_cgroup_mounts)
}

# _sd_make_cgroup DIR: mkdir DIR (a cgroup); a v1 cpuset gets its parent's cpus and mems,
# without which no task can join it (ENOSPC).
_sd_make_cgroup() {
	local dir=$1
	[[ -d $dir ]] && return 0
	mkdir "$dir" 2>/dev/null || [[ -d $dir ]] || return 1
	if [[ -f $dir/cpuset.cpus && ! -f $dir/cgroup.controllers ]]; then
		[[ -n $(cat "$dir/cpuset.cpus") ]] || cat "$dir/../cpuset.cpus" >"$dir/cpuset.cpus" || return 1
		[[ -n $(cat "$dir/cpuset.mems") ]] || cat "$dir/../cpuset.mems" >"$dir/cpuset.mems" || return 1
	fi
}

# _sd_inside NAME LOG MOUNTS...: runs as PID 1 of the new pid namespace (unshare --fork), in
# the new mount namespace; MOUNTS are "MOUNTPOINT:FSTYPE:CONTROLLERS" as on the host. Builds
# the fixture's private /proc, /sys, /dev, /run and cgroup mounts, then execs systemd.
_sd_inside() {
	set -e
	local name=$1 log=$2 m mp fstype ctl
	shift 2
	mount -t proc -o nosuid,nodev,noexec proc /proc
	mount --bind /proc/sys /proc/sys
	mount -o remount,bind,ro /proc/sys
	# /sys read-only, then the cgroup tree on top of it (a mount needs no write access to
	# the directory it covers).
	local unified_root=no
	for m in "$@"; do
		[[ $m == /sys/fs/cgroup:cgroup2:* ]] && unified_root=yes
	done
	# A cgroup2 root alone: the host's cgroup mounts go, not just covered (they would stay
	# in mountinfo, where a runtime finds the hierarchies).
	[[ $unified_root == yes ]] && umount -R /sys/fs/cgroup 2>/dev/null
	mount --bind /sys /sys
	mount -o remount,bind,ro /sys
	if [[ $unified_root == yes ]]; then
		mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup
	else
		mount -t tmpfs -o mode=755,nosuid,nodev,noexec cgroup /sys/fs/cgroup
		for m in "$@"; do
			IFS=: read -r mp fstype ctl <<<"$m"
			mkdir -p "$mp"
			if [[ $fstype == cgroup2 ]]; then
				mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$mp"
			elif [[ $ctl == name=* ]]; then
				mount -t cgroup -o "nosuid,nodev,noexec,none,$ctl" cgroup "$mp"
			else
				mount -t cgroup -o "nosuid,nodev,noexec,$ctl" cgroup "$mp"
			fi
		done
		mount -o remount,ro /sys/fs/cgroup # the tmpfs only, as systemd's own is
	fi
	# /run first: the private /dev is staged on it (nothing is made in the host's /dev or /tmp).
	mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run
	local dev=/run/fbx-dev n
	mkdir "$dev"
	mount -t tmpfs -o mode=755,nosuid tmpfs "$dev"
	for n in null zero full random urandom tty fuse net/tun; do
		[[ -e /dev/$n ]] || continue
		mkdir -p "$dev/$(dirname "$n")"
		touch "$dev/$n"
		mount --bind "/dev/$n" "$dev/$n"
	done
	touch "$dev/console" "$dev/kmsg"
	mount --bind "$log" "$dev/console"
	mount --bind /dev/null "$dev/kmsg"
	mkdir -p "$dev/pts" "$dev/shm" "$dev/mqueue"
	mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$dev/pts"
	ln -s pts/ptmx "$dev/ptmx"
	mount -t tmpfs -o mode=1777,nosuid,nodev shm "$dev/shm"
	mount -t mqueue mqueue "$dev/mqueue"
	ln -s /proc/self/fd "$dev/fd"
	ln -s /proc/self/fd/0 "$dev/stdin"
	ln -s /proc/self/fd/1 "$dev/stdout"
	ln -s /proc/self/fd/2 "$dev/stderr"
	mount --move "$dev" /dev
	rmdir "$dev"
	[[ -d /var/lib/systemd ]] && mount -t tmpfs -o mode=755 tmpfs /var/lib/systemd
	mkdir -p /run/systemd/system /run/systemd/system.control /run/dbus /run/lock
	printf '[Unit]\nDescription=forkbox test fixture %s\nDefaultDependencies=no\n' "$name" \
		>"/run/systemd/system/$name.target"
	local u
	for u in "${SD_MASKED_UNITS[@]}"; do
		ln -s /dev/null "/run/systemd/system.control/$u"
	done
	# The system bus, on demand (sd_start_dbus), pulling in nothing else.
	printf '%s\n' '[Unit]' 'Description=D-Bus System Message Bus Socket (fixture)' 'DefaultDependencies=no' \
		'[Socket]' 'ListenStream=/run/dbus/system_bus_socket' \
		>/run/systemd/system.control/dbus.socket
	printf '%s\n' '[Unit]' 'Description=D-Bus System Message Bus (fixture)' 'DefaultDependencies=no' \
		'Requires=dbus.socket' 'After=dbus.socket' '[Service]' 'Type=notify' 'NotifyAccess=main' \
		'ExecStart=/usr/bin/dbus-daemon --system --address=systemd: --nofork --nopidfile --systemd-activation --nosyslog' \
		>/run/systemd/system.control/dbus.service
	export container=$name
	exec setpriv --bounding-set=-sys_time,-sys_module,-syslog -- \
		/lib/systemd/systemd --unit="$name.target" --log-target=console --show-status=no
}

# sd_boot: starts a fixture and waits until systemd reports "running" (or "degraded").
sd_boot() {
	export SD_NAME=fbsd-$$-${SD_SEQ:-0}
	SD_SEQ=$((${SD_SEQ:-0} + 1))
	export SD_DIR=$BATS_FILE_TMPDIR/$SD_NAME
	mkdir -p "$SD_DIR"
	: >"$SD_DIR/systemd.log"
	local mp fstype ctl dir mounts=() dirs=()
	while read -r mp fstype ctl dir; do
		if [[ -n ${SD_CGROUP2_ONLY:-} ]]; then
			[[ $fstype == cgroup2 ]] || continue
			mp=/sys/fs/cgroup
		fi
		_sd_make_cgroup "$dir/$SD_NAME" || {
			echo "sd_boot: cannot make cgroup $dir/$SD_NAME" >&2
			return 1
		}
		dirs+=("$dir/$SD_NAME")
		mounts+=("$mp:$fstype:$ctl")
	done < <(_sd_own_cgroup_dirs)
	[[ ${#dirs[@]} -gt 0 ]] || { echo "sd_boot: no cgroup hierarchies" >&2; return 1; }
	SD_CGROUP_DIRS=$(IFS=:; echo "${dirs[*]}")
	export SD_CGROUP_DIRS
	printf '%s\n' "${dirs[@]}" >"$SD_DIR/cgroups"
	(
		for dir in "${dirs[@]}"; do
			echo "$BASHPID" >"$dir/cgroup.procs" || exit 1
		done
		exec unshare --cgroup --pid --fork --mount --uts --ipc --net --propagation private \
			bash -c "SD_MASKED_UNITS=(${SD_MASKED_UNITS[*]}); $(declare -f _sd_inside); _sd_inside \"\$@\"" \
			_sd_inside "$SD_NAME" "$SD_DIR/systemd.log" "${mounts[@]}"
	) </dev/null >>"$SD_DIR/systemd.log" 2>&1 3>&- 4>&- &
	echo $! >"$SD_DIR/launcher.pid"
	# systemd is the launcher's (unshare's) only child.
	local i state=
	for ((i = 0; i < 200; i++)); do
		SD_PID=$(pgrep -P "$(cat "$SD_DIR/launcher.pid")" -x systemd) && break
		sleep 0.05
	done
	export SD_PID
	if [[ -z $SD_PID ]]; then
		echo "sd_boot: systemd did not start; its log:" >&2
		cat "$SD_DIR/systemd.log" >&2
		sd_shutdown
		return 1
	fi
	for ((i = 0; i < 200; i++)); do
		state=$(sd_exec systemctl is-system-running 2>/dev/null) || true
		[[ $state == running || $state == degraded ]] && return 0
		sleep 0.05
	done
	echo "sd_boot: systemd is '$state' after 10 s; its log:" >&2
	cat "$SD_DIR/systemd.log" >&2
	sd_shutdown
	return 1
}

# sd_exec CMD...: CMD inside the fixture (every namespace of its PID 1), run from the fixture's
# fbx-caller cgroup in every hierarchy.
sd_exec() {
	[[ -n ${SD_PID:-} ]] || { echo "sd_exec: no fixture" >&2; return 1; }
	(
		local dir try
		IFS=: read -r -a dirs <<<"$SD_CGROUP_DIRS"
		for dir in "${dirs[@]}"; do
			# systemd may trim the empty cgroup between the mkdir and the join: make it again.
			for ((try = 0; ; try++)); do
				_sd_make_cgroup "$dir/fbx-caller" &&
					echo "$BASHPID" 2>/dev/null >"$dir/fbx-caller/cgroup.procs" && break
				((try < 20)) || { echo "sd_exec: cannot join $dir/fbx-caller" >&2; exit 1; }
				sleep 0.01
			done
		done
		exec nsenter -t "$SD_PID" -a "$@"
	)
}

# sd_systemctl ARGS...: systemctl inside the fixture.
sd_systemctl() {
	sd_exec systemctl --no-pager "$@"
}

# sd_unit_property UNIT PROPERTY: the property's value (`systemctl show -P`).
sd_unit_property() {
	sd_systemctl show -P "$2" "$1"
}

# sd_start_dbus / sd_stop_dbus: the fixture's system bus (dbus-daemon as dbus.service); systemd
# connects to it once the service runs.
sd_start_dbus() {
	sd_systemctl start dbus.socket dbus.service || return 1
	local i
	for ((i = 0; i < 100; i++)); do
		# systemd itself answers on the bus once it has connected to it.
		sd_exec busctl --system status org.freedesktop.systemd1 >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	echo "sd_start_dbus: systemd is not on the system bus after 5 s" >&2
	return 1
}
sd_stop_dbus() {
	sd_systemctl stop dbus.service dbus.socket
	# The socket file outlives the socket unit (RemoveOnStop=no).
	sd_exec rm -f /run/dbus/system_bus_socket
}

# sd_cgroup_dir HIERARCHY: the host path of the fixture's root in the hierarchy mounted at
# /sys/fs/cgroup/HIERARCHY ("memory", "systemd", "unified").
sd_cgroup_dir() {
	local d
	while read -r d; do
		case $d in
		/sys/fs/cgroup/"$1"/* | /sys/fs/cgroup/"$1") echo "$d"; return 0 ;;
		esac
	done <"$SD_DIR/cgroups"
	return 1
}

# sd_shutdown: kills the fixture (its PID 1; the rest of its pid namespace dies with it) and
# removes its cgroups, children first. Never fails.
sd_shutdown() {
	local -
	set +e
	[[ -n ${SD_DIR:-} && -d $SD_DIR ]] || return 0
	local launcher pid i dir
	launcher=$(cat "$SD_DIR/launcher.pid" 2>/dev/null)
	pid=${SD_PID:-}
	[[ -z $pid && -n $launcher ]] && pid=$(pgrep -P "$launcher" -x systemd)
	[[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
	[[ -n $launcher ]] && kill -KILL "$launcher" 2>/dev/null
	[[ -n $launcher ]] && wait "$launcher" 2>/dev/null
	if [[ -f $SD_DIR/cgroups ]]; then
		while read -r dir; do
			[[ -n $dir && $dir == /sys/fs/cgroup/* && $dir == */fbsd-* ]] || continue
			for ((i = 0; i < 100; i++)); do
				[[ -d $dir ]] || break
				find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null
				[[ -d $dir ]] || break
				sleep 0.05
			done
			[[ -d $dir ]] && echo "sd_shutdown: $dir remains" >&2
		done <"$SD_DIR/cgroups"
	fi
	SD_PID=
	return 0
}

# --- for the tests of the driver (systemd.bats, systemd-v2.bats) ---

# sd_forget_units ID: units of a test's container a failed test left, stopped and forgotten,
# so the next test starts clean.
sd_forget_units() {
	local unit
	for unit in $(sd_systemctl list-units --all --plain --no-legend "*$1*" 2>/dev/null | awk '{print $1}'); do
		sd_systemctl stop "$unit" >/dev/null 2>&1 || true
		sd_systemctl reset-failed "$unit" >/dev/null 2>&1 || true
	done
}

# cgroup_of PID [HIERARCHY]: PID's cgroup inside the fixture in the hierarchy mounted at
# /sys/fs/cgroup/HIERARCHY (default name=systemd's "systemd"; "unified" is cgroup2).
cgroup_of() {
	local pid=$1 hierarchy=${2:-systemd} ctl
	case $hierarchy in
	unified) ctl= ;;
	systemd) ctl=name=systemd ;;
	*) ctl=$hierarchy ;;
	esac
	sd_exec awk -F: -v c="$ctl" '$2 == c { print $3 }' "/proc/$pid/cgroup"
}

# assert_in_cgroup PID PATH: PID (inside the fixture) is in PATH in every hierarchy.
assert_in_cgroup() {
	local pid=$1 want=$2 text
	text=$(sd_exec cat "/proc/$pid/cgroup") || fail "no process $pid"
	local line bad=
	while IFS= read -r line; do
		[[ ${line#*:*:} == "$want" ]] || bad+="$line"$'\n'
	done <<<"$text"
	[[ -z $bad ]] || fail "process $pid is not in $want everywhere:
$text"
}

# unit_gone UNIT: systemd no longer knows the unit.
assert_unit_gone() {
	local state
	state=$(sd_unit_property "$1" LoadState)
	[[ $state == not-found ]] || fail "unit $1 is still $state ($(sd_unit_property "$1" ActiveState))"
}

# assert_no_cgroups_left NAME: no directory NAME in any hierarchy of the fixture.
assert_no_cgroups_left() {
	local dir found=
	while read -r dir; do
		found+=$(find "$dir" -name "$1" 2>/dev/null)
	done <"$SD_DIR/cgroups"
	[[ -z $found ]] || fail "cgroups left: $found"
}

# sd_create ID [ARGS...]: create_container with --systemd-cgroup (a global flag).
sd_create() {
	local id=$1
	shift
	runtime --systemd-cgroup create --bundle "$BUNDLE" "$@" "$id" \
		</dev/null >"$BATS_TEST_TMPDIR/$id.out" 2>"$BATS_TEST_TMPDIR/$id.err" 3>&- 4>&-
}

# set_cgroups_path PATH
set_cgroups_path() {
	update_config '.linux.cgroupsPath = $p' --arg p "$1"
}
