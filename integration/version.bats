#!/usr/bin/env bats
# --version / -v.

load helpers

setup() { :; }

@test "--version prints the runtime version and the spec version" {
	run runtime --version
	assert_success
	assert_line --index 0 --regexp '^(forkbox|runc) version [0-9]+\.[0-9]+'
	assert_line --regexp '^spec: 1\.[0-9]+\.[0-9]+'
}

@test "-v is --version" {
	run runtime -v
	assert_success
	assert_line --index 0 --regexp ' version [0-9]'
	local short=$output
	run runtime --version
	assert_output "$short"
}

@test "--version reports the VERSION file and a commit line" {
	skip_if_runc "forkbox-specific version source"
	run runtime --version
	assert_line --index 0 "forkbox version $(cat "$REPO_DIR/VERSION")"
	assert_line --regexp '^commit: '
}

@test "--version reports runtime-spec 1.3" {
	skip_if_runc "runc 1.1 implements runtime-spec 1.0.2"
	run runtime --version
	assert_line --regexp '^spec: 1\.3\.[0-9]+'
}

@test "forkbox starts at its own entry point, which maps its pages before glibc's start-up" {
	skip_if_runc "forkbox's start-up"
	command -v readelf >/dev/null || skip "readelf (binutils) missing"
	local entry symbol
	entry=$(readelf -h "$FORKBOX" | awk '/Entry point address/ {print $NF}')
	symbol=$(readelf -sW "$FORKBOX" | awk '$NF == "forkbox_entry" {print $2}')
	[ -n "$symbol" ] || skip "$FORKBOX has no symbol table"
	[ "$((entry))" -eq "$((16#$symbol))" ]
	run runtime --version
	assert_success
}

# KiB of forkbox's code mapped in a `forkbox --version` stopped at its first trace mark:
# FORKBOX_PREFAULT=$1.
code_mapped_kib() {
	FORKBOX_TEST_STOP_AT=main FORKBOX_PREFAULT=$1 "$FORKBOX" --version >/dev/null &
	local pid=$! i
	for ((i = 0; i < 500; i++)); do
		[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = T ] && break
		sleep 0.01
	done
	# The Rss of the executable's r-xp mapping.
	awk '/ r-xp / {code = 1; next} / [r-][w-][x-][ps] / {code = 0} code && /^Rss:/ {print $2; exit}' "/proc/$pid/smaps"
	kill -CONT "$pid"
	wait "$pid"
}

@test "forkbox maps its pages in bulk only where that pays: measured, or FORKBOX_PREFAULT=on|off" {
	skip_if_runc "forkbox's start-up"
	command -v readelf >/dev/null || skip "readelf (binutils) missing"
	local trace="$BATS_TEST_TMPDIR/trace" on off
	FORKBOX_TRACE=$trace FORKBOX_PREFAULT=on runtime --version
	FORKBOX_TRACE=$trace FORKBOX_PREFAULT=off runtime --version
	FORKBOX_TRACE=$trace runtime --version
	run cut -d' ' -f3- "$trace"
	assert_line --index 1 'prefault: bulk (fault 0, populate 0 ticks)'
	assert_line --index 3 'prefault: faults (fault 0, populate 0 ticks)'
	# Measured: both costs are non-zero, whichever way it went on this machine.
	assert_line --index 5 --regexp '^prefault: (bulk|faults) \(fault [1-9][0-9]*, populate [1-9][0-9]* ticks\)$'
	# In bulk all of the code is mapped before main (one madvise); else only what ran.
	on=$(code_mapped_kib on)
	off=$(code_mapped_kib off)
	echo "code mapped at main: on $on KiB, off $off KiB"
	local memsz
	memsz=$(readelf -lW "$FORKBOX" | awk '$1 == "LOAD" && $8 == "E" {print $6}')
	[ -n "$memsz" ] || skip "readelf shows no code segment"
	[ "$on" -ge "$((memsz / 1024))" ]
	[ "$off" -lt "$on" ]
}
