#include "cmd/common.hpp"
#include "libforkbox/base/prefault.hpp"
#include "libforkbox/container/container.hpp"

namespace forkbox::cmd {

namespace {
CreationRemains* left_to_exit = nullptr;
}  // namespace

int cmd_create(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("create [command options] <container-id>",
                 "Create a container from a bundle; its process waits until `start`.");
    CreateOptions o;
    p.add()("bundle,b", po::value(&o.bundle)->default_value("."), "path to the bundle directory")(
        "pid-file", po::value(&o.pid_file), "write the init pid to this file")(
        "console-socket", po::value(&o.console_socket), "unix socket receiving the pty master")(
        "pidfd-socket", po::value(&o.pidfd_socket), "unix socket receiving a pidfd of the container's init")(
        "no-pivot", po::bool_switch(&o.no_pivot), "use MS_MOVE + chroot instead of pivot_root")(
        "no-new-keyring", po::bool_switch(&o.no_new_keyring), "do not create a session keyring")(
        "preserve-fds", po::value(&o.preserve_fds)->default_value(0), "pass this many fds after stdio")(
        "id", po::value<std::string>(), "container id");
    p.positional("id", 1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    o.id = require_id(vm, "create");
    o.zygote_socket = g.zygote_socket;
    o.systemd_cgroup = g.systemd_cgroup;
    prefault::reserve_heap(kCreateHeap);
    std::unique_ptr<CreationRemains> remains;
    auto r = create_container(g.store(), o, nullptr, &remains);
    if (!r) return report(r.error());
    // Freed by our exit, at once (see CreationRemains); reachable meanwhile, not leaked.
    left_to_exit = remains.release();
    return 0;
}

}  // namespace forkbox::cmd
