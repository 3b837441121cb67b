#include "libforkbox/sandbox/warm.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <vector>

#include "libforkbox/base/elf.hpp"
#include "libforkbox/base/fd.hpp"

namespace forkbox::sandbox {

namespace {

constexpr size_t kMaxLibraries = 16;

bool look_up(const std::string& path) {
    unique_fd fd(::open(path.c_str(), O_PATH | O_CLOEXEC));
    return fd.valid();
}

std::string directory_of(const std::string& path) {
    size_t slash = path.rfind('/');
    return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

// Where the loader may find a library: beside the interpreter (as named, then as it really
// is), the multiarch directories named after the latter (Debian: /lib/x86_64-linux-gnu),
// then the generic ones. The loader's cache decides in truth; a wrong guess costs a lookup.
std::vector<std::string> library_directories(const std::string& interpreter) {
    std::vector<std::string> dirs{directory_of(interpreter)};
    char real[PATH_MAX];
    if (::realpath(interpreter.c_str(), real)) {
        std::string real_dir = directory_of(real);
        std::string arch = real_dir.substr(real_dir.rfind('/') + 1);
        if (arch.find('-') != std::string::npos) {
            dirs.push_back("/lib/" + arch);
            dirs.push_back("/usr/lib/" + arch);
        }
        dirs.push_back(real_dir);
    }
    for (const char* d : {"/lib64", "/usr/lib64", "/lib", "/usr/lib"}) dirs.emplace_back(d);
    std::vector<std::string> unique;
    for (auto& d : dirs)
        if (std::find(unique.begin(), unique.end(), d) == unique.end()) unique.push_back(std::move(d));
    return unique;
}

}  // namespace

void warm_program_lookups(const std::string& program) {
    struct stat st{};
    if (::stat(program.c_str(), &st) < 0 || !S_ISREG(st.st_mode)) return;  // nothing else to open: a FIFO would block
    unique_fd fd(::open(program.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd) return;
    auto linkage = elf_linkage(fd.get());
    if (!linkage || linkage->interpreter.empty() || linkage->interpreter[0] != '/') return;
    look_up(linkage->interpreter);
    look_up("/etc/ld.so.preload");  // glibc's loader checks it first; mostly absent
    look_up("/etc/ld.so.cache");
    auto dirs = library_directories(linkage->interpreter);
    size_t n = 0;
    for (const auto& name : linkage->needed) {
        if (n++ == kMaxLibraries) break;
        if (name.empty() || name.find('/') != std::string::npos) continue;
        for (const auto& d : dirs)
            if (look_up(d + "/" + name)) break;
    }
}

}  // namespace forkbox::sandbox
