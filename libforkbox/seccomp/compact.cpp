#include "libforkbox/seccomp/compact.hpp"

#include <linux/seccomp.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "libforkbox/seccomp/evaluate.hpp"

// Why the rewrite keeps the program's meaning:
//  * The program never touches X or scratch memory, so its whole state is (pc, A).
//  * From the start up to the first load of the instruction pointer or an argument (a
//    divergence point), it only loads nr or arch, compares A with constants (JEQ/JGT/JGE)
//    and jumps or returns a constant. Along that prefix the path is a function of (arch, nr)
//    that only changes where a comparison's answer does: at k and k+1 for JEQ k, k+1 for
//    JGT k, k for JGE k.
//  * So evaluating one value per interval between those breakpoints gives the prefix's
//    outcome for every (arch, nr): a constant RET, or reaching divergence point D (where A is
//    about to be overwritten, so nothing else carries over).
//  * The new program decides the same outcome by a search whose breakpoints are among the
//    original's (JGE at an interval's start, JEQ on a one-value interval) and then runs the
//    original instructions reachable from each D, unchanged except for jump offsets.
// The result is checked before it is used: the new prefix's breakpoints must be among the
// original's and its outcome must match on every interval (which covers every value), and
// both programs must return the same for each interval with several argument vectors.

