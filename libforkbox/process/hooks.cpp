#include "libforkbox/process/hooks.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/process/pidfd.hpp"
#include "libforkbox/process/signals.hpp"

namespace forkbox {

namespace {
int64_t now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

[[noreturn]] void exec_hook(const oci::Hook& hook, int stdin_fd, int out_fd, const std::string& cwd, pid_t runtime) {
    // A runtime killed while its hook runs takes the hook with it (a manager's SIGKILL of a
    // create must not leave the hook running); a runtime already gone: the hook is not run.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || ::getppid() != runtime) _exit(127);
    if (!cwd.empty() && ::chdir(cwd.c_str()) < 0) {
        dprintf(out_fd, "chdir %s: %s", cwd.c_str(), strerror(errno));
        _exit(127);
    }
    ::dup2(stdin_fd, 0);
    ::dup2(out_fd, 1);
    ::dup2(out_fd, 2);
    reset_signal_dispositions();
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, nullptr);
    std::vector<char*> argv, envp;
    if (hook.args.empty()) argv.push_back(const_cast<char*>(hook.path.c_str()));
    for (const auto& a : hook.args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : hook.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    sys::close_range(3, ~0U, 0);
    ::execve(hook.path.c_str(), argv.data(), envp.data());
    dprintf(2, "exec %s: %s", hook.path.c_str(), strerror(errno));
    _exit(127);
}
}  // namespace

Result<void> run_hook(const oci::Hook& hook, std::string_view state_json, const std::string& cwd) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) < 0) return sys_error("pipe");
    unique_fd in_r(in[0]), in_w(in[1]);
    if (::pipe2(out, O_CLOEXEC) < 0) return sys_error("pipe");
    unique_fd out_r(out[0]), out_w(out[1]);

    int pidfd = -1;
    pid_t runtime = ::getpid();
    pid_t pid = sys::clone3_fork(0, -1, &pidfd);
    if (pid < 0) return sys_error("fork hook " + hook.path);
    if (pid == 0) exec_hook(hook, in_r.get(), out_w.get(), cwd, runtime);
    unique_fd pfd(pidfd);
    ChildGuard guard(pid);
    in_r.reset();
    out_w.reset();
    ::fcntl(in_w.get(), F_SETFL, O_NONBLOCK);
    ::fcntl(out_r.get(), F_SETFL, O_NONBLOCK);

    std::string output;
    size_t written = 0;
    if (state_json.empty()) in_w.reset();
    int64_t deadline = hook.timeout ? now_ms() + int64_t{*hook.timeout} * 1000 : -1;
    bool exited = false;
    while (!exited || out_r.valid()) {
        struct pollfd fds[3];
        int n = 0;
        int ipfd = -1, iin = -1, iout = -1;
        if (!exited) { fds[n] = {pfd.get(), POLLIN, 0}; ipfd = n++; }
        if (in_w.valid()) { fds[n] = {in_w.get(), POLLOUT, 0}; iin = n++; }
        if (out_r.valid()) { fds[n] = {out_r.get(), POLLIN, 0}; iout = n++; }
        int timeout = -1;
        if (deadline >= 0) {
            timeout = static_cast<int>(std::max<int64_t>(0, deadline - now_ms()));
        }
        int r = ::poll(fds, static_cast<nfds_t>(n), timeout);
        if (r < 0) {
            if (errno == EINTR) continue;
            return sys_error("poll hook " + hook.path);
        }
        if (r == 0) {
            ::kill(pid, SIGKILL);
            return fail(ETIMEDOUT, "hook " + hook.path + " timed out after " + std::to_string(*hook.timeout) + "s");
        }
        if (iin >= 0 && fds[iin].revents) {
            ssize_t w = ::write(in_w.get(), state_json.data() + written, state_json.size() - written);
            if (w > 0) written += static_cast<size_t>(w);
            if (w < 0 && errno != EAGAIN) in_w.reset();  // EPIPE: the hook does not read stdin
            if (written == state_json.size()) in_w.reset();
        }
        if (iout >= 0 && fds[iout].revents) {
            char buf[4096];
            ssize_t rd = ::read(out_r.get(), buf, sizeof buf);
            if (rd > 0) {
                if (output.size() < 64 * 1024) output.append(buf, static_cast<size_t>(rd));
            } else if (rd == 0 || errno != EAGAIN) {
                out_r.reset();
            }
        }
        if (ipfd >= 0 && fds[ipfd].revents) {
            exited = true;
            in_w.reset();
        }
        // The hook may leave a background child holding the output pipe: stop reading once
        // the hook itself has exited and the pipe has nothing more right now.
        if (exited && out_r.valid()) {
            char buf[4096];
            ssize_t rd;
            while ((rd = ::read(out_r.get(), buf, sizeof buf)) > 0)
                if (output.size() < 64 * 1024) output.append(buf, static_cast<size_t>(rd));
            out_r.reset();
        }
    }
    guard.dismiss();
    FB_ASSIGN(int status, wait_child(pid));
    while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
    std::string msg = "hook " + hook.path;
    if (WIFEXITED(status))
        msg += " exited with status " + std::to_string(WEXITSTATUS(status));
    else
        msg += " killed by signal " + std::to_string(WTERMSIG(status));
    if (!output.empty()) msg += ": " + output;
    return fail(0, msg);
}

Result<void> run_hooks(const std::vector<oci::Hook>& hooks, std::string_view state_json, const char* phase,
                       const std::string& cwd) {
    for (size_t i = 0; i < hooks.size(); ++i) {
        auto r = run_hook(hooks[i], state_json, cwd);
        if (!r) return std::unexpected(r.error().wrap(std::string(phase) + " hook #" + std::to_string(i)));
    }
    return {};
}

bool config_may_have_hooks(std::string_view config_text, std::string_view phase) {
    return config_text.find(phase) != std::string_view::npos || config_text.find("\\u") != std::string_view::npos;
}

}  // namespace forkbox
