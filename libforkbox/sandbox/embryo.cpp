#include "libforkbox/sandbox/embryo.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include "libforkbox/base/trace.hpp"
#include "libforkbox/base/unix_socket.hpp"
#include "libforkbox/sandbox/embryo_parts.hpp"

// The embryo's life (embryo.hpp): made, released, then a one-shot run or a session. Its
// parts are in embryo_parts.hpp.
namespace forkbox::sandbox {

using namespace embryo;

namespace {

void put(std::string& out, std::string_view s) {
    out.append(s);
    out.push_back('\0');
}

// Reads NUL-terminated strings in order.
class Reader {
public:
    explicit Reader(std::string_view d) : d_(d) {}
    Result<std::string> next() {
        size_t end = d_.find('\0');
        if (end == std::string_view::npos) return fail(EPROTO, "release: truncated");
        std::string s(d_.substr(0, end));
        d_.remove_prefix(end + 1);
        return s;
    }
    Result<uint64_t> number() {
        FB_ASSIGN(std::string s, next());
        uint64_t n = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return fail(EPROTO, "release: bad number");
        return n;
    }
    bool done() const { return d_.empty(); }

private:
    std::string_view d_;
};

[[noreturn]] void die(int control, std::string_view message) {
    std::string m = "F" + std::string(message);
    ::send(control, m.data(), m.size(), MSG_NOSIGNAL);
    ::_exit(1);
}

// The daemon's deadline (SIGUSR1): every process of the sandbox but this one is killed,
// the command's end is reported as usual ("W"), and this process's own teardown comes
// after the reply instead of before it. An init ignores signals it has no handler for, so
// before the handler is there the daemon's fallback, SIGKILL, does it.
void kill_the_sandbox(int) { ::kill(-1, SIGKILL); }

// The sandbox's init from here on: the command runs as its child (pid 2), so it has a
// process's ordinary signal semantics (pid 1 ignores the signals it has no handler for),
// and it execs from a vfork child, without tearing down this process's address space on
// the way. This process reaps what gets orphaned to it, reports the command's status and
// usage ("W"), and exits: the kernel then kills whatever else runs in the sandbox.
[[noreturn]] void run(int control, const Release& r, const int* stdio) {
    ::umask(022);  // a login's, whatever the daemon's is
    if (::chdir(r.cwd.c_str()) < 0) exec_failed(control, errno, "cwd " + r.cwd);
    if (r.nproc_limit) {
        rlimit l{r.nproc_limit, r.nproc_limit};
        if (::setrlimit(RLIMIT_NPROC, &l) < 0) exec_failed(control, errno, "RLIMIT_NPROC");
    }
    drop_warm_shell(false);
    if (r.drop_all_caps && !drop_every_capability()) exec_failed(control, errno, "drop capabilities");
    Command c = prepare(r);
    int64_t used = stage_used();
    pid_t command = spawn(c, stdio);
    int err = errno;
    trace::mark("embryo: spawned");
    for (int i = 0; i < 3; ++i) ::close(stdio[i]);  // the pipes end with the command's side
    if (command < 0) exec_failed(control, err, "start the command");
    if (exec_errno) {
        int e = exec_errno;
        send_text(control, "X" + std::to_string(e) + " exec " + r.argv[0] + ": " + std::strerror(e));
    }
    report_end(control, command, used);
}

}  // namespace

std::string Release::encode() const {
    std::string out;
    put(out, cwd);
    put(out, std::to_string(nproc_limit));
    put(out, std::to_string(address_limit));
    put(out, drop_all_caps ? "1" : "0");
    put(out, warm_python ? "1" : "0");
    put(out, line_given ? "1" : "0");
    std::string modules;  // module names have no comma
    for (const auto& m : preload) modules += (modules.empty() ? "" : ",") + m;
    put(out, modules);
    put(out, std::to_string(argv.size()));
    for (const auto& a : argv) put(out, a);
    for (const auto& e : env) put(out, e);
    return out;
}

Result<Release> Release::decode(std::string_view data) {
    Reader in(data);
    Release r;
    FB_ASSIGN(r.cwd, in.next());
    FB_ASSIGN(r.nproc_limit, in.number());
    FB_ASSIGN(r.address_limit, in.number());
    FB_ASSIGN(uint64_t drop, in.number());
    r.drop_all_caps = drop != 0;
    FB_ASSIGN(uint64_t python, in.number());
    r.warm_python = python != 0;
    FB_ASSIGN(uint64_t given, in.number());
    r.line_given = given != 0;
    FB_ASSIGN(std::string modules, in.next());
    for (size_t start = 0; start < modules.size();) {
        size_t end = std::min(modules.find(',', start), modules.size());
        if (end == start || end + 1 == modules.size()) return fail(EPROTO, "release: an empty module name");
        r.preload.push_back(modules.substr(start, end - start));
        start = end + 1;
    }
    FB_ASSIGN(uint64_t argc, in.number());
    if (argc == 0 || argc > data.size()) return fail(EPROTO, "release: bad argc");
    for (uint64_t i = 0; i < argc; ++i) {
        FB_ASSIGN(std::string a, in.next());
        r.argv.push_back(std::move(a));
    }
    while (!in.done()) {
        FB_ASSIGN(std::string e, in.next());
        r.env.push_back(std::move(e));
    }
    return r;
}

void embryo_main(const EmbryoSetup& s) {
    int control = s.control_fd;
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The daemon's signal mask (signalfd) must not reach the command.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // The dispositions are the builder's, reset once when it started (builder.cpp).
    // Built in the background, never by preempting whoever woke us: the service sending a
    // held embryo its "M" (a fork of 8 sent its children one per preemption), a command
    // a pool refill would otherwise interrupt. A SCHED_BATCH wakee does not preempt.
    if (auto batch = set_batch_scheduling(true); !batch) die(control, batch.error().what());
    struct sigaction deadline {};
    deadline.sa_handler = kill_the_sandbox;
    deadline.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &deadline, nullptr);

