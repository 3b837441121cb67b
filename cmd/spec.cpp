#include <fcntl.h>
#include <unistd.h>

#include <iostream>

#include "cmd/common.hpp"
#include "oci/spec_template.hpp"

namespace forkbox::cmd {

int cmd_spec(const Globals&, const std::vector<std::string>& args) {
    VerbParser p("spec [--bundle DIR] [--rootless]", "Write a default config.json into the bundle.");
    std::string bundle;
    bool rootless = false;
    p.add()("bundle,b", po::value(&bundle)->default_value("."), "bundle directory")(
        "rootless", po::bool_switch(&rootless), "a config for a rootless container");
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    std::string path = bundle + "/config.json";
    if (::access(path.c_str(), F_OK) == 0) return report("File " + path + " exists. Remove it first");
    std::string text = oci::default_spec_json(rootless);
    unique_fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
    if (!fd) return report(Error(errno, "create " + path, true));
    if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        return report(Error(errno, "write " + path, true));
    return 0;
}

}  // namespace forkbox::cmd
