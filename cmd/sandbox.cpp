// `forkbox sandbox [options] -- CMD...`: one command in a fresh sandbox of a running
// `forkbox daemon` (or in a session's, --session ID), for humans and shell scripts. Prints
// the command's output as it comes and exits with its code (124 when the deadline killed
// it). `forkbox sandbox create|list|close|fork|pause|resume|diff|put|get|ls ...` manage
// sessions (docs/sandbox-protocol.md).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
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

std::string session_body(const std::string& id) {
    json::Writer w;
    w.begin_object().key("session").value(id).end_object();
    return w.take();
}

// A column of `forkbox sandbox list`: seconds, one decimal.
std::string seconds(const json::Value& v, std::string_view key) {
    auto d = v.get(key);
    if (!d || d->is_null()) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", d->as_double().value_or(0));
    return buf;
}

int session_verb(const std::string& verb, const std::vector<std::string>& args) {
    const std::string usage = "sandbox " + verb + " [options] " +
                              (verb == "create" || verb == "list" ? std::string() : std::string("SESSION")) +
                              (verb == "fork"                   ? " [COUNT]"
                               : verb == "put" || verb == "get" ? " PATH"
                               : verb == "ls"                   ? " [PATH]"
                                                                : "");
    VerbParser p(usage.c_str(),
                 verb == "create"   ? "Make a session (a sandbox kept for many runs) and print its id."
                 : verb == "list"   ? "List your sessions."
                 : verb == "close"  ? "End a session: every process, mount and tmpfs of it goes."
                 : verb == "fork"   ? "New sessions whose files start as this one's are now; prints their ids."
                 : verb == "pause"  ? "Stop every process of a session."
                 : verb == "resume" ? "Continue the processes of a paused session."
                 : verb == "diff"   ? "What changed in the session's files since it began (JSON)."
                 : verb == "put"    ? "Write standard input to PATH inside the session."
                 : verb == "get"    ? "Print the file PATH of the session."
                                    : "List the directory PATH of the session (JSON).");
    std::string socket;
    std::vector<std::string> positional;
    uint64_t memory_mb = 0, pids = 0, timeout_ms = 0, ttl_s = 0, idle_s = 0;
    bool network = false, as_json = false;
    std::string rootfs;
    p.add()("socket", po::value(&socket), "the daemon's socket (default: FORKBOX_SOCKET, or the default daemon's)")(
        "args", po::value(&positional)->multitoken(), "arguments");
    if (verb == "create")
        p.add()("memory", po::value(&memory_mb), "memory limit in MiB")("pids", po::value(&pids), "process limit")(
            "timeout-ms", po::value(&timeout_ms), "each run's deadline")("ttl-s", po::value(&ttl_s), "end it after this long")(
            "idle-s", po::value(&idle_s), "end it after this long without a run")(
            "network", po::bool_switch(&network), "share the host's network")(
            "rootfs", po::value(&rootfs), "its read-only root: a directory or an OCI bundle (default: the daemon's)");
    if (verb == "list") p.add()("json", po::bool_switch(&as_json), "the daemon's JSON");
    p.positional("args", -1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    if (socket.empty()) socket = zygote::default_socket_path();
    size_t want = verb == "create" || verb == "list" ? 0 : verb == "put" || verb == "get" ? 2 : 1;
    size_t most = verb == "fork" || verb == "ls" ? 2 : want;
    if (positional.size() < want || positional.size() > most)
        return report("sandbox " + verb + ": expected " + std::to_string(want) + (most > want ? " or " + std::to_string(most) : "") +
                      " arguments, got " + std::to_string(positional.size()) + " (see --help)");
    sandbox::ClientOutput out{[](std::string_view d) { write_all(1, d); }, [](std::string_view d) { write_all(2, d); }};
    auto file_body = [&](std::string_view op, const std::string& path) {
        json::Writer w;
        w.begin_object().key("session").value(positional[0]).key("op").value(op).key("path").value(path).end_object();
        return w.take();
    };
    Result<std::string> r = std::string();
    if (verb == "create") {
        json::Writer w;
        w.begin_object();
        if (memory_mb) w.key("memory_mb").value(memory_mb);
        if (pids) w.key("pids").value(pids);
        if (timeout_ms) w.key("timeout_ms").value(timeout_ms);
        if (ttl_s) w.key("ttl_s").value(ttl_s);
        if (idle_s) w.key("idle_s").value(idle_s);
        if (network) w.key("network").value(true);
        if (!rootfs.empty()) w.key("rootfs").value(absolute_from_cwd(rootfs));
        w.end_object();
        r = sandbox::call_sandbox(socket, "create", w.str());
        if (!r) return report(r.error());
        auto doc = json::Document::parse(*r);
        if (!doc || !doc->root().get("session")) return report("sandbox create: the daemon sent a malformed result");
        std::cout << doc->root().get("session")->as_string().value_or("") << "\n";
        return 0;
    }
    if (verb == "list") {
        r = sandbox::call_sandbox(socket, "list", "{}");
        if (!r) return report(r.error());
        if (as_json) {
            std::cout << *r << "\n";
            return 0;
        }
        auto doc = json::Document::parse(*r);
        auto list = doc ? doc->root().get("sessions") : std::nullopt;
        if (!list) return report("sandbox list: the daemon sent a malformed result");
        std::printf("%-20s %-20s %8s %8s %8s %7s\n", "ID", "PARENT", "AGE_S", "IDLE_S", "RUNNING", "PAUSED");
        for (size_t i = 0; i < list->size(); ++i) {
            json::Value s = list->at(i);
            auto parent = s.get("parent");
            std::printf("%-20s %-20s %8s %8s %8llu %7s\n", s.get("id")->as_string().value_or("").c_str(),
                        parent && !parent->is_null() ? parent->as_string().value_or("").c_str() : "-",
                        seconds(s, "age_s").c_str(), seconds(s, "idle_s").c_str(),
                        static_cast<unsigned long long>(s.get("running")->as_uint64().value_or(0)),
                        s.get("paused")->as_bool().value_or(false) ? "yes" : "no");
        }
        return 0;
    }
    if (verb == "close" || verb == "pause" || verb == "resume") {
        r = sandbox::call_sandbox(socket, verb, session_body(positional[0]));
    } else if (verb == "fork") {
        json::Writer w;
        w.begin_object().key("session").value(positional[0]);
        if (positional.size() > 1) {
            char* end = nullptr;
            unsigned long long n = std::strtoull(positional[1].c_str(), &end, 10);
            if (!end || *end || n == 0) return report("sandbox fork: COUNT must be a positive number, not " + positional[1]);
            w.key("count").value(static_cast<uint64_t>(n));
        }
        w.end_object();
        r = sandbox::call_sandbox(socket, "fork", w.str());
        if (r) {
            auto doc = json::Document::parse(*r);
            auto ids = doc ? doc->root().get("sessions") : std::nullopt;
            if (!ids) return report("sandbox fork: the daemon sent a malformed result");
            for (size_t i = 0; i < ids->size(); ++i) std::cout << ids->at(i).as_string().value_or("") << "\n";
            return 0;
        }
    } else if (verb == "diff") {
        json::Writer w;
        w.begin_object().key("session").value(positional[0]).key("op").value("diff").end_object();
        r = sandbox::call_sandbox(socket, "file", w.str(), std::nullopt, out);
        if (r) write_all(1, "\n");
    } else if (verb == "put") {
        auto data = read_all(0, "standard input");
        if (!data) return report(data.error());
        r = sandbox::call_sandbox(socket, "file", file_body("write", positional[1]), std::move(*data), out);
    } else if (verb == "get") {
        r = sandbox::call_sandbox(socket, "file", file_body("read", positional[1]), std::nullopt, out);
    } else {  // ls
        r = sandbox::call_sandbox(socket, "file", file_body("list", positional.size() > 1 ? positional[1] : "/"), std::nullopt, out);
        if (r) write_all(1, "\n");
    }
    if (!r) return report(r.error());
    return 0;
}

}  // namespace

