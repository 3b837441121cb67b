#include "cmd/common.hpp"
#include "libforkbox/container/container.hpp"
#include "oci/linux_names.hpp"

namespace forkbox::cmd {

int cmd_kill(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("kill [--all] <container-id> [signal]",
                 "Send a signal (default SIGTERM) to the container's init, or to all its processes.");
    bool all = false;
    p.add()("all,a", po::bool_switch(&all), "signal every process of the container")(
        "id", po::value<std::string>(), "container id")("signal", po::value<std::string>(), "signal");
    p.positional("id", 1).positional("signal", 1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    std::string id = require_id(vm, "kill");
    std::string name = vm.count("signal") ? vm["signal"].as<std::string>() : "SIGTERM";
    // Signal 0 is the liveness probe: delivered (checked) as runc does.
    auto sig = name == "0" ? std::optional<int>(0) : oci::signal_from_string(name);
    if (!sig) return report("invalid signal \"" + name + "\"");
    auto r = kill_container(g.store(), id, *sig, all);
    if (!r) return report(r.error());
    return 0;
}

}  // namespace forkbox::cmd
