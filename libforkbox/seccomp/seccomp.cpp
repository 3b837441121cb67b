#include "libforkbox/seccomp/seccomp.hpp"

#include <linux/seccomp.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <string_view>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/seccomp/compact.hpp"

namespace forkbox {

namespace {

// Syscalls take at most six arguments.
constexpr unsigned kMaxSyscallArgs = 6;

std::string quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

// The kernel passes 16 bits of SECCOMP_RET_DATA back as the errno.
Result<uint32_t> errno_data(std::optional<uint32_t> errno_ret) {
    uint32_t e = errno_ret.value_or(EPERM);
    if (e > 0xffff) return fail(EINVAL, "errnoRet " + std::to_string(e) + " does not fit in 16 bits");
    return e;
}

Result<uint32_t> action_value(const std::string& name, std::optional<uint32_t> errno_ret) {
    if (name == "SCMP_ACT_ALLOW") return SCMP_ACT_ALLOW;
    if (name == "SCMP_ACT_KILL" || name == "SCMP_ACT_KILL_THREAD") return SCMP_ACT_KILL_THREAD;
    if (name == "SCMP_ACT_KILL_PROCESS") return SCMP_ACT_KILL_PROCESS;
    if (name == "SCMP_ACT_TRAP") return SCMP_ACT_TRAP;
    if (name == "SCMP_ACT_LOG") return SCMP_ACT_LOG;
    if (name == "SCMP_ACT_ERRNO") {
        FB_ASSIGN(uint32_t e, errno_data(errno_ret));
        return SCMP_ACT_ERRNO(e);
    }
    if (name == "SCMP_ACT_TRACE") {
        FB_ASSIGN(uint32_t e, errno_data(errno_ret));
        return SCMP_ACT_TRACE(e);
    }
    if (name == "SCMP_ACT_NOTIFY") return SCMP_ACT_NOTIFY;
    return fail(EINVAL, "unknown action " + quote(name));
}

Result<scmp_compare> compare_op(const std::string& name) {
    if (name == "SCMP_CMP_NE") return SCMP_CMP_NE;
    if (name == "SCMP_CMP_LT") return SCMP_CMP_LT;
    if (name == "SCMP_CMP_LE") return SCMP_CMP_LE;
    if (name == "SCMP_CMP_EQ") return SCMP_CMP_EQ;
    if (name == "SCMP_CMP_GE") return SCMP_CMP_GE;
    if (name == "SCMP_CMP_GT") return SCMP_CMP_GT;
    if (name == "SCMP_CMP_MASKED_EQ") return SCMP_CMP_MASKED_EQ;
    return fail(EINVAL, "unknown operator " + quote(name));
}

struct ArchName {
    std::string_view spec_name;
    uint32_t token;
};

// The architectures this libseccomp knows. Newer ones are compiled in when the header has
// them; the rest of the spec's names are skipped, as runc does with what its library lacks.
const std::vector<ArchName>& known_arches() {
    static const std::vector<ArchName> arches = {
        {"SCMP_ARCH_X86", SCMP_ARCH_X86},
        {"SCMP_ARCH_X86_64", SCMP_ARCH_X86_64},
        {"SCMP_ARCH_X32", SCMP_ARCH_X32},
        {"SCMP_ARCH_ARM", SCMP_ARCH_ARM},
        {"SCMP_ARCH_AARCH64", SCMP_ARCH_AARCH64},
        {"SCMP_ARCH_MIPS", SCMP_ARCH_MIPS},
        {"SCMP_ARCH_MIPS64", SCMP_ARCH_MIPS64},
        {"SCMP_ARCH_MIPS64N32", SCMP_ARCH_MIPS64N32},
        {"SCMP_ARCH_MIPSEL", SCMP_ARCH_MIPSEL},
        {"SCMP_ARCH_MIPSEL64", SCMP_ARCH_MIPSEL64},
        {"SCMP_ARCH_MIPSEL64N32", SCMP_ARCH_MIPSEL64N32},
        {"SCMP_ARCH_PPC", SCMP_ARCH_PPC},
        {"SCMP_ARCH_PPC64", SCMP_ARCH_PPC64},
        {"SCMP_ARCH_PPC64LE", SCMP_ARCH_PPC64LE},
        {"SCMP_ARCH_S390", SCMP_ARCH_S390},
        {"SCMP_ARCH_S390X", SCMP_ARCH_S390X},
        {"SCMP_ARCH_PARISC", SCMP_ARCH_PARISC},
        {"SCMP_ARCH_PARISC64", SCMP_ARCH_PARISC64},
        {"SCMP_ARCH_RISCV64", SCMP_ARCH_RISCV64},
#ifdef SCMP_ARCH_LOONGARCH64
        {"SCMP_ARCH_LOONGARCH64", SCMP_ARCH_LOONGARCH64},
#endif
#ifdef SCMP_ARCH_M68K
        {"SCMP_ARCH_M68K", SCMP_ARCH_M68K},
#endif
#ifdef SCMP_ARCH_SH
        {"SCMP_ARCH_SH", SCMP_ARCH_SH},
#endif
#ifdef SCMP_ARCH_SHEB
        {"SCMP_ARCH_SHEB", SCMP_ARCH_SHEB},
#endif
    };
    return arches;
}

struct FlagName {
    std::string_view spec_name;
    scmp_filter_attr attribute;
    unsigned bit;           // SECCOMP_FILTER_FLAG_*
    unsigned libseccomp_api;  // the seccomp_api_get() level that brings the attribute
};

const std::array<FlagName, 3> kFlags = {{
    {"SECCOMP_FILTER_FLAG_TSYNC", SCMP_FLTATR_CTL_TSYNC, SECCOMP_FILTER_FLAG_TSYNC, 2},
    {"SECCOMP_FILTER_FLAG_LOG", SCMP_FLTATR_CTL_LOG, SECCOMP_FILTER_FLAG_LOG, 3},
    {"SECCOMP_FILTER_FLAG_SPEC_ALLOW", SCMP_FLTATR_CTL_SSB, SECCOMP_FILTER_FLAG_SPEC_ALLOW, 4},
}};

Result<const FlagName*> filter_flag(const std::string& name) {
    for (const auto& f : kFlags)
        if (f.spec_name == name) return &f;
    return fail(EINVAL, "unknown flag " + quote(name));
}

// The rules of one spec entry, for one resolved syscall.
void add_rules(std::vector<SeccompRule>& out, const std::string& name, int nr, uint32_t action,
               const std::vector<scmp_arg_cmp>& conditions, bool split) {
    if (!split) {
        out.push_back(SeccompRule{name, nr, action, conditions});
        return;
    }
    // libseccomp ANDs the conditions of one rule, and "arg0 == 1 && arg0 == 2" can never
    // match: runc reads repeated indexes as alternatives, one rule per condition.
    for (const auto& c : conditions) out.push_back(SeccompRule{name, nr, action, {c}});
}

}  // namespace

Result<SeccompPlan> plan_seccomp(const oci::Seccomp& sc) {
    SeccompPlan plan;
    auto default_action = action_value(sc.default_action, sc.default_errno_ret);
    if (!default_action) return std::unexpected(default_action.error().wrap("defaultAction"));
    plan.default_action = *default_action;

    for (const auto& a : sc.architectures) {
        for (const auto& known : known_arches()) {
            if (known.spec_name == a) {
                plan.arches.push_back(known.token);
                break;
            }
        }
    }

    for (const auto& f : sc.flags) {
        // The kernel has it (6.0) but libseccomp only from 2.6 (SCMP_FLTATR_CTL_WAITKILL): we
        // call seccomp(2) ourselves, so the bit goes there without libseccomp's check.
        if (f == "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV") {
            plan.filter_flags |= kWaitKillableRecv;
            continue;
        }
        auto flag = filter_flag(f);
        if (!flag) return std::unexpected(flag.error().wrap("flags"));
        plan.attributes.push_back((*flag)->attribute);
        plan.filter_flags |= (*flag)->bit;
    }

    for (size_t i = 0; i < sc.syscalls.size(); ++i) {
        const oci::SeccompSyscall& sys = sc.syscalls[i];
        const std::string where = "syscalls[" + std::to_string(i) + "]";
        auto action = action_value(sys.action, sys.errno_ret);
        if (!action) return std::unexpected(action.error().wrap(where));

        std::vector<scmp_arg_cmp> conditions;
        std::array<unsigned, kMaxSyscallArgs> uses{};
        bool repeated_index = false;
        for (size_t j = 0; j < sys.args.size(); ++j) {
            const oci::SeccompArg& arg = sys.args[j];
            const std::string arg_where = where + ".args[" + std::to_string(j) + "]";
            if (arg.index >= kMaxSyscallArgs)
                return fail(EINVAL, arg_where + ": index must be less than 6, got " +
                                        std::to_string(arg.index));
            auto op = compare_op(arg.op);
            if (!op) return std::unexpected(op.error().wrap(arg_where));
            // MASKED_EQ compares (arg & value) with valueTwo; libseccomp takes the mask first.
            uint64_t datum_b = *op == SCMP_CMP_MASKED_EQ ? arg.value_two : 0;
            conditions.push_back(scmp_arg_cmp{arg.index, *op, arg.value, datum_b});
            repeated_index |= ++uses[arg.index] > 1;
        }

        // libseccomp refuses a rule that only repeats the default action (EACCES).
        if (*action == plan.default_action) continue;
        for (const auto& name : sys.names) {
            int nr = seccomp_syscall_resolve_name(name.c_str());
            // A name this libseccomp does not know is a syscall of another kernel: skip it.
            if (nr == __NR_SCMP_ERROR) continue;
            add_rules(plan.rules, name, nr, *action, conditions, repeated_index);
        }
    }
    return plan;
}

namespace {

// Owns a libseccomp filter context.
class FilterContext {
public:
    explicit FilterContext(uint32_t default_action) : ctx_(seccomp_init(default_action)) {}
    FilterContext(const FilterContext&) = delete;
    FilterContext& operator=(const FilterContext&) = delete;
    ~FilterContext() {
        if (ctx_) seccomp_release(ctx_);
    }
    scmp_filter_ctx get() const { return ctx_; }

private:
    scmp_filter_ctx ctx_;
};

// libseccomp returns a negated errno.
std::unexpected<Error> lib_error(int rc, std::string context) {
    return sys_error(-rc, std::move(context));
}

std::string arch_label(uint32_t token) {
    for (const auto& a : known_arches())
        if (a.token == token) return std::string(a.spec_name);
    return std::to_string(token);
}

std::string flag_label(scmp_filter_attr attr) {
    for (const auto& f : kFlags)
        if (f.attribute == attr) return std::string(f.spec_name);
    return std::to_string(attr);
}

std::string condition_label(const std::vector<scmp_arg_cmp>& conditions) {
    if (conditions.empty()) return "";
    std::string s = " (args";
    for (const auto& c : conditions) s += " " + std::to_string(c.arg);
    return s + ")";
}

// The filter as the kernel will run it: libseccomp 2.5 exports only to a file descriptor.
Result<std::vector<sock_filter>> export_bpf(scmp_filter_ctx ctx) {
    unique_fd fd(::memfd_create("forkbox-seccomp", MFD_CLOEXEC));
    if (!fd) return sys_error("memfd_create");
    if (int rc = seccomp_export_bpf(ctx, fd.get()); rc < 0) return lib_error(rc, "export BPF");
    struct stat st;
    if (::fstat(fd.get(), &st) < 0) return sys_error("stat exported BPF");
    size_t size = static_cast<size_t>(st.st_size);
    if (size == 0 || size % sizeof(sock_filter) != 0)
        return fail(EINVAL, "exported BPF has a size of " + std::to_string(size) +
                                " bytes, not a whole number of instructions");
    std::vector<sock_filter> bpf(size / sizeof(sock_filter));
    auto* out = reinterpret_cast<char*>(bpf.data());
    size_t done = 0;
    while (done < size) {
        ssize_t n = ::pread(fd.get(), out + done, size - done, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return sys_error("read exported BPF");
        if (n == 0) return fail(EIO, "read exported BPF: short read");
        done += static_cast<size_t>(n);
    }
    return bpf;
}

Result<SeccompProgram> compile_here(const oci::Seccomp& sc, SeccompLayout layout) {
    FB_ASSIGN(SeccompPlan plan, plan_seccomp(sc));

    FilterContext filter(plan.default_action);
    // NULL when the kernel lacks the action (SCMP_ACT_LOG, SCMP_ACT_KILL_PROCESS before 4.14).
    if (!filter.get())
        return fail(EINVAL, "defaultAction " + quote(sc.default_action) +
                                " is not supported by this kernel or libseccomp");
    scmp_filter_ctx ctx = filter.get();

    // Failures as the kernel or libseccomp saw them, not a generic ECANCELED.
    (void)seccomp_attr_set(ctx, SCMP_FLTATR_API_SYSRAWRC, 1);
    // forkbox sets no_new_privs itself, only when process.noNewPrivileges asks for it.
    if (int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0); rc < 0)
        return lib_error(rc, "clear no_new_privs attribute");
    // These only make libseccomp check that the kernel knows each flag: the program is
    // exported, and load_seccomp passes the flags to seccomp(2) itself.
    for (auto attr : plan.attributes)
        if (int rc = seccomp_attr_set(ctx, attr, 1); rc < 0)
            return lib_error(rc, "flag " + flag_label(attr));

    // A binary search over syscall numbers instead of a linear chain: the kernel runs the
    // filter once per syscall number when it loads it (to build its allow cache), so a
    // 350-rule profile loads several times faster, and every syscall costs log(n) jumps.
    (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);

    for (uint32_t arch : plan.arches) {
        int rc = seccomp_arch_add(ctx, arch);
        // The native arch is in every new context.
        if (rc < 0 && rc != -EEXIST) return lib_error(rc, "add architecture " + arch_label(arch));
    }

    for (const auto& rule : plan.rules) {
        // Not the _exact variant: libseccomp rewrites rules for arches that multiplex
        // syscalls (socketcall, ipc on x86) and skips those an arch does not have.
        int rc = seccomp_rule_add_array(ctx, rule.action, rule.syscall,
                                        static_cast<unsigned>(rule.conditions.size()),
                                        rule.conditions.empty() ? nullptr : rule.conditions.data());
        if (rc < 0)
            return lib_error(rc, "add rule for syscall " + rule.name +
                                     condition_label(rule.conditions));
    }

    SeccompProgram program;
    FB_ASSIGN(program.bpf, export_bpf(ctx));
    if (layout == SeccompLayout::Compact) program.bpf = compact_seccomp_program(program.bpf);
    // The kernel rejects longer programs with a bare EINVAL at load time, in the child.
    if (program.bpf.size() > BPF_MAXINSNS)
        return fail(E2BIG, "filter has " + std::to_string(program.bpf.size()) +
                               " BPF instructions, more than the kernel's " +
                               std::to_string(BPF_MAXINSNS));
    program.flags = plan.filter_flags;
    // Notify rules need the listener fd seccomp(2) hands back with this flag.
    for (const auto& rule : plan.rules)
        if (rule.action == SCMP_ACT_NOTIFY) program.flags |= SECCOMP_FILTER_FLAG_NEW_LISTENER;
    if ((program.flags & kWaitKillableRecv) && !program.wants_listener())
        return fail(EINVAL, "flag SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV needs an SCMP_ACT_NOTIFY rule");
    return program;
}

bool has_ordering_comparison(const oci::Seccomp& sc) {
    for (const auto& rule : sc.syscalls)
        for (const auto& arg : rule.args)
            if (arg.op == "SCMP_CMP_LT" || arg.op == "SCMP_CMP_LE" || arg.op == "SCMP_CMP_GT" || arg.op == "SCMP_CMP_GE")
                return true;
    return false;
}

// compile_here in a child, given `deadline_ms` to answer (a pipe: 'P' flags bpf, or 'E'
// errno message), killed past it.
Result<SeccompProgram> compile_in_child(const oci::Seccomp& sc, SeccompLayout layout, int deadline_ms) {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) < 0) return sys_error("pipe for the seccomp compiler");
    unique_fd reader(ends[0]), writer(ends[1]);
    pid_t parent = ::getpid();
    pid_t child = ::fork();
    if (child < 0) return sys_error("fork the seccomp compiler");
    if (child == 0) {
        // A create killed meanwhile must not leave it spinning in libseccomp.
        if (::prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || ::getppid() != parent) ::_exit(1);
        reader.reset();
        std::string out;
        if (auto program = compile_here(sc, layout)) {
            out = "P" + std::string(reinterpret_cast<const char*>(&program->flags), sizeof program->flags);
            out.append(reinterpret_cast<const char*>(program->bpf.data()), program->bpf.size() * sizeof(sock_filter));
        } else {
            int err = program.error().errnum();
            out = "E" + std::string(reinterpret_cast<const char*>(&err), sizeof err) + program.error().what();
        }
        for (size_t done = 0; done < out.size();) {
            ssize_t n = ::write(writer.get(), out.data() + done, out.size() - done);
            if (n <= 0 && errno != EINTR) ::_exit(1);
            if (n > 0) done += static_cast<size_t>(n);
        }
        ::_exit(0);
    }
    writer.reset();
    std::string in;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms);
    bool timed_out = false;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
        pollfd p{reader.get(), POLLIN, 0};
        int ready = left > 0 ? ::poll(&p, 1, static_cast<int>(left)) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) {
            timed_out = true;
            break;
        }
        char buf[65536];
        ssize_t n = ::read(reader.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
    }
    if (timed_out) ::kill(child, SIGKILL);
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out)
        return fail(ETIMEDOUT, "libseccomp did not compile the profile within " + std::to_string(deadline_ms / 1000) +
                                   " s: libseccomp 2.5 can loop forever on range comparisons (SCMP_CMP_LT/LE/GT/GE) "
                                   "of the same syscall's arguments in several rules");
    if (in.size() > sizeof(int) && in[0] == 'E') {
        int err;
        std::memcpy(&err, in.data() + 1, sizeof err);
        return fail(err, in.substr(1 + sizeof err));
    }
    size_t header = 1 + sizeof(unsigned);
    if (in.size() < header || in[0] != 'P' || (in.size() - header) % sizeof(sock_filter) != 0)
        return fail(EPROTO, "the seccomp compiler ended without a program");
    SeccompProgram program;
    std::memcpy(&program.flags, in.data() + 1, sizeof program.flags);
    program.bpf.resize((in.size() - header) / sizeof(sock_filter));
    std::memcpy(program.bpf.data(), in.data() + header, in.size() - header);
    return program;
}

}  // namespace

