// `forkbox sandbox [options] -- CMD...`: one command in a fresh sandbox of a running
// `forkbox daemon`, for humans and shell scripts. Prints the command's output as it comes
// and exits with its code (124 when the deadline killed it).
#include <unistd.h>

#include <iostream>

#include "cmd/common.hpp"
#include "libforkbox/base/files.hpp"
#include "libforkbox/base/json.hpp"
#include "libforkbox/sandbox/client.hpp"
#include "libforkbox/zygote/zygote.hpp"

namespace forkbox::cmd {

namespace {

void write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            return;
        }
        data.remove_prefix(static_cast<size_t>(n));
    }
}

}  // namespace

int cmd_sandbox(const Globals&, const std::vector<std::string>& args) {
    VerbParser p("sandbox [options] [--] COMMAND [ARG...]",
                 "Run one command in a fresh sandbox of the running `forkbox daemon` (user namespace,\n"
                 "overlay root in RAM, seccomp, limits). Exits with the command's code; 124 on timeout.");
    std::vector<std::string> command, env, mounts;
    std::string socket, cwd;
    uint64_t timeout_ms = 0, memory_mb = 0, pids = 0, max_output = 0;
    double cpus = 0;
    bool network = false, no_caps = false, forward_stdin = false, info = false;
    p.add()("socket", po::value(&socket), "the daemon's socket (default: FORKBOX_SOCKET, or the default daemon's)")(
        "timeout-ms", po::value(&timeout_ms), "kill the whole sandbox after this many milliseconds (exit 124)")(
        "memory", po::value(&memory_mb), "memory limit in MiB (default: the daemon's)")(
        "pids", po::value(&pids), "process limit (default: the daemon's)")(
        "cpus", po::value(&cpus), "CPU limit in cores (cgroups only)")(
        "network", po::bool_switch(&network), "share the host's network (default: only lo)")(
        "mount,v", po::value(&mounts)->composing(), "bind HOST:SANDBOX[:ro|rw] (ro by default)")(
        "env,e", po::value(&env)->composing(), "KEY=VALUE (replaces the default environment)")(
        "cwd,w", po::value(&cwd), "working directory inside")(
        "max-output", po::value(&max_output), "bytes kept per stream (head and tail)")(
        "no-caps", po::bool_switch(&no_caps), "drop every capability")(
        "stdin,i", po::bool_switch(&forward_stdin), "pass this process's standard input (read to its end first)")(
        "info", po::bool_switch(&info), "print the daemon's facts and counters (JSON) and exit")(
        "command", po::value(&command)->multitoken(), "the command");
    p.positional("command", -1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    if (socket.empty()) socket = zygote::default_socket_path();
    if (info) {
        auto r = sandbox::call_sandbox(socket, "info", "{}");
        if (!r) return report(r.error());
        std::cout << *r << "\n";
        return 0;
    }
    if (command.empty()) return report("sandbox: no command given (forkbox sandbox -- CMD...)");

    json::Writer w;
    w.begin_object();
    w.key("argv").begin_array();
    for (const auto& a : command) w.value(a);
    w.end_array();
    if (!env.empty()) {
        w.key("env").begin_array();
        for (const auto& e : env) w.value(e);
        w.end_array();
    }
    if (!cwd.empty()) w.key("cwd").value(cwd);
    if (timeout_ms) w.key("timeout_ms").value(timeout_ms);
    if (memory_mb) w.key("memory_mb").value(memory_mb);
    if (pids) w.key("pids").value(pids);
    if (cpus > 0) w.key("cpus").value(cpus);
    if (network) w.key("network").value(true);
    if (max_output) w.key("max_output").value(max_output);
    if (no_caps) w.key("caps").begin_array().end_array();
    if (!mounts.empty()) {
        w.key("mounts").begin_array();
        for (const auto& m : mounts) {
            size_t a = m.find(':');
            if (a == std::string::npos) return report("--mount " + m + ": expected HOST:SANDBOX[:ro|rw]");
            size_t b = m.find(':', a + 1);
            std::string mode = b == std::string::npos ? "ro" : m.substr(b + 1);
            w.begin_object().key("source").value(m.substr(0, a));
            w.key("destination").value(m.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1));
            w.key("mode").value(mode).end_object();
        }
        w.end_array();
    }
    std::optional<std::string> input;
    if (forward_stdin) {
        w.key("stdin").value(true);
        auto data = read_all(0, "standard input");
        if (!data) return report(data.error());
        input = std::move(*data);
    }
    w.end_object();

    sandbox::ClientOutput out{[](std::string_view d) { write_all(1, d); }, [](std::string_view d) { write_all(2, d); }};
    auto result = sandbox::call_sandbox(socket, "run", w.str(), input, out);
    if (!result) return report(result.error());
    auto doc = json::Document::parse(*result);
    if (!doc) return report("sandbox: the daemon sent a malformed result");
    json::Value root = doc->root();
    int code = 1;
    if (auto c = root.get("exit_code")) code = static_cast<int>(c->as_int64().value_or(1));
    if (auto e = root.get("exec_error")) report("sandbox: " + e->as_string().value_or("exec failed"));
    if (auto t = root.get("timed_out"); t && t->as_bool().value_or(false)) {
        // The daemon's --max-timeout-ms may have set a shorter deadline than ours.
        double ms = 0;
        if (auto d = root.get("duration_ms")) ms = d->as_double().value_or(0);
        std::cerr << "forkbox: sandbox: killed at the deadline, after " << static_cast<long long>(ms) << " ms\n";
    }
    for (const char* s : {"stdout_dropped", "stderr_dropped"})
        if (auto d = root.get(s); d && d->as_uint64().value_or(0) > 0)
            std::cerr << "forkbox: sandbox: " << s << " " << d->as_uint64().value_or(0) << " bytes\n";
    return code;
}

}  // namespace forkbox::cmd
