#include "cmd/common.hpp"
#include "libforkbox/container/container.hpp"

namespace forkbox::cmd {

int cmd_delete(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("delete [--force] <container-id>",
                 "Delete a stopped (or created) container; --force kills a running one first.");
    bool force = false;
    p.add()("force,f", po::bool_switch(&force), "kill the container if it is running")(
        "id", po::value<std::string>(), "container id");
    p.positional("id", 1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    auto r = delete_container(g.store(), require_id(vm, "delete"), force);
    if (!r) return report(r.error());
    return 0;
}

}  // namespace forkbox::cmd