Result<SeccompProgram> compile_seccomp(const oci::Seccomp& sc, SeccompLayout layout, int deadline_ms) {
    // Only profiles with range comparisons can make libseccomp loop: the rest, Docker's
    // default among them, are compiled here, without a fork.
    if (!has_ordering_comparison(sc)) return compile_here(sc, layout);
    return compile_in_child(sc, layout, deadline_ms);
}

Result<unique_fd> load_seccomp(const SeccompProgram& program) {
    sock_fprog prog{};
    prog.len = static_cast<unsigned short>(program.bpf.size());
    prog.filter = const_cast<sock_filter*>(program.bpf.data());
    long rc = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, program.flags, &prog);
    if (rc < 0) return sys_error("load seccomp filter");
    if (program.wants_listener()) return unique_fd(static_cast<int>(rc));
    // With TSYNC, a positive result is a thread that could not take the filter.
    if (rc > 0)
        return fail(ESRCH, "load seccomp filter: thread " + std::to_string(rc) +
                               " could not be synchronized");
    return unique_fd();
}

std::vector<std::string_view> seccomp_supported_actions() {
    return {"SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_TRAP",
            "SCMP_ACT_ERRNO", "SCMP_ACT_TRACE", "SCMP_ACT_ALLOW", "SCMP_ACT_LOG", "SCMP_ACT_NOTIFY"};
}

std::vector<std::string_view> seccomp_supported_arches() {
    std::vector<std::string_view> out;
    for (const auto& a : known_arches()) out.push_back(a.spec_name);
    return out;
}

std::vector<std::string_view> seccomp_supported_flags() {
    std::vector<std::string_view> out;
    unsigned api = seccomp_api_get();
    for (const auto& f : kFlags) {
        if (api < f.libseccomp_api) continue;
        // runc's probe: a NULL program fails with EFAULT once the kernel has accepted the
        // flags, and with EINVAL before that for a flag it does not know. Nothing is loaded.
        long rc = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, f.bit, nullptr);
        if (rc < 0 && errno == EFAULT) out.push_back(f.spec_name);
    }
    long rc = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                        SECCOMP_FILTER_FLAG_NEW_LISTENER | kWaitKillableRecv, nullptr);
    if (rc < 0 && errno == EFAULT) out.push_back("SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV");
    return out;
}

}  // namespace forkbox
