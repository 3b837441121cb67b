# forkbox build. `make` builds build/forkbox and build/fbhelper; `make demo` is the main job;
# `make test` installs what it needs, builds from scratch and runs every test.
PREFIX ?= /usr/local
DESTDIR ?=
BUILD ?= build
CXX ?= g++
CC ?= gcc

# Build in parallel by default (sub-makes of demo/test pick this up).
MAKEFLAGS += --jobs=$(shell nproc 2>/dev/null || echo 2)

VERSION := $(shell cat VERSION)
COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

CXXFLAGS ?= -O2 -g
# Required flags, kept apart so `make CXXFLAGS=...` (check-asan) cannot drop them.
FB_CXXFLAGS := -std=c++2b -Wall -Wextra -Werror -I. -MMD -MP \
	-DFORKBOX_VERSION='"$(VERSION)"'
LDFLAGS ?=
LIBS := -lseccomp -lyajl -lcap -lboost_program_options
# forkbox is linked statically: a dynamic start-up (ld.so, libstdc++, boost) costs ~3 ms
# per invocation, and create/start/delete are each an invocation on the critical path.
STATIC_LIBS := -static -lseccomp -lyajl_s -lcap -lboost_program_options
# The entry point maps the executable's pages in bulk before glibc's start-up faults on
# them one by one (libforkbox/base/prefault.cpp; x86_64 only).
ifeq ($(shell uname -m),x86_64)
STATIC_LIBS := -static -Wl,-e,forkbox_entry -lseccomp -lyajl_s -lcap -lboost_program_options
endif

