#include "cmd/common.hpp"
#include "libforkbox/container/container.hpp"

namespace forkbox::cmd {

int cmd_pause(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("pause <container-id>", "Suspend every process of a running container (cgroup freezer).");
    p.add()("id", po::value<std::string>(), "container id");
    p.positional("id", 1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    auto r = pause_container(g.store(), require_id(vm, "pause"));
    if (!r) return report(r.error());
    return 0;
}

}  // namespace forkbox::cmd
