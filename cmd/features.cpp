#include <iostream>

#include "cmd/common.hpp"
#include "libforkbox/features.hpp"

namespace forkbox::cmd {

int cmd_features(const Globals&, const std::vector<std::string>& args) {
    VerbParser p("features", "Print the runtime-spec features document: what forkbox applies.");
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    std::cout << features_json() << "\n";
    return 0;
}

}  // namespace forkbox::cmd
