#include "cmd/common.hpp"
#include "libforkbox/container/container.hpp"

namespace forkbox::cmd {

int cmd_run(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("run [command options] <container-id>",
                 "Create and start a container and wait for it; exits with its exit code.");
    RunOptions o;
    p.add()("bundle,b", po::value(&o.create.bundle)->default_value("."), "path to the bundle directory")(
        "pid-file", po::value(&o.create.pid_file), "write the init pid to this file")(
        "console-socket", po::value(&o.create.console_socket), "unix socket receiving the pty master")(
        "detach,d", po::bool_switch(&o.detach), "do not wait for the container")(
        "keep", po::bool_switch(&o.keep), "do not delete the container after it exits")(
        "no-pivot", po::bool_switch(&o.create.no_pivot), "use MS_MOVE + chroot instead of pivot_root")(
        "no-new-keyring", po::bool_switch(&o.create.no_new_keyring), "do not create a session keyring")(
        "preserve-fds", po::value(&o.create.preserve_fds)->default_value(0), "pass this many fds after stdio")(
        "id", po::value<std::string>(), "container id");
    p.positional("id", 1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    o.create.id = require_id(vm, "run");
    o.create.zygote_socket = g.zygote_socket;
    auto r = run_container(g.store(), o);
    if (!r) return report(r.error());
    return *r;
}

}  // namespace forkbox::cmd
