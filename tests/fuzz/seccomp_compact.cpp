// The compaction pass (seccomp/compact.hpp) and the BPF interpreter it is checked with
// (seccomp/evaluate.hpp) on any classic BPF program: the input is an array of sock_filter.
// Properties: neither reads outside the program or seccomp_data (ASan), and a program the
// pass rewrote answers as the original for every syscall number and architecture the
// programs compare with (k-1, k, k+1 of each constant, a sample of them for long programs)
// under several argument vectors.
#include <linux/audit.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "libforkbox/seccomp/compact.hpp"
#include "libforkbox/seccomp/evaluate.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace forkbox;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // Long programs are the profile target's (libseccomp's own); here they only slow the search.
    std::vector<sock_filter> program(size / sizeof(sock_filter));
    if (program.empty() || program.size() > 256) return 0;
    std::memcpy(program.data(), data, program.size() * sizeof(sock_filter));
    std::vector<sock_filter> compact = compact_seccomp_program(program);
    FUZZ_CHECK(!compact.empty() && compact.size() <= program.size(), "compact length " + std::to_string(compact.size()));

    std::set<uint32_t> values = {0, 1, AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64, 0x40000000, ~0u};
    for (const auto* p : {&program, &compact})
        for (const sock_filter& f : *p)
            for (uint32_t k : {f.k - 1, f.k, f.k + 1}) values.insert(k);
    // Every n-th of them: probes^2 * 3 runs of both programs, about 200k instructions each.
    size_t most = std::clamp<size_t>(static_cast<size_t>(std::sqrt(200000.0 / (3.0 * static_cast<double>(program.size())))), 8, 64);
    std::vector<uint32_t> probes;
    size_t stride = (values.size() + most - 1) / most, i = 0;
    for (uint32_t v : values)
        if (i++ % stride == 0) probes.push_back(v);
    const std::array<uint64_t, 3> args = {0, ~0ULL, 0x0000123400005678ULL};
    for (uint32_t nr : probes) (void)seccomp_allows_any_arguments(program, static_cast<int>(nr));
    for (uint32_t arch : probes) {
        for (uint32_t nr : probes) {
            for (uint64_t a : args) {
                seccomp_data d{};
                d.nr = static_cast<int>(nr);
                d.arch = arch;
                d.instruction_pointer = a;
                for (auto& x : d.args) x = a;
                uint32_t want = seccomp_evaluate(program, d), got = seccomp_evaluate(compact, d);
                FUZZ_CHECK(want == got, "arch " + std::to_string(arch) + " nr " + std::to_string(nr) + ": original " +
                                            std::to_string(want) + ", compact " + std::to_string(got));
            }
        }
    }
    return 0;
}
