#include "libforkbox/cgroup/bpf.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace forkbox {

namespace {

long bpf(int cmd, bpf_attr& attr) { return ::syscall(SYS_bpf, cmd, &attr, sizeof attr); }

uint64_t ptr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// The verifier's log ends with its verdict; keep the end of it.
std::string log_tail(const std::vector<char>& log) {
    std::string text(log.data(), strnlen(log.data(), log.size()));
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (text.size() > 600) text = "..." + text.substr(text.size() - 600);
    for (auto& c : text)
        if (c == '\n') c = ';';
    return text;
}

}  // namespace

Result<unique_fd> bpf_prog_load(bpf_prog_type type, const std::vector<bpf_insn>& insns, const char* name) {
    // The licence only gates GPL-only helpers; the device program calls no helper.
    static const char license[] = "GPL";
    bpf_attr attr{};
    attr.prog_type = type;
    attr.insns = ptr(insns.data());
    attr.insn_cnt = static_cast<uint32_t>(insns.size());
    attr.license = ptr(license);
    std::strncpy(attr.prog_name, name, sizeof attr.prog_name - 1);
    long fd = bpf(BPF_PROG_LOAD, attr);
    if (fd >= 0) return unique_fd(static_cast<int>(fd));
    int err = errno;
    if (err != EINVAL && err != EACCES) return sys_error(err, "bpf: load program");
    // Load again with the verifier's log to say why.
    std::vector<char> log(64 * 1024);
    attr.log_level = 1;
    attr.log_buf = ptr(log.data());
    attr.log_size = static_cast<uint32_t>(log.size());
    fd = bpf(BPF_PROG_LOAD, attr);
    if (fd >= 0) return unique_fd(static_cast<int>(fd));
    return sys_error(err, "bpf: load program (verifier: " + log_tail(log) + ")");
}

Result<void> bpf_prog_attach(int cgroup_fd, int prog_fd, bpf_attach_type type, uint32_t flags) {
    bpf_attr attr{};
    attr.target_fd = static_cast<uint32_t>(cgroup_fd);
    attr.attach_bpf_fd = static_cast<uint32_t>(prog_fd);
    attr.attach_type = type;
    attr.attach_flags = flags;
    if (bpf(BPF_PROG_ATTACH, attr) < 0) return sys_error("bpf: attach program");
    return {};
}

Result<void> bpf_prog_detach(int cgroup_fd, int prog_fd, bpf_attach_type type) {
    bpf_attr attr{};
    attr.target_fd = static_cast<uint32_t>(cgroup_fd);
    attr.attach_bpf_fd = static_cast<uint32_t>(prog_fd);
    attr.attach_type = type;
    if (bpf(BPF_PROG_DETACH, attr) < 0) return sys_error("bpf: detach program");
    return {};
}

Result<std::vector<uint32_t>> bpf_prog_query(int cgroup_fd, bpf_attach_type type) {
    std::vector<uint32_t> ids(16);
    while (true) {
        bpf_attr attr{};
        attr.query.target_fd = static_cast<uint32_t>(cgroup_fd);
        attr.query.attach_type = type;
        attr.query.prog_ids = ptr(ids.data());
        attr.query.prog_cnt = static_cast<uint32_t>(ids.size());
        long r = bpf(BPF_PROG_QUERY, attr);
        // ENOSPC: more programs than room; prog_cnt says how many.
        if (r < 0 && errno == ENOSPC && attr.query.prog_cnt > ids.size()) {
            ids.resize(attr.query.prog_cnt);
            continue;
        }
        if (r < 0) return sys_error("bpf: query programs");
        ids.resize(std::min<size_t>(attr.query.prog_cnt, ids.size()));
        return ids;
    }
}

Result<unique_fd> bpf_prog_get_fd_by_id(uint32_t id) {
    bpf_attr attr{};
    attr.prog_id = id;
    long fd = bpf(BPF_PROG_GET_FD_BY_ID, attr);
    if (fd < 0) return sys_error("bpf: program " + std::to_string(id));
    return unique_fd(static_cast<int>(fd));
}

Result<bpf_prog_type> bpf_prog_type_of(int prog_fd) {
    bpf_prog_info info{};
    bpf_attr attr{};
    attr.info.bpf_fd = static_cast<uint32_t>(prog_fd);
    attr.info.info_len = sizeof info;
    attr.info.info = ptr(&info);
    if (bpf(BPF_OBJ_GET_INFO_BY_FD, attr) < 0) return sys_error("bpf: program info");
    return static_cast<bpf_prog_type>(info.type);
}

Result<void> replace_cgroup_device_program(const std::string& dir, const std::vector<bpf_insn>& insns) {
    FB_ASSIGN(unique_fd prog, bpf_prog_load(BPF_PROG_TYPE_CGROUP_DEVICE, insns, kDeviceProgramName));
    return replace_cgroup_device_program(dir, prog.get());
}

Result<void> replace_cgroup_device_program(const std::string& dir, int prog_fd) {
    unique_fd cgroup(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!cgroup) return sys_error("open cgroup " + dir);
    FB_ASSIGN(std::vector<uint32_t> old_ids, bpf_prog_query(cgroup.get(), BPF_CGROUP_DEVICE));
    FB_TRY_CTX(bpf_prog_attach(cgroup.get(), prog_fd, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI), dir);
    for (uint32_t id : old_ids) {
        auto old = bpf_prog_get_fd_by_id(id);
        // Gone already (detached by someone else in between): nothing to do.
        if (!old && old.error().errnum() == ENOENT) continue;
        if (!old) return std::unexpected(old.error().wrap(dir));
        auto r = bpf_prog_detach(cgroup.get(), old->get(), BPF_CGROUP_DEVICE);
        if (!r && r.error().errnum() != ENOENT) return std::unexpected(r.error().wrap(dir));
    }
    return {};
}

}  // namespace forkbox
