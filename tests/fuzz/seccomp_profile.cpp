// linux.seccomp through create's path: a profile that validates is compiled by libseccomp
// and made shorter by the compaction pass (seccomp/compact.hpp). Property, as
// tests/seccomp_compact_test.cpp checks it for hand-written profiles: the compacted program
// answers what libseccomp's exported program answers, for every syscall number of 0..1100
// and of the x32 range on each architecture (and one libseccomp does not know), and for
// every number the programs compare with, each under some of several argument vectors.
#include <fuzzer/FuzzedDataProvider.h>
#include <linux/audit.h>

#include <algorithm>
#include <array>
#include <set>

#include "libforkbox/seccomp/compact.hpp"
#include "libforkbox/seccomp/evaluate.hpp"
#include "libforkbox/seccomp/seccomp.hpp"
#include "oci/linux_names.hpp"
#include "oci/validate.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace forkbox;

namespace {

// The native arch's syscall names as libseccomp knows them, a few of other arches only,
// and names it does not know (skipped by plan_seccomp).
const std::vector<std::string>& syscall_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> out;
        for (int nr = 0; nr < 1024; ++nr) {
            char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
            if (name) out.emplace_back(name);
            std::free(name);
        }
        for (const char* n : {"socketcall", "ipc", "arm_fadvise64_64", "no_such_syscall", "s"}) out.emplace_back(n);
        return out;
    }();
    return names;
}

template <typename List>
std::string pick(FuzzedDataProvider& in, const List& list) {
    return std::string(list[in.ConsumeIntegralInRange<size_t>(0, list.size() - 1)]);
}

// Small numbers (flags, errnos, lengths) more often than any 64-bit value.
uint64_t value(FuzzedDataProvider& in) {
    switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0: return in.ConsumeIntegralInRange<uint64_t>(0, 16);
    case 1: return uint64_t{1} << in.ConsumeIntegralInRange(0, 63);
    case 2: return in.ConsumeIntegral<uint32_t>();
    default: return in.ConsumeIntegral<uint64_t>();
    }
}

oci::Seccomp make_profile(FuzzedDataProvider& in) {
    oci::Seccomp s;
    s.default_action = pick(in, oci::seccomp_action_names());
    if (in.ConsumeBool()) s.default_errno_ret = in.ConsumeIntegralInRange<uint32_t>(0, 4096);
    for (int n = in.ConsumeIntegralInRange(0, 3); n > 0; --n) s.architectures.push_back(pick(in, oci::seccomp_arch_names()));
    if (in.ConsumeIntegralInRange(0, 7) == 0) s.flags.push_back(pick(in, oci::seccomp_flag_names()));
    if (in.ConsumeIntegralInRange(0, 7) == 0) s.listener_path = "/run/agent.sock";
    for (int rules = in.ConsumeIntegralInRange(0, 24); rules > 0 && in.remaining_bytes() > 0; --rules) {
        oci::SeccompSyscall r;
        for (int n = in.ConsumeIntegralInRange(1, 12); n > 0; --n) r.names.push_back(pick(in, syscall_names()));
        r.action = pick(in, oci::seccomp_action_names());
        if (in.ConsumeIntegralInRange(0, 3) == 0) r.errno_ret = in.ConsumeIntegralInRange<uint32_t>(0, 4096);
        for (int n = in.ConsumeIntegralInRange(0, 7) < 5 ? 0 : in.ConsumeIntegralInRange(1, 3); n > 0; --n)
            r.args.push_back({in.ConsumeIntegralInRange<uint32_t>(0, 5), value(in), value(in),
                              pick(in, oci::seccomp_operator_names())});
        s.syscalls.push_back(std::move(r));
    }
    return s;
}

oci::Spec make_spec(oci::Seccomp profile) {
    oci::Spec spec;
    spec.oci_version = "1.3.0";
    spec.root = oci::Root{"rootfs", false};
    spec.process.emplace();
    spec.process->args = {"sh"};
    spec.process->cwd = "/";
    spec.linux.emplace();
    spec.linux->seccomp = std::move(profile);
    return spec;
}