LIB_SRCS := $(sort $(wildcard oci/*.cpp libforkbox/*.cpp libforkbox/*/*.cpp))
CMD_SRCS := $(sort $(wildcard cmd/*.cpp))
TEST_SRCS := $(sort $(wildcard tests/*.cpp))
# exec_stub_blob.o carries the exec stub's bytes (see the rules for $(BUILD)/exec-stub).
LIB_OBJS := $(LIB_SRCS:%.cpp=$(BUILD)/obj/%.o) $(BUILD)/obj/libforkbox/process/exec_stub_blob.o
CMD_OBJS := $(CMD_SRCS:%.cpp=$(BUILD)/obj/%.o)
TEST_OBJS := $(TEST_SRCS:%.cpp=$(BUILD)/obj/%.o)

DEB_PACKAGES := build-essential pkg-config git libseccomp-dev libyajl-dev libcap-dev \
	libboost-program-options-dev libgtest-dev bats bats-assert bats-support busybox-static \
	jq runc iproute2 procps util-linux python3
# integration/cgroupv2.bats reads the device programs attached to a cgroup with bpftool.
DEB_PACKAGES += bpftool
# Rootless: newuidmap/newgidmap map subuid/subgid ranges for an unprivileged user.
DEB_PACKAGES += uidmap
# The systemd fixture (integration/systemd-helpers.bash): systemd booted in namespaces of its
# own, dbus-daemon for its system bus, and systemd-run for systemd-user.bats' user manager.
DEB_PACKAGES += systemd dbus
# integration/podman.bats: podman (with conmon and catatonit for --init) drives forkbox;
# bsdutils' `script` gives `podman run -it` a terminal.
DEB_PACKAGES += podman conmon catatonit bsdutils
# integration/containerd.bats and bench/managers-containerd.sh: containerd brings ctr and the shims;
# python3-grpcio drives its CRI plugin (integration/helper/cri-client.py; no crictl in Debian).
DEB_PACKAGES += containerd python3-grpcio python3-protobuf
# The Python SDK's tests (python/tests) run under Debian's python3 with pytest; `pip install
# ./python` into a venv needs python3-venv and python3-pip. bench-sandbox compares with
# bubblewrap and firejail.
DEB_PACKAGES += python3-pytest python3-venv python3-pip bubblewrap firejail
# `make fuzz`: libFuzzer with ASan and UBSan from Debian's clang 19 (clang 14, Debian 12's
# default, cannot use GCC 12's <expected>), its runtime libraries, and llvm-symbolizer for
# readable reports. The SDK's reply parser is fuzzed with hypothesis.
DEB_PACKAGES += clang-19 libclang-rt-19-dev llvm-19 python3-hypothesis

.PHONY: all deps bench-deps demo test unit integration python-test reliability fuzz install uninstall bench bench-managers bench-sandbox check-asan conformance clean

all: $(BUILD)/forkbox $(BUILD)/fbhelper

FORKBOX_LIBS ?= $(STATIC_LIBS)
# Linked aside, then copied into place: the linker writes its output piecemeal, and the page
# cache that leaves makes every start of the file ~0.2 ms slower on the PVM guests than a
# copy's (bench/process-floor: 1707 vs 1489 us a `--version`; a copy read back from disk
# 1564), likely for its many small folios. Users run a copy (`make install`, a package), so
# build/forkbox, which the tests and benchmarks run, is one too.
$(BUILD)/forkbox: $(CMD_OBJS) $(LIB_OBJS)
	$(CXX) $(CXXFLAGS) $(FB_CXXFLAGS) $(LDFLAGS) -o $@.linked $^ $(FORKBOX_LIBS)
	cp $@.linked $@.tmp && mv -f $@.tmp $@ && rm -f $@.linked

$(BUILD)/unit-tests: $(TEST_OBJS) $(LIB_OBJS)
	$(CXX) $(CXXFLAGS) $(FB_CXXFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS) -lgtest -lgtest_main -pthread

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(FB_CXXFLAGS) -c -o $@ $<

# `forkbox --version` names the commit: only main.o carries it, rebuilt whenever HEAD moves
# (the stamp is rewritten only when the commit differs, so other builds stay incremental).
$(BUILD)/commit.stamp: FORCE
	@mkdir -p $(BUILD)
	@echo '$(COMMIT)' | cmp -s - $@ || echo '$(COMMIT)' >$@
$(BUILD)/obj/cmd/main.o: $(BUILD)/commit.stamp
$(BUILD)/obj/cmd/main.o: FB_CXXFLAGS += -DFORKBOX_COMMIT='"$(COMMIT)"'
.PHONY: FORCE
FORCE:

# The exec stub (libforkbox/process/exec_guard.hpp says why): freestanding, no libc, ~2 KB, one
# read+exec segment. Fixed flags: sanitizer or PIE flags must never reach it.
STUB_CFLAGS := -Os -ffreestanding -fno-builtin -fno-stack-protector -fno-pie -no-pie \
	-fno-asynchronous-unwind-tables -fno-unwind-tables -nostdlib -static -s \
	-Wl,--build-id=none -Wl,-z,noexecstack -Wl,-z,norelro -Wl,-z,noseparate-code \
	-Wall -Wextra -Werror
$(BUILD)/exec-stub: libforkbox/process/exec_stub.c libforkbox/process/waiting_init_signals.h
	@mkdir -p $(BUILD)
	$(CC) $(STUB_CFLAGS) -o $@ $<

# Embeds the stub: .incbin finds $(BUILD)/exec-stub through -I$(BUILD).
$(BUILD)/obj/libforkbox/process/exec_stub_blob.o: libforkbox/process/exec_stub_blob.S $(BUILD)/exec-stub
	@mkdir -p $(dir $@)
	$(CC) -c -I$(BUILD) -o $@ $<

# The in-container test payload: static, so any rootfs can run it.
$(BUILD)/fbhelper: integration/helper/fbhelper.c
	@mkdir -p $(BUILD)
	$(CC) -static -O2 -Wall -Wextra -o $@ $<

# What the exec guard costs (not part of `all`): see bench/exec-stub-cost.cpp.
$(BUILD)/bench-exec-stub: $(BUILD)/obj/bench/exec-stub-cost.o $(LIB_OBJS)
	$(CXX) $(CXXFLAGS) $(FB_CXXFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)

# What reading config.json costs in-process (not part of `all`): see bench/json-parse.cpp.
# Linked statically like forkbox, so the first call pays what it pays in `forkbox create`.
$(BUILD)/bench-json-parse: $(BUILD)/obj/bench/json-parse.o $(LIB_OBJS)
	$(CXX) $(CXXFLAGS) $(FB_CXXFLAGS) $(LDFLAGS) -o $@ $^ $(FORKBOX_LIBS)
-include $(BUILD)/obj/bench/json-parse.d

# What syscalls, page faults, first touches and forks cost here (not part of `all`): see
# bench/memory-costs.cpp.
$(BUILD)/bench-memory-costs: $(BUILD)/obj/bench/memory-costs.o
	$(CXX) $(CXXFLAGS) $(FB_CXXFLAGS) $(LDFLAGS) -o $@ $^

# What any process costs here before its first line of work (not part of `all`): see
# bench/floor.sh. The two reference programs: no libc at all, and an empty static glibc main.
$(BUILD)/bench-process-floor: $(BUILD)/obj/bench/process-floor.o
	$(CXX) $(CXXFLAGS) $(FB_CXXFLAGS) $(LDFLAGS) -o $@ $^
$(BUILD)/floor-nolibc: bench/floor-nolibc.c
	$(CC) -O2 -static -nostdlib -fno-stack-protector -o $@ $<
$(BUILD)/floor-glibc: bench/floor-glibc.c
	$(CC) -O2 -static -o $@ $<
# The sandbox protocol's C client of bench/sandbox.sh: static, as a shell would spawn it.
$(BUILD)/sandbox-client: bench/sandbox-client.c
	@mkdir -p $(BUILD)
	$(CC) -O2 -static -Wall -Wextra -Werror -o $@ $<

# Installs the Debian packages named in $(1) that are missing.
define install_missing
	@missing=""; for p in $(1); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y --no-install-recommends $$missing || \
		{ apt-get update && apt-get install -y --no-install-recommends $$missing; }; \
	fi
endef

# What building and testing need.
deps:
	$(call install_missing,$(DEB_PACKAGES))

# The benchmarks' references beside runc, bwrap and firejail: crun (bench/run-true.sh leaves
# it out when it is not installed). Not in deps: the tests run without it.
BENCH_PACKAGES := crun
bench-deps: deps
	$(call install_missing,$(BENCH_PACKAGES))

demo: deps
	$(MAKE) all
	./scripts/demo.sh $(BUILD)

unit: $(BUILD)/unit-tests
	./$(BUILD)/unit-tests

integration: all
	bats integration/

# The SDK against a real daemon (Debian's python3: the first python3 on PATH may lack pytest).
python-test: all
	FORKBOX_BIN=$(CURDIR)/$(BUILD)/forkbox /usr/bin/python3 -m pytest -q python/tests

test: deps
	$(MAKE) unit
	$(MAKE) fuzz FUZZ_SECONDS=10
	$(MAKE) integration
	$(MAKE) reliability QUICK=1
	$(MAKE) python-test

# Resource faults, soaks and stampedes (RELIABILITY.md): 10,000 runs per soak; QUICK=1 runs
# the short version (200) that `make test` runs.
reliability: all $(BUILD)/sandbox-client
	FORKBOX=$(CURDIR)/$(BUILD)/forkbox FBHELPER=$(CURDIR)/$(BUILD)/fbhelper SANDBOX_CLIENT=$(CURDIR)/$(BUILD)/sandbox-client \
		./tests/reliability/run.sh $(if $(filter 1,$(QUICK)),--quick)

install: $(BUILD)/forkbox
	install -D -m 0755 $(BUILD)/forkbox $(DESTDIR)$(PREFIX)/bin/forkbox

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/forkbox

# BENCH_SECONDS: length of each throughput window (`make bench BENCH_SECONDS=5` for a quick look).
BENCH_SECONDS ?= 30
bench: all bench-deps $(BUILD)/bench-process-floor $(BUILD)/floor-nolibc $(BUILD)/floor-glibc $(BUILD)/bench-memory-costs
	./bench/run-true.sh --shared-root --ro-binary --critical-path
	@# Again as on a pure cgroup v2 host, what most users run (crun refuses to run there:
	@# it raises RLIMIT_MEMLOCK for its device program, which root here cannot).
	./bench/run-true.sh --shared-root --cgroup2 --no-crun --critical-path
	./bench/floor.sh
	./bench/rootless.sh
	./bench/throughput.sh -t $(BENCH_SECONDS)

# The managers' view: podman and containerd with forkbox against runc.
bench-managers: all bench-deps
	./bench/managers.sh

# The agent sandbox service: latency from Python and C against bare, bwrap, firejail and
# forkbox run; the watchdog's overshoot; throughput with 2 clients (not part of `bench`).
bench-sandbox: all bench-deps $(BUILD)/sandbox-client
	./bench/sandbox.sh

# Unit and integration tests under AddressSanitizer and UndefinedBehaviorSanitizer. GCC 12 at
# -O1 with sanitizers warns maybe-uninitialized inside std::optional (false positives).
check-asan:
	$(MAKE) BUILD=build-asan CXXFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -Wno-maybe-uninitialized" \
		LDFLAGS="-fsanitize=address,undefined" FORKBOX_LIBS="$(LIBS)" build-asan/unit-tests build-asan/forkbox build-asan/fbhelper
	./build-asan/unit-tests
	FORKBOX=$(CURDIR)/build-asan/forkbox FBHELPER=$(CURDIR)/build-asan/fbhelper bats integration/

# Fuzzing (README.md, `make fuzz`): each tests/fuzz/NAME.cpp is a libFuzzer target, built with
# ASan and UBSan in $(FUZZ_BUILD) and run FUZZ_SECONDS on its seed corpus tests/fuzz/corpus/NAME
# (what it learns goes to $(FUZZ_BUILD)/corpus/NAME), with the dictionary tests/fuzz/NAME.dict
# if there is one. Any crash, leak, UB report, timeout or failed property fails the run and
# leaves the input in $(FUZZ_BUILD)/crashes/.
FUZZ_SECONDS ?= 20
FUZZ_BUILD ?= build/fuzz
FUZZ_CXX ?= clang++-19
FUZZ_SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CXXFLAGS := -std=c++2b -Wall -Wextra -Werror -I. -MMD -MP -DFORKBOX_VERSION='"$(VERSION)"' \
	-O1 -gline-tables-only $(FUZZ_SANITIZE)
FUZZ_TARGETS := $(patsubst tests/fuzz/%.cpp,%,$(sort $(wildcard tests/fuzz/*.cpp)))
# The library without the engine's executors, which no target calls (a target takes from the
# archive just the objects it uses), so the sanitized build stays short. New files are built
# by default: list one here only when no target needs it.
FUZZ_UNUSED_SRCS := libforkbox/features.cpp libforkbox/seccomp/cache.cpp \
	$(addprefix libforkbox/cgroup/,freezer.cpp oom.cpp stats.cpp stats_json.cpp) \
	$(addprefix libforkbox/container/,container.cpp create.cpp events.cpp exec.cpp init.cpp run.cpp seccomp_agent.cpp) \
	$(addprefix libforkbox/process/,exec_guard.cpp foreground.cpp hooks.cpp process.cpp sync.cpp terminal.cpp) \
	$(addprefix libforkbox/sandbox/,builder.cpp client.cpp server.cpp server_embryos.cpp server_runs.cpp) libforkbox/zygote/daemon.cpp \
	oci/spec_template.cpp
FUZZ_LIB_SRCS := $(filter-out $(FUZZ_UNUSED_SRCS),$(LIB_SRCS))
FUZZ_LIB_OBJS := $(FUZZ_LIB_SRCS:%.cpp=$(FUZZ_BUILD)/obj/%.o)
FUZZ_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/fuzz/lsan.supp \
	ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-19/bin/llvm-symbolizer

$(FUZZ_BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<
$(FUZZ_BUILD)/libforkbox.a: $(FUZZ_LIB_OBJS)
	rm -f $@
	ar rcs $@ $^
$(FUZZ_BUILD)/bin/%: $(FUZZ_BUILD)/obj/tests/fuzz/%.o $(FUZZ_BUILD)/libforkbox.a
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_SANITIZE) -fsanitize=fuzzer -o $@ $^ $(LIBS)

# Built by pattern rules, but kept: make would delete them as intermediates.
.SECONDARY: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/bin/%) $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/obj/tests/fuzz/%.o)

# One run per target (in parallel under -j): its log goes to $(FUZZ_BUILD)/logs/NAME.log, whose
# last lines are shown when it fails. -timeout: an input taking 10 s is a hang.
fuzz: $(FUZZ_TARGETS:%=fuzz-run-%)
fuzz-run-%: $(FUZZ_BUILD)/bin/%
	@mkdir -p $(FUZZ_BUILD)/corpus/$* $(FUZZ_BUILD)/crashes $(FUZZ_BUILD)/logs
	@echo "fuzz $*: $(FUZZ_SECONDS) s"
	@if $(FUZZ_ENV) nice -n 10 ./$< -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/crashes/$*- \
		$(if $(wildcard tests/fuzz/$*.dict),-dict=tests/fuzz/$*.dict) \
		$(FUZZ_BUILD)/corpus/$* tests/fuzz/corpus/$* >$(FUZZ_BUILD)/logs/$*.log 2>&1; then \
		echo "fuzz $*: $$(grep -E '^#[0-9]+.*DONE' $(FUZZ_BUILD)/logs/$*.log | tail -1)"; \
	else \
		tail -n 60 $(FUZZ_BUILD)/logs/$*.log; echo "fuzz $*: FAILED (log: $(FUZZ_BUILD)/logs/$*.log)"; exit 1; \
	fi

# The OCI runtime-tools conformance programs (needs ../shared from the workspace).
conformance: all
	../shared/conformance/run.sh $(CURDIR)/$(BUILD)/forkbox

clean:
	rm -rf $(BUILD) build-asan

-include $(LIB_OBJS:.o=.d) $(CMD_OBJS:.o=.d) $(TEST_OBJS:.o=.d)
-include $(FUZZ_LIB_OBJS:.o=.d) $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/obj/tests/fuzz/%.d)