namespace forkbox {

namespace {

using Program = std::span<const sock_filter>;

constexpr uint32_t kNrOffset = offsetof(seccomp_data, nr);
constexpr uint32_t kArchOffset = offsetof(seccomp_data, arch);
// A load at or past this offset (instruction pointer, arguments) is a divergence point.
constexpr uint32_t kDivergentOffset = offsetof(seccomp_data, instruction_pointer);
constexpr size_t kMaxConditionalJump = 255;  // jt and jf are 8 bits

// An outcome or a search target: a constant RET value, or (with kJump) a label.
constexpr uint64_t kJump = 1ULL << 32;
// Labels: a divergence point's pc in the original, or kBlockLabel | the index of a search
// over syscall numbers.
constexpr uint32_t kBlockLabel = 1U << 31;

bool is_load(const sock_filter& f) { return f.code == (BPF_LD | BPF_W | BPF_ABS); }

bool is_compare(const sock_filter& f) {
    return f.code == (BPF_JMP | BPF_JEQ | BPF_K) || f.code == (BPF_JMP | BPF_JGT | BPF_K) ||
           f.code == (BPF_JMP | BPF_JGE | BPF_K);
}

// State in X or scratch memory would cross a divergence point, and the new head does not
// recreate it.
bool uses_x_or_scratch(const sock_filter& f) {
    switch (BPF_CLASS(f.code)) {
    case BPF_ST:
    case BPF_STX:
    case BPF_LDX:
    case BPF_MISC: return true;
    case BPF_LD: return BPF_MODE(f.code) == BPF_MEM;
    case BPF_ALU: return BPF_SRC(f.code) == BPF_X;
    case BPF_JMP: return BPF_OP(f.code) != BPF_JA && BPF_SRC(f.code) == BPF_X;
    case BPF_RET: return BPF_RVAL(f.code) == BPF_X;
    default: return false;
    }
}

sock_filter statement(uint16_t code, uint32_t k) { return sock_filter{code, 0, 0, k}; }

sock_filter jump_if_at_least(uint32_t k, size_t jt, size_t jf) {  // jt, jf <= 255
    return sock_filter{BPF_JMP | BPF_JGE | BPF_K, static_cast<uint8_t>(jt),
                       static_cast<uint8_t>(jf), k};
}

// Where the comparisons on the way to a divergence point can change their answer, for nr
// and for arch; nullopt when that prefix does anything else (arithmetic, JSET, another load).
struct Breakpoints {
    std::vector<uint32_t> nr, arch;
};

// Where A == k, A > k or A >= k changes its answer as A grows.
void add_breakpoints(std::vector<uint32_t>& to, const sock_filter& f) {
    if (BPF_OP(f.code) != BPF_JGT) to.push_back(f.k);
    if (BPF_OP(f.code) != BPF_JGE && f.k != UINT32_MAX) to.push_back(f.k + 1);
}

std::optional<Breakpoints> prefix_breakpoints(Program program) {
    if (program.empty()) return std::nullopt;
    enum : uint8_t { kInitialZero = 1, kNr = 2, kArch = 4 };
    std::vector<uint8_t> holds(program.size());  // what A may hold on entry; 0: unreached
    holds[0] = kInitialZero;
    auto flow = [&](size_t pc, size_t offset, uint8_t value) {
        size_t to = pc + 1 + offset;
        if (to >= program.size()) return false;
        holds[to] |= value;
        return true;
    };
    Breakpoints breakpoints;
    // Jumps only go forward: one pass in order sees every way into an instruction first.
    for (size_t pc = 0; pc < program.size(); ++pc) {
        uint8_t a = holds[pc];
        if (a == 0) continue;
        const sock_filter& f = program[pc];
        if (is_load(f)) {
            if (f.k >= kDivergentOffset) continue;
            if (f.k != kNrOffset && f.k != kArchOffset) return std::nullopt;
            if (!flow(pc, 0, f.k == kNrOffset ? kNr : kArch)) return std::nullopt;
        } else if (f.code == (BPF_JMP | BPF_JA)) {
            if (!flow(pc, f.k, a)) return std::nullopt;
        } else if (is_compare(f)) {
            if (a & kNr) add_breakpoints(breakpoints.nr, f);
            if (a & kArch) add_breakpoints(breakpoints.arch, f);
            if (!flow(pc, f.jt, a) || !flow(pc, f.jf, a)) return std::nullopt;
        } else if (f.code != (BPF_RET | BPF_K)) {
            return std::nullopt;
        }
    }
    return breakpoints;
}

// The first value of each interval between breakpoints.
std::vector<uint32_t> interval_starts(std::vector<uint32_t> starts) {
    starts.push_back(0);
    std::sort(starts.begin(), starts.end());
    starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
    return starts;
}

// The prefix's outcome for (arch, nr): a constant RET value, or kJump | the divergence pc.
// Only follows paths prefix_breakpoints accepted.
uint64_t prefix_outcome(Program program, uint32_t arch, uint32_t nr) {
    uint32_t a = 0;
    size_t pc = 0;
    for (;;) {
        const sock_filter& f = program[pc];
        if (is_load(f)) {
            if (f.k >= kDivergentOffset) return kJump | pc;
            a = f.k == kNrOffset ? nr : arch;
            ++pc;
        } else if (BPF_CLASS(f.code) == BPF_RET) {
            return f.k;
        } else if (BPF_OP(f.code) == BPF_JA) {
            pc += 1 + size_t{f.k};
        } else {
            bool taken = BPF_OP(f.code) == BPF_JEQ   ? a == f.k
                         : BPF_OP(f.code) == BPF_JGT ? a > f.k
                                                     : a >= f.k;
            pc += 1 + size_t{taken ? f.jt : f.jf};
        }
    }
}

// Values from `first` up to the next run's first lead to `target`, except the single
// values in `exceptions`.
struct Run {
    uint32_t first;
    uint64_t target;
    std::vector<std::pair<uint32_t, uint64_t>> exceptions;
    bool operator==(const Run&) const = default;
};

// A lone value between two runs with one target costs two range bounds; as an exception
// of the merged run it costs one JEQ. Capped so no path gets long.
constexpr size_t kMaxExceptions = 4;

std::vector<Run> merge_single_values(const std::vector<Run>& runs) {
    std::vector<Run> merged;
    for (size_t i = 0; i < runs.size(); ++i) {
        bool single = i + 1 < runs.size() && runs[i + 1].first == runs[i].first + 1;
        if (single && !merged.empty() && merged.back().target == runs[i + 1].target &&
            merged.back().exceptions.size() < kMaxExceptions) {
            merged.back().exceptions.emplace_back(runs[i].first, runs[i].target);
            ++i;  // runs[i + 1] goes on as merged.back()
        } else {
            merged.push_back(runs[i]);
        }
    }
    return merged;
}

// Instructions whose far jumps (JA with a 32-bit offset) still name labels.
struct Code {
    std::vector<sock_filter> insns;
    std::vector<std::pair<size_t, uint32_t>> far_jumps;  // index of a JA, its label

