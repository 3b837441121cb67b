#include "cmd/common.hpp"
#include "libforkbox/base/log.hpp"
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
    std::string id = require_id(vm, "delete");
    auto r = delete_container(g.store(), id, force);
    if (!r) return report(r.error());
    // For the record of a `run BUNDLE/`'s guardian (which asks for --debug) after the run
    // died; an ordinary delete writes nothing more.
    log::debug("delete: removed container " + id + (force ? " (--force)" : ""));
    return 0;
}

}  // namespace forkbox::cmd
