#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <sstream>

#include "cmd/common.hpp"
#include "libforkbox/base/fd.hpp"
#include "libforkbox/container/container.hpp"

extern char** environ;

namespace forkbox::cmd {

namespace {

// Runs ps with args and returns its stdout; its stderr passes through.
Result<std::string> run_ps(const std::vector<std::string>& ps_args) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) < 0) return sys_error("pipe");
    unique_fd rd(p[0]), wr(p[1]);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, wr.get(), STDOUT_FILENO);
    std::vector<std::string> argv_s{"ps"};
    argv_s.insert(argv_s.end(), ps_args.begin(), ps_args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    // forkbox ignores SIGPIPE; ps gets the default back.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    posix_spawnattr_setsigdefault(&attr, &pipe_only);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int err = posix_spawnp(&pid, "ps", &fa, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (err != 0) return sys_error(err, "run ps");
    wr.reset();
    std::string out;
    char buf[4096];
    for (;;) {
        ssize_t n = ::read(rd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    int st;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return fail("ps failed (exit status " + std::to_string(code) + ")");
    }
    return out;
}

std::vector<std::string> fields(const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> out;
    for (std::string f; in >> f;) out.push_back(f);
    return out;
}

}  // namespace

int cmd_ps(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("ps [--format table|json] <container-id> [-- ps-options...]",
                 "List the processes of a container: `ps` output (default -ef) filtered to its pids, "
                 "or their pids as a JSON array.");
    std::string format;
    p.add()("format,f", po::value(&format)->default_value("table"), "table or json")(
        "id", po::value<std::string>(), "container id");
    p.positional("id", 1);
    // Everything after the id is for ps (as runc): split there, so "-ef" is not parsed as ours.
    size_t i = 0;
    for (; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--") {
            ++i;
            break;
        }
        if (a == "-f" || a == "--format") {
            ++i;
            continue;
        }
        if (a.size() > 1 && a[0] == '-') continue;
        ++i;  // the id
        break;
    }
    std::vector<std::string> ours(args.begin(), args.begin() + static_cast<long>(std::min(i, args.size())));
    std::vector<std::string> ps_args(args.begin() + static_cast<long>(std::min(i, args.size())), args.end());
    if (!ours.empty() && ours.back() == "--") {  // "ps -- ID": the id follows
        ours.pop_back();
        if (!ps_args.empty()) {
            ours.push_back(ps_args.front());
            ps_args.erase(ps_args.begin());
        }
    }
    if (!ps_args.empty() && ps_args.front() == "--") ps_args.erase(ps_args.begin());
    po::variables_map vm;
    if (!p.parse(ours, vm)) return 0;
    if (format != "table" && format != "json") return report("invalid format option \"" + format + "\"");
    std::string id = require_id(vm, "ps");
    auto pids = container_pids(g.store(), id);
    if (!pids) return report(pids.error());
    if (format == "json") {
        // runc marshals an empty list as null.
        if (pids->empty()) {
            std::cout << "null\n";
            return 0;
        }
        std::string out = "[";
        for (size_t k = 0; k < pids->size(); ++k) {
            if (k) out += ",";
            out += std::to_string((*pids)[k]);
        }
        std::cout << out << "]\n";
        return 0;
    }
    if (ps_args.empty()) ps_args = {"-ef"};
    auto out = run_ps(ps_args);
    if (!out) return report(out.error());
    std::istringstream in(*out);
    std::string header;
    std::getline(in, header);
    auto titles = fields(header);
    auto col = std::find(titles.begin(), titles.end(), "PID");
    if (col == titles.end()) return report("couldn't find PID field in ps output");
    size_t pid_index = static_cast<size_t>(col - titles.begin());
    std::cout << header << "\n";
    for (std::string line; std::getline(in, line);) {
        auto f = fields(line);
        if (f.size() <= pid_index) continue;
        char* end;
        long v = std::strtol(f[pid_index].c_str(), &end, 10);
        if (*end != '\0') continue;
        if (std::find(pids->begin(), pids->end(), static_cast<pid_t>(v)) != pids->end())
            std::cout << line << "\n";
    }
    return 0;
}

}  // namespace forkbox::cmd
