#include "cmd/common.hpp"
#include "libforkbox/container/container.hpp"

namespace forkbox::cmd {

int cmd_start(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("start <container-id>", "Start the process of a created container.");
    p.add()("id", po::value<std::string>(), "container id");
    p.positional("id", 1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    auto r = start_container(g.store(), require_id(vm, "start"));
    if (!r) return report(r.error());
    return 0;
}

}  // namespace forkbox::cmd