    std::string buf = receive_buffer(kReleaseBufferBytes);
    std::vector<unique_fd> fds;
    auto n = receive_message(control, buf, fds, "sandbox control");
    if (!n || *n == 0 || buf[0] != 'P') ::_exit(1);  // the daemon gave up on us
    if (auto entered = enter_namespaces(s); !entered) die(control, entered.error().what());
    n = receive_message(control, buf, fds, "sandbox control");
    if (!n || *n == 0 || buf[0] != 'M') ::_exit(1);
    // Not dumpable: the sandbox's processes share this one's credentials, and must not
    // reach its memory or fds (/proc/1/mem, /proc/1/fd) where the daemon's socket is.
    // Only now: a user's builder writes our id maps through /proc, which a process that
    // is not dumpable closes to it.
    ::prctl(PR_SET_DUMPABLE, 0);
    // "M" [L: the lower layer] [F: a fork's parent stage], the fds in that order.
    std::string_view flags(buf.data() + 1, *n - 1);
    size_t next = 0;
    int lower = flags.find('L') != std::string_view::npos && next < fds.size() ? fds[next++].release() : -1;
    int fork_source = flags.find('F') != std::string_view::npos && next < fds.size() ? fds[next++].release() : -1;
    auto built = build(s, lower, fork_source);
    if (!built) die(control, built.error().what());
    std::string ready = "R";
    if (s.kind && s.kind->python) {
        auto python = start_python(embryo::WarmPythonRole::sandbox, s.kind->preload);
        if (!python) die(control, "a warm Python: " + python.error().what());
        warm_python = std::move(*python);
        ready += " " + std::to_string(warm_python.cpu_ns);
    }
    // With the stage: the service reads what a run wrote from it when a line's end comes
    // from its shell, not from here, and a session's forks copy it.
    int stage = tree.stage.get();
    if (!send_with_fds(control, ready, std::span<const int>(&stage, 1), "sandbox control")) ::_exit(1);

    fds.clear();
    n = receive_message(control, buf, fds, "sandbox control");
    // "N": our command's stdout and stderr, made while we wait in a pool (and the pipe to the
    // service its warm shell says its line's end on, and the one it reads its script from);
    // the release then carries stdin alone.
    unique_fd output[2];
    if (auto pipes = n ? warm_shell_pipes(std::string_view(buf.data(), *n), fds) : std::nullopt) {
        output[0] = std::move(pipes->output[0]);
        output[1] = std::move(pipes->output[1]);
        if (s.warm_shell && (!s.kind || !s.kind->python))
            start_warm_shell(WarmShellRole::sandbox, output[0].get(), output[1].get(), pipes->address_limit,
                             pipes->line_end.get(), pipes->script, pipes->nproc_limit);
        if (pipes->wants_shell) say_warm_shell(control);
        n = receive_message(control, buf, fds, "sandbox control");
    }
    if (!n || *n < 1) ::_exit(1);
    if (buf[0] == 'L') {
        drop_warm_shell(true);
        output[0].reset();  // a session's runs have pipes of their own
        output[1].reset();
        // A session: its limits, then its state as it begins (a diff's base), then "l" (the
        // daemon keeps the stage it had with "R" for forks).
        Release limits;
        unsigned long long nproc = 0, address = 0;
        int drop = 0;
        if (std::sscanf(std::string(buf.data() + 1, *n - 1).c_str(), "%llu %llu %d", &nproc, &address, &drop) != 3) ::_exit(1);
        limits.nproc_limit = nproc;
        limits.address_limit = address;
        limits.drop_all_caps = drop != 0;
        tree.context.stage_fd = tree.stage.get();
        tree.context.lower_fd = tree.lower.get();
        tree.base = take_manifest(tree.context);
        tree.context.base = &tree.base;
        send_text(control, "l");
        session_loop(control, limits);
    }
    if (fds.size() == 1 && output[0] && output[1]) {
        fds.push_back(std::move(output[0]));
        fds.push_back(std::move(output[1]));
    }
    if (*n <= 1 || buf[0] != 'G' || fds.size() != 3) ::_exit(1);
    trace::mark("embryo: released");
    tree.lower.reset();  // a one-shot run keeps only the stage open (its tmpfs's usage)
    auto release = Release::decode(std::string_view(buf.data() + 1, *n - 1));
    if (!release) exec_failed(control, EPROTO, "release");
    int stdio[3] = {fds[0].release(), fds[1].release(), fds[2].release()};
    if (release->warm_python && warm_python.pid > 0) run_warm_python(control, *release, stdio);
    // A line the service gave the shell is the shell's to run, and only its (without the
    // shell, which never read it, it runs here).
    if (release->line_given && warm_shell.pid >= 0) run_in_warm_shell(control, *release, "", stdio);
    if (auto environment = fits_warm_shell(*release, stdio[0])) run_in_warm_shell(control, *release, *environment, stdio);
    run(control, *release, stdio);
}

}  // namespace forkbox::sandbox