    void append(const Code& other) {
        for (auto [index, label] : other.far_jumps) far_jumps.emplace_back(insns.size() + index, label);
        insns.insert(insns.end(), other.insns.begin(), other.insns.end());
    }
    void emit_target(uint64_t target) {
        if (target & kJump) {
            far_jumps.emplace_back(insns.size(), static_cast<uint32_t>(target));
            insns.push_back(statement(BPF_JMP | BPF_JA, 0));
        } else {
            insns.push_back(statement(BPF_RET | BPF_K, static_cast<uint32_t>(target)));
        }
    }
};

std::vector<uint64_t> distinct_targets(std::span<const Run> runs) {
    std::vector<uint64_t> targets;
    auto add = [&](uint64_t t) {
        if (std::find(targets.begin(), targets.end(), t) == targets.end()) targets.push_back(t);
    };
    for (const Run& run : runs) {
        add(run.target);
        for (const auto& exception : run.exceptions) add(exception.second);
    }
    return targets;
}

// The length of search_small(runs): comparisons, exception JEQs, one leaf per target.
size_t small_search_length(std::span<const Run> runs) {
    size_t n = runs.size() - 1 + distinct_targets(runs).size();
    for (const Run& run : runs) n += run.exceptions.size();
    return n;
}

// A balanced search over runs of A's value whose code is short enough for 8-bit jumps to
// reach its end, where each distinct target is one leaf instruction (a RET or a far JA).
Code search_small(std::span<const Run> runs) {
    std::vector<uint64_t> leaves = distinct_targets(runs);
    struct Ref {
        bool leaf;
        size_t index;
    };
    auto leaf = [&](uint64_t target) {
        return Ref{true, size_t(std::find(leaves.begin(), leaves.end(), target) - leaves.begin())};
    };
    struct Branch {
        uint16_t code;
        uint32_t k;
        Ref jt, jf;
    };
    std::vector<Branch> branches;  // in preorder, so every jump goes forward
    auto build = [&](auto& self, size_t lo, size_t hi) -> Ref {
        if (hi - lo == 1) {
            const Run& run = runs[lo];
            if (run.exceptions.empty()) return leaf(run.target);
            Ref first{false, branches.size()};
            for (size_t i = 0; i < run.exceptions.size(); ++i) {
                bool last = i + 1 == run.exceptions.size();
                branches.push_back({BPF_JMP | BPF_JEQ | BPF_K, run.exceptions[i].first,
                                    leaf(run.exceptions[i].second),
                                    last ? leaf(run.target) : Ref{false, branches.size() + 1}});
            }
            return first;
        }
        size_t mid = lo + (hi - lo) / 2;
        size_t node = branches.size();
        branches.push_back({BPF_JMP | BPF_JGE | BPF_K, runs[mid].first, {}, {}});
        Ref below = self(self, lo, mid);
        Ref at_or_above = self(self, mid, hi);
        branches[node].jf = below;
        branches[node].jt = at_or_above;
        return Ref{false, node};
    };
    build(build, 0, runs.size());
    auto position = [&](Ref ref) { return ref.leaf ? branches.size() + ref.index : ref.index; };
    Code code;
    for (size_t i = 0; i < branches.size(); ++i) {
        const Branch& b = branches[i];
        code.insns.push_back(sock_filter{b.code, static_cast<uint8_t>(position(b.jt) - i - 1),
                                         static_cast<uint8_t>(position(b.jf) - i - 1), b.k});
    }
    for (uint64_t target : leaves) code.emit_target(target);
    return code;
}

// A search over any number of runs of A's value: halves with their own leaves, joined by a
// comparison that reaches past a long left half through a JA.
Code search(std::span<const Run> runs) {
    // Every jump then lands at most length - 2 ahead.
    if (runs.size() == 1 || small_search_length(runs) <= kMaxConditionalJump + 1) return search_small(runs);
    size_t mid = runs.size() / 2;
    Code left = search(runs.first(mid));
    Code right = search(runs.subspan(mid));
    Code code;
    if (left.insns.size() <= kMaxConditionalJump) {
        code.insns.push_back(jump_if_at_least(runs[mid].first, left.insns.size(), 0));
    } else {
        code.insns.push_back(jump_if_at_least(runs[mid].first, 0, 1));
        code.insns.push_back(statement(BPF_JMP | BPF_JA, static_cast<uint32_t>(left.insns.size())));
    }
    code.append(left);
    code.append(right);
    return code;
}

// Marks the original's instructions reachable from those already marked; false when one jumps or
// falls outside the program.
bool mark_reachable(Program program, std::vector<bool>& kept) {
    for (size_t pc = 0; pc < program.size(); ++pc) {
        if (!kept[pc]) continue;
        const sock_filter& f = program[pc];
        std::array<size_t, 2> next{pc + 1, pc + 1};
        if (BPF_CLASS(f.code) == BPF_RET) continue;
        if (f.code == (BPF_JMP | BPF_JA)) next = {pc + 1 + size_t{f.k}, pc + 1 + size_t{f.k}};
        else if (BPF_CLASS(f.code) == BPF_JMP) next = {pc + 1 + f.jt, pc + 1 + f.jf};
        for (size_t to : next) {
            if (to >= program.size()) return false;
            kept[to] = true;
        }
    }
    return true;
}

// Argument vectors (and instruction pointers) for the check where a path reads them.
const std::array<seccomp_data, 4>& probe_arguments() {
    static const std::array<seccomp_data, 4> probes = [] {
        std::array<seccomp_data, 4> p{};
        for (int i = 0; i < 6; ++i) {
            p[1].args[i] = ~0ULL;
            p[2].args[i] = (uint64_t{0x1000u << i} << 32) | (1u << (i * 4));
            p[3].args[i] = static_cast<uint64_t>(i + 1);
        }
        p[1].instruction_pointer = ~0ULL;
        p[2].instruction_pointer = 0x7fff12345678ULL;
        p[3].instruction_pointer = 0x1000;
        return p;
    }();
    return probes;
}

// Both programs run to the end, as a second check independent of the prefix analysis.
bool same_results(Program original, Program compact, uint32_t arch, uint32_t nr, bool reads_arguments) {
    for (seccomp_data d : probe_arguments()) {
        d.arch = arch;
        d.nr = static_cast<int>(nr);
        if (seccomp_evaluate(original, d) != seccomp_evaluate(compact, d)) return false;
        if (!reads_arguments) break;
    }
    return true;
}

}  // namespace

std::vector<sock_filter> compact_seccomp_program(Program program) {
    std::vector<sock_filter> unchanged(program.begin(), program.end());
    if (program.size() >= kBlockLabel || std::any_of(program.begin(), program.end(), uses_x_or_scratch))
        return unchanged;
    std::optional<Breakpoints> breakpoints = prefix_breakpoints(program);
    if (!breakpoints) return unchanged;
    std::vector<uint32_t> arch_starts = interval_starts(std::move(breakpoints->arch));
    std::vector<uint32_t> nr_starts = interval_starts(std::move(breakpoints->nr));

    // Per arch interval: the runs of syscall numbers with one outcome, and a search over them.
    std::vector<uint64_t> outcomes;  // [arch interval][nr interval]
    outcomes.reserve(arch_starts.size() * nr_starts.size());
    std::vector<bool> kept(program.size());  // divergence points, then all they reach
    std::vector<std::vector<Run>> nr_searches;
    std::vector<Run> arch_runs;
    for (uint32_t arch : arch_starts) {
        std::vector<Run> runs;
        for (uint32_t nr : nr_starts) {
            uint64_t outcome = prefix_outcome(program, arch, nr);
            outcomes.push_back(outcome);
            if (outcome & kJump) kept[static_cast<uint32_t>(outcome)] = true;
            if (runs.empty() || runs.back().target != outcome) runs.push_back({nr, outcome, {}});
        }
        uint64_t target = runs[0].target;
        if (runs.size() > 1) {
            auto it = std::find(nr_searches.begin(), nr_searches.end(), runs);
            if (it == nr_searches.end()) it = nr_searches.insert(it, std::move(runs));
            target = kJump | kBlockLabel | static_cast<uint32_t>(it - nr_searches.begin());
        }
        if (arch_runs.empty() || arch_runs.back().target != target) arch_runs.push_back({arch, target, {}});
    }

    Code head;
    if (arch_runs.size() > 1) {
        head.insns.push_back(statement(BPF_LD | BPF_W | BPF_ABS, kArchOffset));
        head.append(search(merge_single_values(arch_runs)));
    } else if (nr_searches.empty()) {
        head.emit_target(arch_runs[0].target);
    }  // else the one search over numbers comes first
    std::vector<size_t> search_start;
    for (const auto& runs : nr_searches) {
        search_start.push_back(head.insns.size());
        head.insns.push_back(statement(BPF_LD | BPF_W | BPF_ABS, kNrOffset));
        head.append(search(merge_single_values(runs)));
    }

    if (!mark_reachable(program, kept)) return unchanged;
    std::vector<size_t> new_pc(program.size());
    size_t length = head.insns.size();
    for (size_t pc = 0; pc < program.size(); ++pc)
        if (kept[pc]) new_pc[pc] = length++;
    if (length >= program.size()) return unchanged;

    std::vector<sock_filter> compact = std::move(head.insns);
    compact.reserve(length);
    for (size_t pc = 0; pc < program.size(); ++pc) {
        if (!kept[pc]) continue;
        sock_filter f = program[pc];
        // Dropping instructions only shortens forward jumps: they still fit.
        auto offset = [&](size_t skip) { return new_pc[pc + 1 + skip] - new_pc[pc] - 1; };
        if (f.code == (BPF_JMP | BPF_JA)) {
            f.k = static_cast<uint32_t>(offset(f.k));
        } else if (BPF_CLASS(f.code) == BPF_JMP) {
            f.jt = static_cast<uint8_t>(offset(f.jt));
            f.jf = static_cast<uint8_t>(offset(f.jf));
        }
        compact.push_back(f);
    }
    for (auto [index, label] : head.far_jumps) {
        size_t to = label & kBlockLabel ? search_start[label & ~kBlockLabel] : new_pc[label];
        compact[index].k = static_cast<uint32_t>(to - index - 1);
    }
    // The kernel refuses a program that does not end in a RET.
    if (BPF_CLASS(compact.back().code) != BPF_RET) return unchanged;

    // The check. Every breakpoint of the new prefix is one of the original's, so on each of
    // the original's intervals both prefixes are constant: one value per interval covers all.
    std::optional<Breakpoints> compact_breakpoints = prefix_breakpoints(compact);
    if (!compact_breakpoints) return unchanged;
    auto among = [](const std::vector<uint32_t>& points, const std::vector<uint32_t>& starts) {
        return std::all_of(points.begin(), points.end(),
                           [&](uint32_t p) { return std::binary_search(starts.begin(), starts.end(), p); });
    };
    if (!among(compact_breakpoints->arch, arch_starts) || !among(compact_breakpoints->nr, nr_starts))
        return unchanged;
    for (size_t a = 0; a < arch_starts.size(); ++a) {
        for (size_t n = 0; n < nr_starts.size(); ++n) {
            uint64_t want = outcomes[a * nr_starts.size() + n];
            bool reads_arguments = (want & kJump) != 0;
            if (reads_arguments) want = kJump | new_pc[static_cast<uint32_t>(want)];
            if (prefix_outcome(compact, arch_starts[a], nr_starts[n]) != want ||
                !same_results(program, compact, arch_starts[a], nr_starts[n], reads_arguments))
                return unchanged;
        }
    }
    return compact;
}

}  // namespace forkbox
