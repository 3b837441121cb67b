#include "libforkbox/seccomp/cache.hpp"

#include <dirent.h>
#include <elf.h>
#include <link.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/hash.hpp"
#include "libforkbox/base/log.hpp"
#include "oci/default_seccomp.hpp"

#ifndef FORKBOX_VERSION
#define FORKBOX_VERSION "unknown"
#endif

namespace forkbox {

namespace {

constexpr std::string_view kFilePrefix = ".seccomp=";
constexpr char kMagic[8] = {'F', 'B', 'S', 'C', 'M', 'P', '0', '1'};
// Far above any real entry (key of a few KB + at most BPF_MAXINSNS * 8 bytes).
constexpr size_t kMaxEntrySize = 1 << 20;

struct EntryHeader {
    char magic[8];
    uint32_t key_size;
    uint32_t filter_flags;
    uint32_t instructions;
    uint32_t reserved;
};

// The forkbox binary's GNU build ID, read from its own program headers: no syscall.
std::string build_id() {
    std::string id;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* out) -> int {
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const ElfW(Phdr)& ph = info->dlpi_phdr[i];
                if (ph.p_type != PT_NOTE) continue;
                auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
                const unsigned char* end = p + ph.p_memsz;
                while (p + sizeof(ElfW(Nhdr)) <= end) {
                    ElfW(Nhdr) n;
                    std::memcpy(&n, p, sizeof n);
                    const unsigned char* name = p + sizeof n;
                    const unsigned char* desc = name + ((n.n_namesz + 3) & ~3u);
                    if (desc + n.n_descsz > end) break;
                    if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
                        static const char hex[] = "0123456789abcdef";
                        auto* s = static_cast<std::string*>(out);
                        for (size_t k = 0; k < n.n_descsz; ++k) {
                            *s += hex[desc[k] >> 4];
                            *s += hex[desc[k] & 0xf];
                        }
                        return 1;
                    }
                    p = desc + ((n.n_descsz + 3) & ~3u);
                }
            }
            return 1;  // the first object is the program itself
        },
        &id);
    return id;
}

