
#include "cmd/common.hpp"
#include "libforkbox/container/container.hpp"

namespace forkbox::cmd {

namespace {

// Splits argv into [options..., id] and the command: everything after the container id is
// the command, even words that look like options (`exec ID sh -c 'echo hi'`).
std::pair<std::vector<std::string>, std::vector<std::string>> split_command(const VerbParser& p,
                                                                            const std::vector<std::string>& args) {
    std::vector<std::string> options, command;
    size_t i = 0;
    for (; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--") {
            ++i;
            break;
        }
        if (a.size() > 1 && a[0] == '-') {
            options.push_back(a);
            if (p.takes_value(a) && i + 1 < args.size()) options.push_back(args[++i]);
            continue;
        }
        options.push_back(a);  // the container id
        ++i;
        break;
    }
    // `exec [opts] -- ID cmd...`: the id follows the separator.
    if (!options.empty() && i > 0 && args[i - 1] == "--" && i < args.size()) options.push_back(args[i++]);
    command.assign(args.begin() + static_cast<long>(i), args.end());
    return {options, command};
}

}  // namespace

int cmd_exec(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("exec [command options] <container-id> <command> [args...] || -p process.json <container-id>",
                 "Run a new process inside a running container; exits with its exit code.");
    ExecOptions o;
    std::vector<std::string> additional_gids, env, caps;
    std::string cwd, user;
    bool tty = false;
    p.add()("process,p", po::value(&o.process_file), "path to a process.json (- for stdin)")(
        "console-socket", po::value(&o.console_socket), "unix socket receiving the pty master")(
        "pidfd-socket", po::value(&o.pidfd_socket), "unix socket receiving a pidfd of the process")(
        "cwd", po::value(&cwd), "working directory in the container")(
        "env,e", po::value(&env)->composing(), "set an environment variable (VAR=value)")(
        "tty,t", po::bool_switch(&tty), "allocate a pseudo-terminal")(
        "user,u", po::value(&user), "uid[:gid]")(
        "additional-gids,g", po::value(&additional_gids)->composing(), "additional gids")(
        "detach,d", po::bool_switch(&o.detach), "do not wait for the process")(
        "pid-file", po::value(&o.pid_file), "write the process's pid to this file")(
        "process-label", po::value(&o.process_label), "SELinux label (unsupported: an error when set)")(
        "apparmor", po::value(&o.apparmor), "AppArmor profile (unsupported: an error when set)")(
        "no-new-privs", po::bool_switch(&o.no_new_privs), "set no_new_privileges for the process")(
        "cap,c", po::value(&caps)->composing(), "add a capability to the process's sets")(
        "preserve-fds", po::value(&o.preserve_fds)->default_value(0), "pass this many fds after stdio")(
        "cgroup", po::value(&o.sub_cgroups)->composing(),
        "run in an existing sub-cgroup of the container's: [CONTROLLER[,CONTROLLER...]:]PATH, repeatable")(
        "ignore-paused", po::bool_switch(&o.ignore_paused),
        "exec into a paused container too: the process starts when the container is resumed")(
        "id", po::value<std::string>(), "container id");
    p.positional("id", 1);
    auto [options, command] = split_command(p, args);
    po::variables_map vm;
    if (!p.parse(options, vm)) return 0;
    o.id = require_id(vm, "exec");
    if (o.preserve_fds < 0) return report("--preserve-fds must not be negative");
    if (o.process_file.empty() && command.empty()) return report("exec: no command given (and no --process)");
    o.args = command;
    o.env = env;
    o.caps = caps;
    if (vm.count("cwd")) o.cwd = cwd;
    if (vm.count("user")) o.user = user;
    if (tty) o.tty = true;
    for (const auto& gid : additional_gids) {
        try {
            size_t end = 0;
            unsigned long v = std::stoul(gid, &end);
            if (end != gid.size() || v > 0xffffffffUL) throw std::invalid_argument(gid);
            o.additional_gids.push_back(static_cast<uint32_t>(v));
        } catch (const std::exception&) {
            return report("invalid additional gid \"" + gid + "\"");
        }
    }
    auto r = exec_container(g.store(), o);
    // runc's 255: exec itself failed before the process ran, so callers can tell it from
    // the process's own exit code (argument errors above stay 1, as runc's).
    if (!r) {
        report(r.error().wrap("exec failed"));
        return 255;
    }
    return *r;
}

}  // namespace forkbox::cmd