// Where a comparison of either program can change its answer: k-1, k, k+1 of each constant.
std::vector<uint32_t> constants(const std::vector<sock_filter>& a, const std::vector<sock_filter>& b) {
    std::set<uint32_t> out;
    for (const auto* p : {&a, &b})
        for (const sock_filter& f : *p)
            if (BPF_CLASS(f.code) == BPF_JMP && BPF_OP(f.code) != BPF_JA)
                for (uint32_t k : {f.k - 1, f.k, f.k + 1}) out.insert(k);
    return {out.begin(), out.end()};
}

uint32_t evaluate(const std::vector<sock_filter>& program, uint32_t arch, uint32_t nr, const std::array<uint64_t, 7>& args) {
    seccomp_data d{};
    d.nr = static_cast<int>(nr);
    d.arch = arch;
    d.instruction_pointer = args[6];
    for (size_t i = 0; i < 6; ++i) d.args[i] = args[i];
    return seccomp_evaluate(program, d);
}

void expect_same(const std::vector<sock_filter>& exported, const std::vector<sock_filter>& compact,
                 const oci::Seccomp& profile) {
    std::vector<std::array<uint64_t, 7>> args = {{0, 0, 0, 0, 0, 0, 0},
                                                 {~0ULL, ~0ULL, ~0ULL, ~0ULL, ~0ULL, ~0ULL, ~0ULL},
                                                 {1ULL << 32 | 8, 0x1000, 0x10000000, 3, 4, 5, 0x7fff0000}};
    for (const auto& r : profile.syscalls)
        for (const auto& a : r.args) {
            std::array<uint64_t, 7> v{};
            for (uint64_t x : {a.value, a.value_two, a.value - 1, a.value + 1}) {
                v.fill(x);
                args.push_back(v);
            }
        }
    std::vector<uint32_t> numbers;
    for (uint32_t nr = 0; nr <= 1100; ++nr) numbers.push_back(nr);
    for (uint32_t nr = 0x40000000; nr <= 0x40000400; ++nr) numbers.push_back(nr);
    std::vector<uint32_t> extra = constants(exported, compact);
    for (uint32_t arch : {uint32_t{AUDIT_ARCH_X86_64}, uint32_t{AUDIT_ARCH_I386}, uint32_t{AUDIT_ARCH_AARCH64},
                          uint32_t{AUDIT_ARCH_ARM}, 0x12345678u}) {
        auto check = [&](uint32_t nr, const std::array<uint64_t, 7>& a) {
            uint32_t want = evaluate(exported, arch, nr, a), got = evaluate(compact, arch, nr, a);
            FUZZ_CHECK(want == got, "arch " + std::to_string(arch) + " nr " + std::to_string(nr) + ": libseccomp's " +
                                        std::to_string(want) + ", compact " + std::to_string(got));
        };
        // Each number with one argument vector, in turn, so an input stays cheap.
        for (uint32_t nr : numbers) check(nr, args[nr % args.size()]);
        for (size_t i = 0; i < extra.size(); ++i) {
            check(extra[i], args[i % args.size()]);
            check(extra[i], args[(i + 1) % args.size()]);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider in(data, size);
    oci::Spec spec = make_spec(make_profile(in));
    if (!oci::validate(spec)) return 0;
    const oci::Seccomp& profile = *spec.linux->seccomp;
    // A profile libseccomp loops on fails at the deadline: short here, so such an input
    // stays well inside the run's 10 s limit for a hang.
    constexpr int kDeadlineMs = 1000;
    auto exported = compile_seccomp(profile, SeccompLayout::Exported, kDeadlineMs);
    if (!exported) return 0;
    std::vector<sock_filter> compact = compact_seccomp_program(exported->bpf);
    FUZZ_CHECK(compact.size() <= exported->bpf.size(), "the compact program is longer");
    auto handed_on = compile_seccomp(profile, SeccompLayout::Compact, kDeadlineMs);
    FUZZ_CHECK(handed_on && handed_on->bpf.size() == compact.size(), "compile_seccomp hands on another program");
    expect_same(exported->bpf, compact, profile);
    return 0;
}
