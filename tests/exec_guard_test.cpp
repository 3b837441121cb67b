// exec_guard: the embedded stub image, the sealed memfd, and exec through the stub in a
// forked child (no root needed).
#include "libforkbox/process/exec_guard.hpp"

#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "libforkbox/seccomp/seccomp.hpp"

using namespace forkbox;

namespace {

#if defined(__x86_64__)
constexpr int kNativeMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr int kNativeMachine = EM_AARCH64;
#endif

struct Ran {
    int status = -1;  // exit code, or 128 + signal
    std::string out, err;
};

std::string read_all(int fd) {
    std::string s;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
    return s;
}

std::string read_all_of(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "";
    std::string s = read_all(fd);
    ::close(fd);
    return s;
}

// Forks; the child runs `body` with stdout and stderr on pipes and must exec or _exit.
template <typename F>
Ran run_child(F body) {
    int out[2], err[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
        body();
        _exit(99);
    }
    ::close(out[1]);
    ::close(err[1]);
    Ran r;
    r.out = read_all(out[0]);
    r.err = read_all(err[0]);
    ::close(out[0]);
    ::close(err[0]);
    int st = 0;
    ::waitpid(pid, &st, 0);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return r;
}

// Runs argv through the stub in a child; `before` runs in the child first.
template <typename F>
Ran exec_child(int stub, std::vector<std::string> args, F before, int error_fd = -1,
               const SeccompProgram* filter = nullptr) {
    return run_child([&] {
        before();
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        char* envp[] = {const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
        auto r = exec_through_stub(stub, args[0], argv.data(), envp, filter, error_fd);
        dprintf(2, "returned: %s\n", r.error().what().c_str());
        _exit(98);
    });
}
Ran exec_child(int stub, std::vector<std::string> args) {
    return exec_child(stub, std::move(args), [] {});
}

class TempDir {
public:
    TempDir() {
        char tmpl[] = "/tmp/fb-exec-guard-XXXXXX";
        path_ = ::mkdtemp(tmpl);
    }
    ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
    const std::string& path() const { return path_; }
    std::string file(const std::string& name, const std::string& text, mode_t mode) const {
        std::string p = path_ + "/" + name;
        int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        EXPECT_GE(fd, 0);
        EXPECT_EQ(::write(fd, text.data(), text.size()), ssize_t(text.size()));
        ::close(fd);
        return p;
    }

private:
    std::string path_;
};

}  // namespace

// ---- the embedded image ----

TEST(ExecStubImage, IsAStaticElfExecutableOfTheHostArch) {
    auto img = exec_stub_image();
    ASSERT_GE(img.size(), sizeof(Elf64_Ehdr));
    EXPECT_LE(img.size(), 16u * 1024) << "the stub should stay a few KB";
    Elf64_Ehdr eh;
    std::memcpy(&eh, img.data(), sizeof eh);
    EXPECT_EQ(std::memcmp(eh.e_ident, ELFMAG, SELFMAG), 0);
    EXPECT_EQ(eh.e_ident[EI_CLASS], ELFCLASS64);
    EXPECT_EQ(eh.e_ident[EI_DATA], ELFDATA2LSB);
    EXPECT_EQ(eh.e_type, ET_EXEC);
    EXPECT_EQ(eh.e_machine, kNativeMachine);
    ASSERT_EQ(eh.e_phentsize, sizeof(Elf64_Phdr));
    ASSERT_LE(eh.e_phoff + eh.e_phnum * sizeof(Elf64_Phdr), img.size());
    bool entry_in_code = false;
    for (int i = 0; i < eh.e_phnum; ++i) {
        Elf64_Phdr ph;
        std::memcpy(&ph, img.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
        EXPECT_NE(ph.p_type, unsigned(PT_INTERP)) << "the stub must not need a loader";
        if (ph.p_type == PT_GNU_STACK) {
            EXPECT_EQ(ph.p_flags & PF_X, 0u) << "executable stack";
        }
        if (ph.p_type != PT_LOAD) continue;
        EXPECT_FALSE((ph.p_flags & PF_W) && (ph.p_flags & PF_X)) << "writable code segment";
        EXPECT_LE(ph.p_offset + ph.p_filesz, img.size());
        if ((ph.p_flags & PF_X) && eh.e_entry >= ph.p_vaddr && eh.e_entry < ph.p_vaddr + ph.p_filesz)
            entry_in_code = true;
    }
    EXPECT_TRUE(entry_in_code);
}

// ---- the memfd ----

TEST(MakeExecStub, IsASealedCloseOnExecCopyOfTheImage) {
    auto stub = make_exec_stub();
    ASSERT_TRUE(stub.has_value()) << stub.error().what();
    int fd = stub->get();
    EXPECT_EQ(::fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    EXPECT_LT(::pwrite(fd, "x", 1, 0), 0);
    EXPECT_EQ(errno, EPERM);
    int seals = ::fcntl(fd, F_GET_SEALS);
    for (int s : {F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE}) EXPECT_TRUE(seals & s) << s;
    auto img = exec_stub_image();
    std::string content(img.size() + 1, '\0');
    EXPECT_EQ(::pread(fd, content.data(), content.size(), 0), ssize_t(img.size()));
    EXPECT_EQ(std::memcmp(content.data(), img.data(), img.size()), 0);
    // Reopened for writing (what /proc/PID/exe would give), it still cannot change.
    std::string path = "/proc/self/fd/" + std::to_string(fd);
    int w = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (w >= 0) {
        EXPECT_LT(::write(w, "x", 1), 0);
        EXPECT_EQ(errno, EPERM);
        ::close(w);
    }
    struct stat st;
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_EQ(st.st_size, off_t(img.size()));
    // Executable, not readable: who may not read it gets a non-dumpable process from it.
    EXPECT_EQ(st.st_mode & 07777, 0111u);
}

// ---- exec through the stub ----

TEST(ExecThroughStub, RunsTheProgramWithItsArgvAndExitCode) {
    auto stub = make_exec_stub();
    ASSERT_TRUE(stub.has_value());
    Ran r = exec_child(stub->get(), {"/bin/sh", "-c", "echo \"$0\" \"$PATH\"; exit 7", "zero"});
    EXPECT_EQ(r.status, 7) << r.err;
    EXPECT_EQ(r.out, "zero /usr/bin:/bin\n");
}

TEST(ExecThroughStub, TheStubIsGoneOnceTheProgramRuns) {
    auto stub = make_exec_stub();
    ASSERT_TRUE(stub.has_value());
    Ran r = exec_child(stub->get(), {"/bin/sh", "-c", "readlink /proc/$$/exe; ls /proc/$$/fd"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("sh"), std::string::npos) << r.out;
    // Only the pipes on 1 and 2, and whatever ls opens: the stub's memfd is not inherited.
    EXPECT_EQ(r.out.find("memfd"), std::string::npos) << r.out;
}

TEST(ExecThroughStub, ProcSelfExeScriptRunsTheStubNotThisBinary) {
    TempDir dir;
    std::string script = dir.file("evil", "#!/proc/self/exe\n", 0755);
    auto stub = make_exec_stub();
    ASSERT_TRUE(stub.has_value());
    Ran r = exec_child(stub->get(), {script});
    EXPECT_EQ(r.status, 127);
    EXPECT_EQ(r.err, "forkbox-exec: not to be run directly\n");
}

TEST(ExecThroughStub, FailedExecIsReportedOnStderrInInitsWording) {
    TempDir dir;
    std::string junk = dir.file("junk", "not a program", 0755);
    auto stub = make_exec_stub();
    ASSERT_TRUE(stub.has_value());
    Ran r = exec_child(stub->get(), {junk, "arg"});
    EXPECT_EQ(r.status, 127);
    EXPECT_EQ(r.err, "forkbox: exec: \"" + junk + "\": exec format error\n");
    r = exec_child(stub->get(), {dir.file("private", "#!/bin/sh\n", 0600)});
    EXPECT_EQ(r.status, 127);
    EXPECT_NE(r.err.find("\": permission denied\n"), std::string::npos) << r.err;
}

TEST(ExecThroughStub, ErrorFdGetsTheErrnoOrEofOnSuccess) {
    auto stub = make_exec_stub();
    ASSERT_TRUE(stub.has_value());
    for (bool succeed : {false, true}) {
        int p[2];
        ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
        Ran r = exec_child(
            stub->get(), {succeed ? "/bin/true" : "/nonexistent/program"}, [&] { ::close(p[0]); }, p[1]);
        ::close(p[1]);
        std::string got = read_all(p[0]);
        ::close(p[0]);
        if (succeed) {
            EXPECT_EQ(r.status, 0) << r.err;
            EXPECT_EQ(got, "");
        } else {
            EXPECT_EQ(r.status, 127);
            ASSERT_EQ(got.size(), sizeof(int));
            int err;
            std::memcpy(&err, got.data(), sizeof err);
            EXPECT_EQ(err, ENOENT);
            EXPECT_EQ(r.err, "");
        }
    }
}

TEST(ExecThroughStub, AFilterThatKillsExecveatIsNotTriggered) {
    // The stub then goes through /proc/self/fd/N with plain execve.
    oci::Seccomp profile;
    profile.default_action = "SCMP_ACT_ALLOW";
    oci::SeccompSyscall kill;
    kill.names = {"execveat"};
    kill.action = "SCMP_ACT_KILL_PROCESS";
    profile.syscalls = {kill};
    auto filter = compile_seccomp(profile);
    ASSERT_TRUE(filter.has_value()) << filter.error().what();
    auto stub = make_exec_stub();
    ASSERT_TRUE(stub.has_value());
    TempDir dir;
    std::string script = dir.file("evil", "#!/proc/self/exe\n", 0755);
    auto load = [&] {
        if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || !load_seccomp(*filter)) _exit(97);
    };
    Ran r = exec_child(stub->get(), {"/bin/sh", "-c", "exit 5"}, load, -1, &*filter);
    EXPECT_EQ(r.status, 5) << r.err;
    // And the stub still stands in for /proc/self/exe.
    r = exec_child(stub->get(), {script}, load, -1, &*filter);
    EXPECT_EQ(r.status, 127);
    EXPECT_EQ(r.err, "forkbox-exec: not to be run directly\n");
}

TEST(ExecThroughStub, RefusesToRunWithoutAStub) {
    Ran r = exec_child(-1, {"/bin/true"});
    EXPECT_EQ(r.status, 98);
    EXPECT_NE(r.err.find("no exec stub"), std::string::npos) << r.err;
}

// ---- the stub waiting for `start` (container init) ----

namespace {

// Forks a child that runs `before`, then execs `args` through the stub waiting on `fifo`,
// stdout on `out_fd` (or inherited when -1). Returns once the stub runs (its exe is the
// memfd), or at once with `until_exec` false.
template <typename F>
pid_t fork_waiting_stub(int stub, const std::string& fifo, std::vector<std::string> args, F before, int out_fd = -1,
                        bool until_exec = true) {
    pid_t pid = ::fork();
    if (pid == 0) {
        if (out_fd >= 0) ::dup2(out_fd, 1);
        before();
        int path_fd = ::open(fifo.c_str(), O_PATH);
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        char* envp[] = {nullptr};
        (void)exec_through_stub(stub, args[0], argv.data(), envp, nullptr, -1, path_fd);
        _exit(98);
    }
    std::string exe;
    for (int i = 0; until_exec && i < 400 && exe.find("memfd:forkbox-exec") == std::string::npos; ++i) {
        char buf[256] = {};
        if (::readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), buf, sizeof buf - 1) > 0) exe = buf;
        ::usleep(2000);
    }
    if (until_exec) {
        EXPECT_NE(exe.find("memfd:forkbox-exec"), std::string::npos) << exe;
    }
    return pid;
}

// "SigBlk" or "SigCgt" of a /proc/PID/status text.
std::string status_field(const std::string& status, const std::string& name) {
    auto at = status.find(name + ":\t");
    return at == std::string::npos ? "" : status.substr(at + name.size() + 2, 16);
}

// The stub and an exec fifo for it to wait on.
class StubWaitingForStart : public ::testing::Test {
  protected:
    void SetUp() override {
        stub_ = make_exec_stub();
        ASSERT_TRUE(stub_.has_value());
        fifo_ = dir_.path() + "/exec.fifo";
        ASSERT_EQ(::mkfifo(fifo_.c_str(), 0600), 0);
    }
    decltype(make_exec_stub()) stub_;
    TempDir dir_;
    std::string fifo_;
};

}  // namespace

TEST_F(StubWaitingForStart, WaitsOnTheFifoThenRunsTheProgram) {
    int out[2];
    ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
    // The stub runs (its exe is the memfd) and waits: the program has not run.
    pid_t pid = fork_waiting_stub(stub_->get(), fifo_, {"/bin/sh", "-c", "echo ran"}, [] {}, out[1]);
    ::close(out[1]);
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0);
    // `start`: open for reading, take the byte, then the EOF of the program's exec.
    int reader = ::open(fifo_.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(reader, 0);
    char byte = 0;
    EXPECT_EQ(::read(reader, &byte, 1), 1);
    EXPECT_EQ(byte, '0');
    EXPECT_EQ(::read(reader, &byte, 1), 0);
    ::close(reader);
    EXPECT_EQ(read_all(out[0]), "ran\n");
    ::close(out[0]);
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}


TEST(ExecThroughStub, OnlyTheStubMayWaitForStart) {
    Ran r = run_child([] {
        std::string t = "/bin/true";
        char* argv[] = {t.data(), nullptr};
        char* envp[] = {nullptr};
        auto res = exec_through_stub(-1, t, argv, envp, nullptr, -1, 0);
        dprintf(2, "returned: %s\n", res.error().what().c_str());
        _exit(98);
    });
    EXPECT_EQ(r.status, 98);
    EXPECT_NE(r.err.find("no exec stub to wait for start"), std::string::npos) << r.err;
}

// ---- the waiting stub and signals (waiting_init_signals.h) ----


// As a process killed by the signal would be reported, though pid 1 of a namespace is not.
TEST_F(StubWaitingForStart, ExitsWith128PlusNOnATerminationSignal) {
    for (int sig : {SIGTERM, SIGHUP, SIGINT}) {
        pid_t pid = fork_waiting_stub(stub_->get(), fifo_, {"/bin/true"}, [] {});
        // Caught by now? The handlers come before the wait, just after the exec; retry until
        // the stub has them (a SIG_DFL death would show as WIFSIGNALED below).
        for (int i = 0; i < 400; ++i) {
            std::string st = read_all_of("/proc/" + std::to_string(pid) + "/status");
            if (status_field(st, "SigCgt") != "0000000000000000") break;
            ::usleep(2000);
        }
        ASSERT_EQ(::kill(pid, sig), 0);
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status)) << "signal " << sig << ": status " << status;
        EXPECT_EQ(WEXITSTATUS(status), 128 + sig);
    }
}

