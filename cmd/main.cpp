// forkbox: an OCI runtime shaped like runc. Global flags come before the verb.
#include <seccomp.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <csignal>
#include <iostream>
#include <map>
#include <string_view>

#include "cmd/common.hpp"
#include "libforkbox/base/log.hpp"
#include "libforkbox/base/prefault.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/process/rootless.hpp"
#include "libforkbox/zygote/zygote.hpp"
#include "oci/spec.hpp"

using namespace forkbox;
using namespace forkbox::cmd;

namespace {

const char* kUsage = R"(forkbox - a fast OCI container runtime

Usage: forkbox [global options] <command> [command options] [arguments...]

Commands:
  create     create a container
  start      start the process of a created container
  run        create and start a container, and wait for it
  exec       run a new process inside a running container
  state      print the state of a container
  kill       send a signal to a container's init (or every process with --all)
  pause      suspend every process of a running container
  resume     resume a paused container
  ps         list the processes of a container
  delete     delete a container and everything it holds
  list       list containers
  spec       write a default config.json
  features   print the runtime-spec features this runtime applies
  update     change the cgroup limits of a container
  events     print a container's resource usage and OOM events
  daemon     serve sandboxes, and warm namespace templates for zygote mode
  sandbox    run a command in a fresh sandbox of the running daemon

Global options:
  --root DIR               state directory (default /run/forkbox; rootless: $XDG_RUNTIME_DIR/forkbox)
  --log FILE               log file (default: stderr)
  --log-format text|json   log format (default text)
  --debug                  log debug messages
  --systemd-cgroup         create: the container's cgroup is a systemd unit (cgroupsPath slice:prefix:name)
  --zygote[=SOCKET]        create/run from the zygote daemon's warm templates (cold path if none)
  --version, -v            print the version
  --help, -h               show this help
)";

int print_version() {
    const scmp_version* v = seccomp_version();
    std::cout << "forkbox version " << FORKBOX_VERSION << "\n"
              << "commit: " << FORKBOX_COMMIT << "\n"
              << "spec: " << oci::kSpecVersion << "\n"
              << "libseccomp: " << v->major << "." << v->minor << "." << v->micro << "\n";
    return 0;
}

// Global options, in runc's spelling; both --flag=value and --flag value.
struct GlobalFlag {
    const char* name;
    bool takes_value;
};
constexpr GlobalFlag kGlobalFlags[] = {
    {"root", true},   {"log", true},      {"log-format", true}, {"debug", false},
    {"systemd-cgroup", false}, {"criu", true}, {"rootless", true},   {"help", false},
    {"version", false}, {"h", false}, {"v", false}, {"zygote", false},
};

}  // namespace

int main(int argc, char** argv) {
    // A hook that does not read its stdin, or a closed stdout, is an EPIPE to handle, not a
    // reason to die. Container processes and hooks get default dispositions back
    // (reset_signal_dispositions), so this stays with forkbox itself.
    ::signal(SIGPIPE, SIG_IGN);
    trace::open_from_env();
    trace::mark("main");
    if (trace::fd() >= 0) {
        char line[96];
        auto costs = prefault::measured();
        std::snprintf(line, sizeof line, "prefault: %s (fault %llu, populate %llu ticks)",
                      prefault::pays() ? "bulk" : "faults", static_cast<unsigned long long>(costs.fault),
                      static_cast<unsigned long long>(costs.populate));
        trace::mark(line);
    }
    Globals g;
    std::string rootless;
    int i = 1;
    for (; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--") {
            ++i;
            break;
        }
        if (a.size() < 2 || a[0] != '-') break;
        std::string_view body = a.substr(a[1] == '-' ? 2 : 1);
        std::string_view name = body, value;
        bool has_value = false;
        if (auto eq = body.find('='); eq != std::string_view::npos) {
            name = body.substr(0, eq);
            value = body.substr(eq + 1);
            has_value = true;
        }
        const GlobalFlag* flag = nullptr;
        for (const auto& f : kGlobalFlags)
            if (name == f.name) flag = &f;
        if (!flag) {
            std::cerr << "forkbox: unknown global option " << a << "\n";
            return 1;
        }
        if (flag->takes_value && !has_value) {
            if (i + 1 >= argc) {
                std::cerr << "forkbox: option " << a << " needs a value\n";
                return 1;
            }
            value = argv[++i];
        }
        if (name == "root") g.root = std::string(value);
        else if (name == "log") g.log_file = std::string(value);
        else if (name == "log-format") g.log_format = std::string(value);
        else if (name == "debug") g.debug = !has_value || value == "true";
        else if (name == "systemd-cgroup") g.systemd_cgroup = !has_value || value == "true";
        else if (name == "rootless") rootless = std::string(value);
        else if (name == "zygote") g.zygote_socket = has_value ? std::string(value) : zygote::default_socket_path();
        else if (name == "help" || name == "h") {
            std::cout << kUsage;
            return 0;
        } else if (name == "version" || name == "v") {
            return print_version();
        }
    }
    if (g.log_format != "text" && g.log_format != "json") {
        std::cerr << "forkbox: unknown log-format \"" << g.log_format << "\"\n";
        return 1;
    }
    log::configure(g.log_file, g.log_format == "json", g.debug);
    // Only without --root: telling root in a user namespace apart costs a read of /proc.
    if (g.root.empty()) g.root = default_state_root();
    if (const char* z = std::getenv("FORKBOX_ZYGOTE"); g.zygote_socket.empty() && z && std::string_view(z) == "1")
        g.zygote_socket = zygote::default_socket_path();
    if (i >= argc) {
        std::cout << kUsage;
        return 0;
    }
    std::string verb = argv[i];
    std::vector<std::string> args(argv + i + 1, argv + argc);

    static const std::map<std::string_view, Verb> verbs = {
        {"create", cmd_create}, {"start", cmd_start},   {"run", cmd_run},
        {"state", cmd_state},   {"kill", cmd_kill},     {"delete", cmd_delete},
        {"list", cmd_list},     {"spec", cmd_spec},     {"features", cmd_features},
        {"pause", cmd_pause},   {"resume", cmd_resume}, {"ps", cmd_ps},
        {"update", cmd_update}, {"exec", cmd_exec},     {"events", cmd_events},
        {"daemon", cmd_daemon},
        {"sandbox", cmd_sandbox},
    };
    // runc verbs that later issues build: fail loudly rather than pretend.
    static const char* not_yet[] = {"checkpoint", "restore"};
    auto it = verbs.find(verb);
    if (it == verbs.end()) {
        for (const char* n : not_yet)
            if (verb == n) return report("\"" + verb + "\" is not implemented yet");
        std::cerr << "forkbox: no such command: " << verb << "\n";
        return 1;
    }
    // Only create and run make cgroups; the other verbs find the driver in state.json (podman
    // and conmon pass the flag to create alone), and accept it as runc does.
    if (!rootless.empty() && rootless != "false" && rootless != "auto" && ::geteuid() == 0)
        log::debug("--rootless=" + rootless + " ignored when running as root");
    try {
        int rc = it->second(g, args);
        trace::mark("exit");
        return rc;
    } catch (const UsageError& e) {
        return report(e.what());
    } catch (const po::error& e) {
        return report(verb + ": " + e.what());
    } catch (const std::exception& e) {
        return report(verb + ": " + e.what());
    }
}
