#include "libforkbox/cgroup/device_filter.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

namespace forkbox {

namespace {

oci::DeviceRule allow(std::string type, std::optional<int64_t> major, std::optional<int64_t> minor,
                      std::string access) {
    return oci::DeviceRule{true, std::move(type), major, minor, std::move(access)};
}

// Registers of the program (see device_filter.hpp).
constexpr uint8_t R0 = 0, R1 = 1, R2 = 2, R3 = 3, R4 = 4, R5 = 5, R6 = 6;

bpf_insn insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
    bpf_insn i{};
    i.code = code;
    i.dst_reg = dst & 0xf;
    i.src_reg = src & 0xf;
    i.off = off;
    i.imm = imm;
    return i;
}
bpf_insn load_ctx_u32(uint8_t dst, int16_t off) { return insn(BPF_LDX | BPF_MEM | BPF_W, dst, R1, off, 0); }
bpf_insn mov32_reg(uint8_t dst, uint8_t src) { return insn(BPF_ALU | BPF_MOV | BPF_X, dst, src, 0, 0); }
bpf_insn and32_imm(uint8_t dst, int32_t imm) { return insn(BPF_ALU | BPF_AND | BPF_K, dst, 0, 0, imm); }
bpf_insn rsh32_imm(uint8_t dst, int32_t imm) { return insn(BPF_ALU | BPF_RSH | BPF_K, dst, 0, 0, imm); }
bpf_insn mov64_imm(uint8_t dst, int32_t imm) { return insn(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm); }
// 32-bit compares: ctx fields are u32, so a major above INT32_MAX still compares right.
bpf_insn jne32_imm(uint8_t dst, int32_t imm, int16_t off) { return insn(BPF_JMP32 | BPF_JNE | BPF_K, dst, 0, off, imm); }
bpf_insn jeq32_imm(uint8_t dst, int32_t imm, int16_t off) { return insn(BPF_JMP32 | BPF_JEQ | BPF_K, dst, 0, off, imm); }
bpf_insn exit_insn() { return insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0); }

// Marks a jump whose offset is "to the end of this block", patched once the block is
// complete.
constexpr int16_t kToNextBlock = std::numeric_limits<int16_t>::min();

// One exception, as v1 checks it: default deny returns 1 when the device matches and the
// exception has every bit asked for; default allow returns 0 when it has any of them.
std::vector<bpf_insn> exception_block(const DeviceException& ex, bool default_allow) {
    std::vector<bpf_insn> b;
    b.push_back(jne32_imm(R3, ex.type == 'b' ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR, kToNextBlock));
    if (ex.major >= 0) b.push_back(jne32_imm(R5, static_cast<int32_t>(static_cast<uint32_t>(ex.major)), kToNextBlock));
    if (ex.minor >= 0) b.push_back(jne32_imm(R6, static_cast<int32_t>(static_cast<uint32_t>(ex.minor)), kToNextBlock));
    b.push_back(mov32_reg(R0, R4));
    if (!default_allow) {
        // An allow exception: every bit asked for must be in it.
        b.push_back(and32_imm(R0, static_cast<int32_t>(~ex.access)));
        b.push_back(jne32_imm(R0, 0, kToNextBlock));
        b.push_back(mov64_imm(R0, 1));
    } else {
        // A deny exception: any bit asked for that it names denies.
        b.push_back(and32_imm(R0, static_cast<int32_t>(ex.access)));
        b.push_back(jeq32_imm(R0, 0, kToNextBlock));
        b.push_back(mov64_imm(R0, 0));
    }
    b.push_back(exit_insn());
    for (size_t i = 0; i < b.size(); ++i)
        if (b[i].off == kToNextBlock) b[i].off = static_cast<int16_t>(b.size() - i - 1);
    return b;
}

}  // namespace