int cmd_sandbox(const Globals&, const std::vector<std::string>& args) {
    // Session verbs come first and alone: `forkbox sandbox -- list` runs a command "list".
    static const std::vector<std::string> kVerbs = {"create", "list", "close", "fork", "pause", "resume", "diff", "put", "get", "ls"};
    // (`--socket S` may come before the verb.)
    size_t at = !args.empty() && args[0] == "--socket" ? 2 : !args.empty() && args[0].starts_with("--socket=") ? 1 : 0;
    if (at < args.size() && std::find(kVerbs.begin(), kVerbs.end(), args[at]) != kVerbs.end()) {
        std::vector<std::string> rest(args.begin(), args.begin() + static_cast<long>(at));
        rest.insert(rest.end(), args.begin() + static_cast<long>(at) + 1, args.end());
        return session_verb(args[at], rest);
    }
    VerbParser p("sandbox [options] [--] COMMAND [ARG...]",
                 "Run one command in a fresh sandbox of the running `forkbox daemon` (user namespace,\n"
                 "overlay root in RAM, seccomp, limits). Exits with the command's code; 124 on timeout.");
    std::vector<std::string> command, env, mounts, preload;
    std::string socket, cwd, session, python, rootfs;
    uint64_t timeout_ms = 0, memory_mb = 0, pids = 0, max_output = 0;
    double cpus = 0;
    bool network = false, no_caps = false, forward_stdin = false, info = false;
    p.add()("socket", po::value(&socket), "the daemon's socket (default: FORKBOX_SOCKET, or the default daemon's)")(
        "timeout-ms", po::value(&timeout_ms), "kill the whole sandbox after this many milliseconds (exit 124)")(
        "memory", po::value(&memory_mb), "memory limit in MiB (default: the daemon's)")(
        "pids", po::value(&pids), "process limit (default: the daemon's)")(
        "cpus", po::value(&cpus), "CPU limit in cores (cgroups only)")(
        "network", po::bool_switch(&network), "share the host's network (default: only lo)")(
        "rootfs", po::value(&rootfs), "the sandbox's read-only root: a directory or an OCI bundle (default: the daemon's)")(
        "mount,v", po::value(&mounts)->composing(), "bind HOST:SANDBOX[:ro|rw] (ro by default)")(
        "env,e", po::value(&env)->composing(), "KEY=VALUE (replaces the default environment)")(
        "cwd,w", po::value(&cwd), "working directory inside")(
        "max-output", po::value(&max_output), "bytes kept per stream (head and tail)")(
        "no-caps", po::bool_switch(&no_caps), "drop every capability")(
        "stdin,i", po::bool_switch(&forward_stdin), "pass this process's standard input (read to its end first)")(
        "info", po::bool_switch(&info), "print the daemon's facts and counters (JSON) and exit")(
        "session,s", po::value(&session), "run in this session's sandbox (forkbox sandbox create)")(
        "python", po::value(&python), "run this Python code (python3 -c) by a warm interpreter instead of a command")(
        "preload", po::value(&preload)->composing(), "a module the warm interpreter imports first (with --python)")(
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
    if (command.empty() && python.empty())
        return report("sandbox: no command given (forkbox sandbox -- CMD..., or --python CODE)");
    if (!command.empty() && !python.empty()) return report("sandbox: give a command or --python CODE, not both");

    json::Writer w;
    w.begin_object();
    if (python.empty()) {
        w.key("argv").begin_array();
        for (const auto& a : command) w.value(a);
        w.end_array();
    } else {
        w.key("python").value(python);
        if (!preload.empty()) {
            w.key("preload").begin_array();
            for (const auto& m : preload) w.value(m);
            w.end_array();
        }
    }
    if (!env.empty()) {
        w.key("env").begin_array();
        for (const auto& e : env) w.value(e);
        w.end_array();
    }
    if (!cwd.empty()) w.key("cwd").value(cwd);
    if (!session.empty()) w.key("session").value(session);
    if (timeout_ms) w.key("timeout_ms").value(timeout_ms);
    if (memory_mb) w.key("memory_mb").value(memory_mb);
    if (pids) w.key("pids").value(pids);
    if (cpus > 0) w.key("cpus").value(cpus);
    if (network) w.key("network").value(true);
    if (!rootfs.empty()) w.key("rootfs").value(absolute_from_cwd(rootfs));
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
