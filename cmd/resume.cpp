#include "cmd/common.hpp"
#include "libforkbox/container/container.hpp"

namespace forkbox::cmd {

int cmd_resume(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("resume <container-id>", "Resume every process of a paused container.");
    p.add()("id", po::value<std::string>(), "container id");
    p.positional("id", 1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    auto r = resume_container(g.store(), require_id(vm, "resume"));
    if (!r) return report(r.error());
    return 0;
}

}  // namespace forkbox::cmd