// runc's list: /dev/console (c 5:1) is not in it, since a container's console is a pty
// (136:*); nor is tun (c 10:200), which runc 1.1 allowed and 1.2 dropped.
const std::vector<oci::DeviceRule>& default_device_rules() {
    static const std::vector<oci::DeviceRule> rules = {
        allow("c", std::nullopt, std::nullopt, "m"),  // mknod of any device
        allow("b", std::nullopt, std::nullopt, "m"),
        allow("c", 1, 3, "rwm"),                      // /dev/null
        allow("c", 1, 8, "rwm"),                      // /dev/random
        allow("c", 1, 7, "rwm"),                      // /dev/full
        allow("c", 5, 0, "rwm"),                      // /dev/tty
        allow("c", 1, 5, "rwm"),                      // /dev/zero
        allow("c", 1, 9, "rwm"),                      // /dev/urandom
        allow("c", 136, std::nullopt, "rwm"),         // /dev/pts/*
        allow("c", 5, 2, "rwm"),                      // /dev/ptmx
    };
    return rules;
}

std::vector<oci::DeviceRule> effective_device_rules(const std::vector<oci::DeviceRule>& rules) {
    std::vector<oci::DeviceRule> out = rules;
    const auto& defaults = default_device_rules();
    out.insert(out.end(), defaults.begin(), defaults.end());
    return out;
}

Result<DeviceCgroup> emulate_device_rules(const std::vector<oci::DeviceRule>& rules) {
    DeviceCgroup cg;  // after "devices.deny a": deny by default, no exception
    for (size_t i = 0; i < rules.size(); ++i) {
        const oci::DeviceRule& r = rules[i];
        std::string where = "linux.resources.devices: rule " + std::to_string(i);
        if (r.type.empty() || r.type == "a") {
            // The kernel reads nothing after the "a".
            cg.default_allow = r.allow;
            cg.exceptions.clear();
            continue;
        }
        if (r.type != "c" && r.type != "b")
            return fail(EINVAL, where + ": unknown device type \"" + r.type + "\"");
        DeviceException ex;
        ex.type = r.type[0];
        for (auto [value, out, name] : {std::tuple{r.major, &ex.major, "major"}, std::tuple{r.minor, &ex.minor, "minor"}}) {
            // Absent or negative (-1): any number, "*" in devices.allow.
            if (!value || *value < 0) continue;
            if (*value > std::numeric_limits<uint32_t>::max())
                return fail(EINVAL, where + ": " + name + " " + std::to_string(*value) + " is out of range");
            *out = *value;
        }
        for (char c : r.access.empty() ? std::string("rwm") : r.access) {
            if (c == 'r') ex.access |= BPF_DEVCG_ACC_READ;
            else if (c == 'w') ex.access |= BPF_DEVCG_ACC_WRITE;
            else if (c == 'm') ex.access |= BPF_DEVCG_ACC_MKNOD;
            else return fail(EINVAL, where + ": access \"" + r.access + "\" is not a combination of r, w and m");
        }
        auto same = std::find_if(cg.exceptions.begin(), cg.exceptions.end(), [&](const DeviceException& e) {
            return e.type == ex.type && e.major == ex.major && e.minor == ex.minor;
        });
        // An allow with default deny (a deny with default allow) adds an exception;
        // the other way round it trims the exception with the same numbers.
        if (r.allow != cg.default_allow) {
            if (same != cg.exceptions.end())
                same->access |= ex.access;
            else
                cg.exceptions.push_back(ex);
        } else if (same != cg.exceptions.end()) {
            same->access &= ~ex.access;
            if (same->access == 0) cg.exceptions.erase(same);
        }
    }
    return cg;
}

Result<std::vector<bpf_insn>> device_filter_program(const std::vector<oci::DeviceRule>& rules) {
    FB_ASSIGN(DeviceCgroup cg, emulate_device_rules(rules));
    std::vector<bpf_insn> prog = {
        load_ctx_u32(R2, offsetof(bpf_cgroup_dev_ctx, access_type)),
        mov32_reg(R3, R2),
        and32_imm(R3, 0xffff),
        mov32_reg(R4, R2),
        rsh32_imm(R4, 16),
        load_ctx_u32(R5, offsetof(bpf_cgroup_dev_ctx, major)),
        load_ctx_u32(R6, offsetof(bpf_cgroup_dev_ctx, minor)),
    };
    for (const auto& ex : cg.exceptions) {
        auto block = exception_block(ex, cg.default_allow);
        prog.insert(prog.end(), block.begin(), block.end());
    }
    prog.push_back(mov64_imm(R0, cg.default_allow ? 1 : 0));
    prog.push_back(exit_insn());
    return prog;
}

}  // namespace forkbox
