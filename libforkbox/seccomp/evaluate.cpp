#include "libforkbox/seccomp/evaluate.hpp"

#include <linux/audit.h>

#include <cstddef>
#include <cstring>

namespace forkbox {

namespace {

#if defined(__x86_64__)
constexpr uint32_t kNativeAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kNativeAuditArch = AUDIT_ARCH_AARCH64;
#else
#error "seccomp_bpf: unknown native architecture"
#endif

constexpr uint32_t kRefused = SECCOMP_RET_KILL_PROCESS;

// Classic BPF ALU with the kernel's rules: division by zero ends the program (the kernel
// refuses a constant zero divisor at load time and returns 0 for a runtime one).
bool alu(uint16_t op, uint32_t& a, uint32_t operand) {
    switch (op) {
    case BPF_ADD: a += operand; return true;
    case BPF_SUB: a -= operand; return true;
    case BPF_MUL: a *= operand; return true;
    case BPF_DIV:
        if (operand == 0) return false;
        a /= operand;
        return true;
    case BPF_MOD:
        if (operand == 0) return false;
        a %= operand;
        return true;
    case BPF_OR: a |= operand; return true;
    case BPF_AND: a &= operand; return true;
    case BPF_XOR: a ^= operand; return true;
    case BPF_LSH: a = operand >= 32 ? 0 : a << operand; return true;
    case BPF_RSH: a = operand >= 32 ? 0 : a >> operand; return true;
    case BPF_NEG: a = 0u - a; return true;
    default: return false;
    }
}

struct Evaluation {
    uint32_t action = kRefused;
    bool read_beyond_nr = false;  // the path loaded the instruction pointer or an argument
};

Evaluation evaluate(std::span<const sock_filter> program, const seccomp_data& data) {
    Evaluation e;
    unsigned char raw[sizeof(seccomp_data)];
    std::memcpy(raw, &data, sizeof raw);
    uint32_t a = 0, x = 0;
    uint32_t mem[BPF_MEMWORDS] = {};
    for (size_t pc = 0; pc < program.size(); ++pc) {
        const sock_filter& f = program[pc];
        uint32_t operand = BPF_SRC(f.code) == BPF_X ? x : f.k;
        switch (BPF_CLASS(f.code)) {
        case BPF_LD:
        case BPF_LDX: {
            uint32_t v = 0;
            switch (BPF_MODE(f.code)) {
            case BPF_ABS:
                // seccomp only allows aligned 32-bit loads inside seccomp_data. (Not f.k + 4 >
                // sizeof raw: that sum wraps for f.k = 0xfffffffc.)
                if (BPF_CLASS(f.code) != BPF_LD || BPF_SIZE(f.code) != BPF_W || f.k % 4 != 0 ||
                    f.k > sizeof raw - 4)
                    return e;
                e.read_beyond_nr |= f.k >= offsetof(seccomp_data, instruction_pointer);
                std::memcpy(&v, raw + f.k, 4);
                break;
            case BPF_LEN: v = sizeof raw; break;
            case BPF_IMM: v = f.k; break;
            case BPF_MEM:
                if (f.k >= BPF_MEMWORDS) return e;
                v = mem[f.k];
                break;
            default: return e;
            }
            (BPF_CLASS(f.code) == BPF_LD ? a : x) = v;
            break;
        }
        case BPF_ST:
        case BPF_STX:
            if (f.k >= BPF_MEMWORDS) return e;
            mem[f.k] = BPF_CLASS(f.code) == BPF_ST ? a : x;
            break;
        case BPF_ALU:
            if (!alu(BPF_OP(f.code), a, operand)) return e;
            break;
        case BPF_JMP: {
            size_t skip;
            if (BPF_OP(f.code) == BPF_JA) {
                skip = f.k;
            } else {
                bool taken;
                switch (BPF_OP(f.code)) {
                case BPF_JEQ: taken = a == operand; break;
                case BPF_JGT: taken = a > operand; break;
                case BPF_JGE: taken = a >= operand; break;
                case BPF_JSET: taken = (a & operand) != 0; break;
                default: return e;
                }
                skip = taken ? f.jt : f.jf;
            }
            if (skip >= program.size() - pc - 1) return e;  // must land on an insn
            pc += skip;
            break;
        }
        case BPF_RET:
            e.action = BPF_RVAL(f.code) == BPF_A ? a : f.k;
            return e;
        case BPF_MISC:
            if (BPF_MISCOP(f.code) == BPF_TAX) x = a;
            else if (BPF_MISCOP(f.code) == BPF_TXA) a = x;
            else return e;
            break;
        default: return e;
        }
    }
    return e;  // fell off the end: the kernel would not have loaded it
}

}  // namespace

uint32_t seccomp_evaluate(std::span<const sock_filter> program, const seccomp_data& data) {
    return evaluate(program, data).action;
}

bool seccomp_allows(std::span<const sock_filter> program, const seccomp_data& data) {
    uint32_t action = seccomp_evaluate(program, data) & SECCOMP_RET_ACTION_FULL;
    return action == SECCOMP_RET_ALLOW || action == SECCOMP_RET_LOG;
}

bool seccomp_allows_any_arguments(std::span<const sock_filter> program, int nr) {
    Evaluation e = evaluate(program, native_seccomp_data(nr, {}));
    return !e.read_beyond_nr && (e.action & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ALLOW;
}

seccomp_data native_seccomp_data(int nr, std::span<const uint64_t> args) {
    seccomp_data d{};
    d.nr = nr;
    d.arch = kNativeAuditArch;
    for (size_t i = 0; i < args.size() && i < 6; ++i) d.args[i] = args[i];
    return d;
}

}  // namespace forkbox