// Init blocks them across its exec of the stub: one sent then is pending, not lost.
TEST_F(StubWaitingForStart, ASignalPendingAcrossItsExecEndsIt) {
    pid_t pid = fork_waiting_stub(stub_->get(), fifo_, {"/bin/true"}, [] {
        sigset_t quit;
        sigemptyset(&quit);
        sigaddset(&quit, SIGQUIT);
        sigprocmask(SIG_BLOCK, &quit, nullptr);
        ::raise(SIGQUIT);
    }, -1, false);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGQUIT) << status;
}

// The handlers end with the stub's exec, and what init blocked is unblocked.
TEST_F(StubWaitingForStart, TheProgramStartsWithNoSignalCaughtOrBlocked) {
    int out[2];
    ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid_t pid = fork_waiting_stub(stub_->get(), fifo_, {"/bin/cat", "/proc/self/status"}, [] {
        sigset_t term;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        sigprocmask(SIG_BLOCK, &term, nullptr);
    }, out[1]);
    ::close(out[1]);
    int reader = ::open(fifo_.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(reader, 0);
    char byte = 0;
    EXPECT_EQ(::read(reader, &byte, 1), 1);
    ::close(reader);
    std::string status_text = read_all(out[0]);
    ::close(out[0]);
    EXPECT_EQ(status_field(status_text, "SigBlk"), "0000000000000000") << status_text;
    EXPECT_EQ(status_field(status_text, "SigCgt"), "0000000000000000") << status_text;
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}
