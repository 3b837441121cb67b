# bundle.bash - the demo bundle of bench/run-true.sh and bench/throughput.sh, sourced by both.
# build_bundle uses: bundle (directory), use_seccomp (1/0), FORKBOX, RUNC, BUSYBOX, repo, prog
# (the script's name for messages).
# shellcheck disable=SC2154  # those come from the sourcing script

# The demo bundle: busybox rootfs (reused when present), process /bin/true, terminal off.
# The config comes from runc's template, which every runtime here accepts, so all of them
# run the same one; the seccomp profile is forkbox's.
build_bundle() {
	local cfg=$bundle/config.json
	if [[ ! -x $bundle/rootfs/bin/busybox ]]; then
		[[ -x $BUSYBOX ]] || { echo "$prog: $BUSYBOX missing (apt-get install busybox-static)" >&2; exit 1; }
		echo "building demo bundle in $bundle" >&2
		rm -rf "$bundle"
		mkdir -p "$bundle/rootfs"/{bin,dev,proc,sys,etc,tmp}
		cp "$BUSYBOX" "$bundle/rootfs/bin/busybox"
		# chroot so the links point at /bin/busybox rather than the host path of the copy.
		chroot "$bundle/rootfs" /bin/busybox --install -s /bin
	fi
	rm -f "$cfg"
	"$RUNC" spec --bundle "$bundle"
	local seccomp=null
	if [[ $use_seccomp -eq 1 ]]; then
		local specdir fb=$FORKBOX
		specdir=$(mktemp -d)
		# FORKBOX=runc (checking the harness): the profile still comes from forkbox's spec.
		"$fb" spec --bundle "$specdir" 2>/dev/null || true
		if ! jq -e .linux.seccomp "$specdir/config.json" >/dev/null 2>&1; then
			fb=$repo/build/forkbox
			rm -f "$specdir/config.json"
			[[ -x $fb ]] && "$fb" spec --bundle "$specdir"
		fi
		seccomp=$(jq -c .linux.seccomp "$specdir/config.json" 2>/dev/null) || seccomp=null
		rm -rf "$specdir"
		[[ $seccomp != null && -n $seccomp ]] ||
			{ echo "$prog: no seccomp profile from '$FORKBOX spec' (build forkbox or use --no-seccomp)" >&2; exit 1; }
	fi
	jq --argjson s "$seccomp" '.process.terminal = false | .process.args = ["/bin/true"] |
		if $s == null then del(.linux.seccomp) else .linux.seccomp = $s end' "$cfg" >"$cfg.tmp"
	mv "$cfg.tmp" "$cfg"
}
