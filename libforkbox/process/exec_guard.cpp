#include "libforkbox/process/exec_guard.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <vector>

#include "libforkbox/base/log.hpp"
#include "libforkbox/process/process.hpp"
#include "libforkbox/seccomp/evaluate.hpp"

// The stub's bytes, from exec_stub_blob.S (.incbin of build/exec-stub).
extern "C" const unsigned char forkbox_exec_stub_start[];
extern "C" const unsigned char forkbox_exec_stub_end[];

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U  // linux 6.3: executable even under vm.memfd_noexec=1
#endif

namespace forkbox {

namespace {
// exe_write_protected's answer: -1 not asked yet (a child of a parent that never asked
// treats that as no), 0 no, 1 yes.
int exe_protection = -1;

// The stub's behaviour on a failed exec of the program, for the direct path: the errno
// into error_fd, or init's message on stderr; exit 127.
[[noreturn]] void exec_failed(const std::string& exe, char* const argv[], int error_fd, int err) {
    if (error_fd >= 0) {
        while (::write(error_fd, &err, sizeof err) < 0 && errno == EINTR) {
        }
    } else {
        dprintf(2, "forkbox: exec: \"%s\": %s\n", argv[0] ? argv[0] : exe.c_str(), go_errno_text(err).c_str());
    }
    _exit(127);
}
}  // namespace

bool exe_write_protected() {
    if (exe_protection < 0) {
        struct statvfs st;
        exe_protection = ::statvfs("/proc/self/exe", &st) == 0 && (st.f_flag & ST_RDONLY) ? 1 : 0;
    }
    return exe_protection == 1;
}

std::span<const unsigned char> exec_stub_image() {
    return {forkbox_exec_stub_start, static_cast<size_t>(forkbox_exec_stub_end - forkbox_exec_stub_start)};
}

Result<unique_fd> make_exec_stub() {
    if (exe_write_protected()) {
        log::debug("exec guard: this forkbox binary is on a read-only mount: programs are exec'd without the stub");
        return unique_fd();
    }
    constexpr unsigned kFlags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
    unique_fd fd(::memfd_create("forkbox-exec", kFlags | MFD_EXEC));
    // Kernels before 6.3 do not know MFD_EXEC (and make every memfd executable).
    if (!fd && errno == EINVAL) fd.reset(::memfd_create("forkbox-exec", kFlags));
    if (!fd) return sys_error("exec stub: memfd_create");
    auto image = exec_stub_image();
    size_t done = 0;
    while (done < image.size()) {
        ssize_t w = ::write(fd.get(), image.data() + done, image.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return sys_error("exec stub: write memfd");
        done += static_cast<size_t>(w);
    }
    // After this, no write through any fd (ours, or a reopened /proc/PID/exe) changes it.
    // It stays executable although this fd was opened read-write: memfd_create's own
    // file does not count as a writer (i_writecount), so exec gives no ETXTBSY.
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0)
        return sys_error("exec stub: seal memfd");
    // Executable, not readable: a process exec'd from a file its user may not read is not
    // dumpable (the kernel's would_dump), so a container user can neither ptrace the stub
    // nor open its /proc files while it waits for `start`.
    if (::fchmod(fd.get(), 0111) < 0) return sys_error("exec stub: chmod memfd");
    return fd;
}

Result<void> exec_through_stub(int stub_fd, const std::string& exe, char* const argv[],
                               char* const envp[], const SeccompProgram* filter, int error_fd,
                               int start_fifo_fd) {
    bool waits_for_start = start_fifo_fd >= 0;
    if (waits_for_start && stub_fd < 0) return fail(EBADF, "exec: no exec stub to wait for start");
    if (stub_fd < 0) {
        // Never unguarded by mistake: only when the parent found the binary write-protected.
        if (exe_protection != 1) return fail(EBADF, "exec: no exec stub");
        ::execve(exe.c_str(), argv, envp);
        exec_failed(exe, argv, error_fd, errno);
    }
    // The stub must inherit the error fd; it marks it close-on-exec again for the program.
    if (error_fd >= 0 && ::fcntl(error_fd, F_SETFD, 0) < 0) return sys_error("exec: error fd");
    char fd_arg[16] = "-";
    if (error_fd >= 0) std::snprintf(fd_arg, sizeof fd_arg, "%d", error_fd);
    // The stub's argv: name, error fd, path to exec, then the program's own argv.
    // argv[0] names the stub's mode (exec_stub.c).
    std::string name = waits_for_start ? "forkbox-start:" + std::to_string(start_fifo_fd) : "forkbox-exec";
    std::vector<char*> stub_argv{name.data(), fd_arg, const_cast<char*>(exe.c_str())};
    for (char* const* a = argv; *a; ++a) stub_argv.push_back(*a);
    stub_argv.push_back(nullptr);

    static char empty[] = "";
    std::array<uint64_t, 5> args{static_cast<uint64_t>(stub_fd), reinterpret_cast<uint64_t>(empty),
                                 reinterpret_cast<uint64_t>(stub_argv.data()),
                                 reinterpret_cast<uint64_t>(envp), AT_EMPTY_PATH};
    // A filter could KILL or TRAP instead of failing with an errno: ask it first.
    if (!filter || seccomp_allows(filter->bpf, native_seccomp_data(SYS_execveat, args)))
        ::syscall(SYS_execveat, stub_fd, empty, stub_argv.data(), envp, AT_EMPTY_PATH);
    // Here: a filter refused execveat (ours, or one forkbox runs under), a kernel before
    // 3.19, or a failure the retry will meet again (E2BIG, ENOMEM) and report. Plain execve
    // of the same file through procfs (an ELF runs from a close-on-exec fd this way too:
    // the kernel opens it before closing those).
    char path[32];
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", stub_fd);
    ::execve(path, stub_argv.data(), envp);
    if (waits_for_start || (errno != ENOENT && errno != ENOTDIR)) return sys_error("exec through " + std::string(path));
    // No procfs at /proc: neither "#!/proc/self/exe" nor /proc/PID/exe can reach this
    // binary, so the program may be exec'd directly.
    if (error_fd >= 0) ::fcntl(error_fd, F_SETFD, FD_CLOEXEC);
    ::execve(exe.c_str(), argv, envp);
    return sys_error("exec " + exe);
}

}  // namespace forkbox
