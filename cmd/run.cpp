#include <sys/stat.h>

#include <cstdlib>

#include "cmd/common.hpp"
#include "libforkbox/base/clock.hpp"
#include "libforkbox/base/log.hpp"
#include "libforkbox/base/prefault.hpp"
#include "libforkbox/container/container.hpp"
#include "libforkbox/container/events.hpp"

namespace forkbox::cmd {

namespace {

bool has_config(const std::string& dir) {
    struct stat st;
    return ::stat((dir + "/config.json").c_str(), &st) == 0;
}

// `forkbox run PATH/` (the CI use): an argument with a '/', or one that cannot be an id and
// names a directory holding a config.json, is a bundle. A valid id keeps runc's meaning,
// even when a directory of that name holds a config.json.
bool names_a_bundle(const std::string& arg) {
    if (arg.find('/') != std::string::npos) return true;
    if (validate_container_id(arg)) return false;
    return has_config(arg);
}

// The bundle directory's own name: "." and "app/" name their directories.
std::string bundle_name(const std::string& path) {
    std::string p = path;
    if (char* real = ::realpath(path.c_str(), nullptr)) {
        p = real;
        std::free(real);
    }
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    auto slash = p.find_last_of('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

int cmd_run(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("run [command options] <container-id> | <bundle-path>",
                 "Create and start a container and wait for it; exits with its exit code.\n"
                 "Given a path to a bundle (it holds a '/', as in `forkbox run bundle/`), the container\n"
                 "gets a generated id and lives only as long as the run.");
    RunOptions o;
    std::string timeout;
    bool no_subreaper = false;
    p.add()("bundle,b", po::value(&o.create.bundle)->default_value("."), "path to the bundle directory")(
        "pid-file", po::value(&o.create.pid_file), "write the init pid to this file")(
        "console-socket", po::value(&o.create.console_socket), "unix socket receiving the pty master")(
        "pidfd-socket", po::value(&o.create.pidfd_socket), "unix socket receiving a pidfd of the container's init")(
        "detach,d", po::bool_switch(&o.detach), "do not wait for the container")(
        "keep", po::bool_switch(&o.keep), "do not delete the container after it exits")(
        "no-subreaper", po::bool_switch(&no_subreaper), "disable the use of the subreaper used to reap reparented processes")(
        "timeout", po::value(&timeout),
        "kill the container after this long (a Go duration: 30s, 1m30s) and exit 124")(
        "no-pivot", po::bool_switch(&o.create.no_pivot), "use MS_MOVE + chroot instead of pivot_root")(
        "no-new-keyring", po::bool_switch(&o.create.no_new_keyring), "do not create a session keyring")(
        "preserve-fds", po::value(&o.create.preserve_fds)->default_value(0), "pass this many fds after stdio")(
        "id", po::value<std::string>(), "container id, or a path to a bundle");
    p.positional("id", 1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    std::string arg = require_id(vm, "run");
    o.subreaper = !no_subreaper;
    bool bundle_given = !vm["bundle"].defaulted();
    if (!timeout.empty()) {
        auto d = parse_go_duration(timeout);
        if (!d) return report("invalid value \"" + timeout + "\" for flag -timeout: parse error");
        if (d->count() <= 0) return report("duration timeout must be greater than 0");
        o.timeout = *d;
    }
    if (!bundle_given && names_a_bundle(arg)) {
        o.create.bundle = arg;
        o.create.id = container_id_for_bundle(bundle_name(arg), random_id_suffix());
        o.ephemeral = true;
        // What the guardian execs if this process dies unannounced: this binary, the same
        // state root and log, `delete --force` of the container.
        o.cleanup_command = {"/proc/self/exe", "--root", g.root};
        if (!g.log_file.empty())
            o.cleanup_command.insert(o.cleanup_command.end(), {"--log", g.log_file, "--log-format", g.log_format, "--debug"});
        o.cleanup_command.insert(o.cleanup_command.end(), {"delete", "--force", o.create.id});
        log::info("run: bundle " + arg + " as container " + o.create.id);
    } else {
        o.create.id = arg;
    }
    o.create.zygote_socket = g.zygote_socket;
    o.create.systemd_cgroup = g.systemd_cgroup;
    prefault::reserve_heap(kCreateHeap);
    auto r = run_container(g.store(), o);
    if (!r) {
        // `forkbox run app` with ./app/config.json and none here: say how to mean the bundle.
        if (r.error().errnum() == ENOENT && !bundle_given && !o.ephemeral && has_config(arg) && !has_config("."))
            return report(r.error().what() + " (to run the bundle in ./" + arg + ", use `forkbox run " + arg + "/`)");
        return report(r.error());
    }
    return *r;
}

}  // namespace forkbox::cmd
