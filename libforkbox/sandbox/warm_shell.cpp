#include "libforkbox/sandbox/embryo_parts.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <set>

#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/base/unix_socket.hpp"

namespace forkbox::sandbox {

// Most of a short shell line's run is the shell's own start (exec, the loader, libc's
// start-up: ~0.5 ms here, in a sandbox or not). So a pooled embryo starts its shell while it
// waits for a request: `/bin/sh -c '. /dev/fd/3'` (as SCHED_BATCH) blocks reading a script
// from a pipe, and a release that fits it is written there as `exec 3<&-; eval 'LINE'`.
// Only a dash: it runs a -c line as eval runs one (each command in a child, its last one
// too, so exit codes and signals read the same); a bash or busybox sh execs the last
// command itself. What differs: the shell's command line, and "eval: " in the shell's own
// messages ("/bin/sh: 1: eval: nosuch: not found").
//
// A process's exit tears its address space down before it closes its files (0.3-0.6 ms of
// a dash's exit on a PVM guest), and its output pipes' end, its reaping and its init's
// report come after that, each a wake-up later. So a sandbox's shell, once its line is done,
// writes the line's status to its fd 4, a socket to the service (hidden from the line), and
// waits there: the service ends the run with it, and the shell dies with its sandbox after
// the reply, or it tells the shell to go on to its exit (server_runs.cpp, on_line_end).
namespace embryo {

namespace {

bool shell_is_dash() {
    char resolved[PATH_MAX];
    if (!::realpath("/bin/sh", resolved)) return false;
    std::string_view path(resolved);
    return path.substr(path.rfind('/') + 1) == "dash";
}

bool is_dev_null(int fd) {
    struct stat st{};
    return ::fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
}

// `/bin/sh -c LINE`, with no positional parameters: the warm shell's own $0 and $#.
bool is_shell_line(const std::vector<std::string>& argv) {
    return argv.size() == 3 && argv[0] == "/bin/sh" && argv[1] == "-c";
}

std::string single_quoted(std::string_view text) {
    std::string out = "'";
    for (char ch : text) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return out + "'";
}

}  // namespace

WarmShell warm_shell;

namespace {

// Out of the background class it waited in (a SCHED_BATCH wakee preempts no one), and
// running (a session's run may have stopped everyone else: kill -STOP -1).
void wake_warm_shell(pid_t pid) {
    sched_param none{};
    ::sched_setscheduler(pid, SCHED_OTHER, &none);
    ::kill(pid, SIGCONT);
}

}  // namespace

void start_warm_shell(WarmShellRole role, int out, int err, uint64_t address_limit, int line_end, unique_fd script[2],
                      uint64_t nproc_limit) {
    if (!shell_is_dash()) return;
    unique_fd read_end, write_end;
    bool given_script = script && script[0] && script[1];
    if (given_script) {
        read_end = std::move(script[0]);
        write_end = std::move(script[1]);
    } else {
        int ends[2];
        if (::pipe2(ends, O_CLOEXEC) < 0) return;
        read_end.reset(ends[0]);
        write_end.reset(ends[1]);
    }
    unique_fd script_in(::fcntl(read_end.get(), F_DUPFD_CLOEXEC, 10));  // clear of 0-4 in the child
    unique_fd null(::open("/dev/null", O_RDWR | O_CLOEXEC));            // as the daemon's
    if (!script_in || !null) return;
    unique_fd line_end_out;  // clear of 0-4 in the child too
    if (line_end >= 0 && !(line_end_out = unique_fd(::fcntl(line_end, F_DUPFD_CLOEXEC, 10))))
        return;
    Release r;
    r.argv = {"/bin/sh", "-c", ::access("/dev/fd/3", F_OK) == 0 || errno != ENOENT ? ". /dev/fd/3" : ". /proc/self/fd/3"};
    r.env = kDefaultEnv;
    Command c = prepare(r);
    c.cwd = "/";
    c.batch = true;
    c.own_group = role == WarmShellRole::session;
    c.limit_address = address_limit != 0;
    c.address = rlimit{address_limit, address_limit};
    c.limit_nproc = nproc_limit != 0;
    c.nproc = rlimit{nproc_limit, nproc_limit};
    c.script_fd = script_in.get();
    c.line_end_fd = line_end_out ? line_end_out.get() : -1;
    int stdio[3] = {null.get(), out, err};
    mode_t umask_before = ::umask(022);  // a login's, as run() sets
    pid_t pid = spawn(c, stdio);
    ::umask(umask_before);
    if (pid < 0) return;
    if (exec_errno) {
        ::waitpid(pid, nullptr, 0);
        return;
    }
    warm_shell.pid = pid;
    warm_shell.script = std::move(write_end);
    warm_shell.says_line_end = c.line_end_fd >= 0;
    // The service may write it its line itself, and what it runs must not be SCHED_BATCH: out
    // of that class now, its start under way (a batch wakee preempts no one, and the shell,
    // which faults its way through its start, wakes no more until its line comes).
    if (given_script) wake_warm_shell(pid);
}

std::optional<WarmShellPipes> warm_shell_pipes(std::string_view message, std::vector<unique_fd>& fds) {
    if (message.empty() || message.front() != 'N') return std::nullopt;
    std::string_view flags = message.substr(0, message.find(' '));
    bool line_end = flags.find('E') != std::string_view::npos, script = flags.find('S') != std::string_view::npos;
    if (fds.size() != 2u + (line_end ? 1u : 0u) + (script ? 2u : 0u)) return std::nullopt;
    WarmShellPipes p;
    p.wants_shell = line_end && flags.find('U') != std::string_view::npos;
    if (flags.size() < message.size()) {
        unsigned long long nproc = 0, address = 0;
        if (std::sscanf(std::string(message.substr(flags.size())).c_str(), " %llu %llu", &nproc, &address) != 2)
            return std::nullopt;
        p.nproc_limit = nproc;
        p.address_limit = address;
    }
    size_t next = 0;
    p.output[0] = std::move(fds[next++]);
    p.output[1] = std::move(fds[next++]);
    if (line_end) p.line_end = std::move(fds[next++]);
    if (script) {
        p.script[0] = std::move(fds[next++]);
        p.script[1] = std::move(fds[next++]);
    }
    fds.clear();
    return p;
}

void say_warm_shell(int control) {
    if (warm_shell.pid <= 0) return;
    unique_fd shell(sys::pidfd_open(warm_shell.pid));
    int fd = shell.get();
    if (shell) (void)send_with_fds(control, "S", std::span<const int>(&fd, 1), "sandbox control");
}

void drop_warm_shell(bool reap) {
    if (warm_shell.pid < 0) return;
    ::kill(warm_shell.pid, SIGKILL);
    if (reap) ::waitpid(warm_shell.pid, nullptr, 0);
    warm_shell.pid = -1;
    warm_shell.script.reset();
    warm_shell.says_line_end = false;
}

std::optional<std::string> fits_warm_shell(const Release& r, int stdin_fd) {
    if (warm_shell.pid < 0 || r.warm_python || r.drop_all_caps || !is_dev_null(stdin_fd)) return std::nullopt;
    if (!is_shell_line(r.argv)) return std::nullopt;
    return warm_shell_environment(r.env);
}

// The line to the warm shell, which is then the command's: its pid, or -1 (errno) when it
// died before it could read it (an init ignores the SIGPIPE it has no handler for: EPIPE).
// In another environment, it makes that first (`environment`, from fits_warm_shell); in
// another cwd than its own ("/"), or after PWD was unset, it changes there, physically
// (`cd -P`), as a shell started there has its PWD from getcwd() and no OLDPWD; the caller
// has checked that it can.
pid_t give_line(const std::string& line, const std::string& environment, const std::string& cwd) {
    pid_t pid = warm_shell.pid;
    wake_warm_shell(pid);
    std::string script = warm_shell_script(line, environment, cwd, warm_shell.says_line_end);
    std::string_view rest(script);
    while (!rest.empty()) {
        ssize_t n = ::write(warm_shell.script.get(), rest.data(), rest.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int err = n < 0 ? errno : EPIPE;
            drop_warm_shell(false);
            errno = err;
            return -1;
        }
        rest.remove_prefix(static_cast<size_t>(n));
    }
    warm_shell.pid = -1;
    warm_shell.script.reset();
    warm_shell.says_line_end = false;
    return pid;
}

pid_t line_was_given() {
    pid_t pid = warm_shell.pid;
    wake_warm_shell(pid);  // woken already by the line: it may have preempted no one yet
    warm_shell.pid = -1;
    warm_shell.script.reset();
    warm_shell.says_line_end = false;
    return pid;
}

[[noreturn]] void run_in_warm_shell(int control, const Release& r, const std::string& environment, const int* stdio) {
    pid_t pid = warm_shell.pid;
    limit_started(control, pid, r);
    if (::chdir(r.cwd.c_str()) < 0) exec_failed(control, errno, "cwd " + r.cwd);  // as run() reports it
    int64_t used = stage_used();
    if (r.line_given)
        line_was_given();
    else if (give_line(r.argv[2], environment, r.cwd) < 0)
        send_text(control, "X" + std::to_string(errno) + " warm shell: " + std::strerror(errno));
    trace::mark("embryo: spawned");
    for (int i = 0; i < 3; ++i) ::close(stdio[i]);
    report_end(control, pid, used);
}

}  // namespace embryo

bool takes_warm_shell(const std::vector<std::string>& argv, const std::vector<std::string>& env, bool has_stdin) {
    return !has_stdin && embryo::is_shell_line(argv) && warm_shell_environment(env);
}

std::string warm_shell_script(std::string_view line, const std::string& environment, const std::string& cwd,
                              bool says_line_end) {
    std::string script = "exec 3<&-; " + environment;
    if (cwd != "/" || !environment.empty())
        script += "cd -P -- " + embryo::single_quoted(cwd) + " || exit; unset OLDPWD; ";
    if (says_line_end) {
        // Only special built-ins, which no function of the line's can shadow, and printf and
        // read once none does. The status is kept where the line cannot make it read-only
        // ($1) and is the dot script's, so the shell's exit status too. What else goes to fd
        // 4 (a trap's listing, an -x trace) comes before the status line: the service then
        // waits for the shell's exit (an EXIT trap runs, and may write, at the exit itself).
        // After the status the shell waits on fd 4 (a socket) for the service's word: its
        // exit, if it comes, is after the reply (server_runs.cpp, on_line_end).
        script += "eval " + embryo::single_quoted(line) + " 4>&-; { set -- \"$?\"; unset -f printf read; trap; "
                  "printf 'S%s\\n' \"$1\"; read -r _ <&4; return \"$1\"; } >&4 2>&4\n";
    } else {
        // Its end without waiting for the pipe's (the service's end is closed at once, the
        // init's when the init has woken): parsed with the eval, so no alias the line makes
        // can change it.
        script += "eval " + embryo::single_quoted(line) + "; return\n";
    }
    return script;
}

std::optional<std::string> warm_shell_environment(const std::vector<std::string>& env) {
    if (env == kDefaultEnv) return std::string();
    static const std::set<std::string_view> kSetByDash = {"IFS", "PPID", "OPTIND", "LINENO", "PWD", "OLDPWD", "PS1",
                                                          "PS2", "PS4", "ENV", "MAIL", "MAILPATH", "MAILCHECK",
                                                          "HISTSIZE", "ATTY", "TERMCAP"};
    std::set<std::string> names;
    std::string exports;
    for (const auto& entry : env) {
        size_t eq = entry.find('=');
        if (eq == std::string::npos) return std::nullopt;
        std::string name = entry.substr(0, eq);
        bool identifier = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                          std::all_of(name.begin(), name.end(), [](char c) { return c == '_' || std::isalnum(static_cast<unsigned char>(c)); });
        if (!identifier || kSetByDash.count(name) || !names.insert(name).second) return std::nullopt;
        exports += " " + name + "=" + embryo::single_quoted(std::string_view(entry).substr(eq + 1));
    }
    std::string unset = "unset";
    for (const auto& entry : kDefaultEnv) unset += " " + entry.substr(0, entry.find('='));
    return unset + " PWD;" + (exports.empty() ? std::string() : " export" + exports + ";") + " ";
}

}  // namespace forkbox::sandbox
