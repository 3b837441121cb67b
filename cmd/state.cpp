#include <iostream>

#include "cmd/common.hpp"
#include "libforkbox/container/container.hpp"

namespace forkbox::cmd {

int cmd_state(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("state <container-id>", "Print the state of a container as JSON.");
    p.add()("id", po::value<std::string>(), "container id");
    p.positional("id", 1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    auto info = container_info(g.store(), require_id(vm, "state"));
    if (!info) return report(info.error());
    std::cout << state_document(*info, true) << "\n";
    return 0;
}

}  // namespace forkbox::cmd