std::optional<std::string> read_entry(int root_fd, const std::string& name) {
    unique_fd fd(::openat(root_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) return std::nullopt;
    struct stat st;
    // Only this user's own regular files: nobody else may hand us a filter.
    if (::fstat(fd.get(), &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
        st.st_size <= 0 || static_cast<size_t>(st.st_size) > kMaxEntrySize)
        return std::nullopt;
    std::string data(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < data.size()) {
        ssize_t n = ::read(fd.get(), data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return std::nullopt;
        done += static_cast<size_t>(n);
    }
    return data;
}

// Keeps the newest entries when there are more than the limit. Runs only after a miss, which
// has just paid for a compile, so a directory scan is cheap beside it.
void evict_old_entries(int root_fd) {
    int dupfd = ::dup(root_fd);
    if (dupfd < 0) return;
    DIR* d = ::fdopendir(dupfd);
    if (!d) {
        ::close(dupfd);
        return;
    }
    std::vector<std::pair<struct timespec, std::string>> entries;
    while (auto* e = ::readdir(d)) {
        std::string_view n = e->d_name;
        if (!n.starts_with(kFilePrefix) || n.ends_with(".tmp")) continue;
        struct stat st;
        if (::fstatat(root_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
            entries.emplace_back(st.st_mtim, std::string(n));
    }
    ::closedir(d);
    if (entries.size() <= kSeccompCacheEntries) return;
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
        if (a.first.tv_sec != b.first.tv_sec) return a.first.tv_sec < b.first.tv_sec;
        return a.first.tv_nsec < b.first.tv_nsec;
    });
    for (size_t i = 0; i + kSeccompCacheEntries < entries.size(); ++i)
        ::unlinkat(root_fd, entries[i].second.c_str(), 0);
}

// Best effort: a failure leaves no temporary file behind and is only logged.
void write_entry(int root_fd, const std::string& name, const std::string& data) {
    // Unique: two creates compiling the same profile must not write into one temporary file,
    // and one a crashed create left behind must not block the name.
    struct timespec now {};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    std::string tmp =
        name + "." + std::to_string(::getpid()) + "-" + std::to_string(now.tv_nsec) + ".tmp";
    unique_fd fd(::openat(root_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd) {
        log::debug("seccomp cache: create " + tmp + ": " + std::strerror(errno));
        return;
    }
    size_t done = 0;
    while (done < data.size()) {
        ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            log::debug("seccomp cache: write " + tmp + ": " + std::strerror(errno));
            ::unlinkat(root_fd, tmp.c_str(), 0);
            return;
        }
        done += static_cast<size_t>(n);
    }
    fd.reset();
    if (::renameat(root_fd, tmp.c_str(), root_fd, name.c_str()) < 0) {
        log::debug("seccomp cache: rename " + tmp + ": " + std::strerror(errno));
        ::unlinkat(root_fd, tmp.c_str(), 0);
        return;
    }
    evict_old_entries(root_fd);
}

}  // namespace

std::string seccomp_cache_key(std::string_view profile_json, std::string_view environment) {
    std::string key(environment);
    key += '\n';
    key += profile_json;
    return key;
}

std::string seccomp_cache_key(const oci::Seccomp& seccomp, std::string_view environment) {
    json::Writer w;
    oci::write_seccomp_json(w, seccomp);
    return seccomp_cache_key(w.str(), environment);
}

std::string seccomp_cache_file_name(std::string_view key) {
    static const char digits[] = "0123456789abcdef";
    uint64_t h = content_hash(key);  // names the file; a hit still compares the whole key
    std::string name(kFilePrefix);
    for (int shift = 60; shift >= 0; shift -= 4) name += digits[(h >> shift) & 0xf];
    return name;
}

std::string encode_seccomp_cache_entry(std::string_view key, const SeccompProgram& program) {
    EntryHeader h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.key_size = static_cast<uint32_t>(key.size());
    h.filter_flags = program.flags;
    h.instructions = static_cast<uint32_t>(program.bpf.size());
    std::string out(reinterpret_cast<const char*>(&h), sizeof h);
    out += key;
    out.append(reinterpret_cast<const char*>(program.bpf.data()),
               program.bpf.size() * sizeof(sock_filter));
    return out;
}

std::optional<SeccompProgram> decode_seccomp_cache_entry(std::string_view data, std::string_view key) {
    EntryHeader h;
    if (data.size() < sizeof h) return std::nullopt;
    std::memcpy(&h, data.data(), sizeof h);
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return std::nullopt;
    if (h.instructions == 0 || h.instructions > BPF_MAXINSNS) return std::nullopt;
    if (data.size() != sizeof h + h.key_size + size_t{h.instructions} * sizeof(sock_filter))
        return std::nullopt;
    if (data.substr(sizeof h, h.key_size) != key) return std::nullopt;
    SeccompProgram program;
    program.flags = h.filter_flags;
    program.bpf.resize(h.instructions);
    std::memcpy(program.bpf.data(), data.data() + sizeof h + h.key_size,
                program.bpf.size() * sizeof(sock_filter));
    return program;
}

std::string seccomp_cache_environment() {
    std::string env = "forkbox " FORKBOX_VERSION;
    // The binary itself: a rebuilt or upgraded forkbox may translate profiles differently.
    // Its build ID changes with every link (the commit is in main.o only); without one, the
    // file's identity.
    if (std::string id = build_id(); !id.empty()) {
        env += " build " + id;
    } else if (struct stat exe; ::stat("/proc/self/exe", &exe) == 0) {
        env += " exe " + std::to_string(exe.st_dev) + ":" + std::to_string(exe.st_ino) + ":" +
               std::to_string(exe.st_size) + ":" + std::to_string(exe.st_mtim.tv_sec) + "." +
               std::to_string(exe.st_mtim.tv_nsec);
    }
    if (const scmp_version* v = seccomp_version())
        env += "; libseccomp " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
               std::to_string(v->micro);
    struct utsname u;
    if (::uname(&u) == 0) env += std::string("; kernel ") + u.release + " " + u.machine;
    return env;
}

std::optional<SeccompProgram> find_cached_seccomp(std::string_view profile_json, const std::string& root) {
    unique_fd root_fd(::open(root.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
    if (!root_fd) return std::nullopt;
    std::string key = seccomp_cache_key(profile_json, seccomp_cache_environment());
    auto data = read_entry(root_fd.get(), seccomp_cache_file_name(key));
    if (!data) return std::nullopt;
    return decode_seccomp_cache_entry(*data, key);
}

Result<SeccompProgram> compile_seccomp_cached(const oci::Seccomp& seccomp, const std::string& root,
                                              std::string_view profile_json) {
    unique_fd root_fd(::open(root.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
    if (!root_fd) return compile_seccomp(seccomp);  // the first container makes the root

    std::string key = profile_json.empty() ? seccomp_cache_key(seccomp, seccomp_cache_environment())
                                           : seccomp_cache_key(profile_json, seccomp_cache_environment());
    std::string name = seccomp_cache_file_name(key);
    if (auto data = read_entry(root_fd.get(), name)) {
        if (auto program = decode_seccomp_cache_entry(*data, key)) return std::move(*program);
    }
    FB_ASSIGN(SeccompProgram program, compile_seccomp(seccomp));
    write_entry(root_fd.get(), name, encode_seccomp_cache_entry(key, program));
    return program;
}

}  // namespace forkbox
