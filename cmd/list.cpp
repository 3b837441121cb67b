#include <iomanip>
#include <iostream>

#include "cmd/common.hpp"
#include "libforkbox/base/json.hpp"
#include "libforkbox/container/container.hpp"

namespace forkbox::cmd {

int cmd_list(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("list [--format table|json] [--quiet]", "List the containers under --root.");
    std::string format;
    bool quiet = false;
    p.add()("format,f", po::value(&format)->default_value("table"), "table or json")(
        "quiet,q", po::bool_switch(&quiet), "print only the ids");
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    if (format != "table" && format != "json") return report("invalid format option \"" + format + "\"");
    auto list = list_containers(g.store());
    if (!list) return report(list.error());
    if (quiet) {
        for (const auto& c : *list) std::cout << c.state.id << "\n";
        return 0;
    }
    if (format == "json") {
        std::string out = "[";
        for (size_t i = 0; i < list->size(); ++i) {
            if (i) out += ",";
            out += state_document((*list)[i], false);
        }
        std::cout << out << "]\n";
        return 0;
    }
    // Columns as runc's tabwriter prints them: width of the widest cell plus 3 spaces.
    std::vector<std::array<std::string, 6>> rows;
    rows.push_back({"ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"});
    for (const auto& c : *list) {
        rows.push_back({c.state.id, std::to_string(c.status == Status::Stopped ? 0 : c.state.pid),
                        status_name(c.status), c.state.bundle, c.state.created, c.state.owner});
    }
    std::array<size_t, 6> width{};
    for (const auto& r : rows)
        for (size_t i = 0; i < 6; ++i) width[i] = std::max(width[i], std::max<size_t>(r[i].size(), 9));
    for (const auto& r : rows) {
        std::string line;
        for (size_t i = 0; i < 6; ++i) {
            line += r[i];
            if (i < 5) line.append(width[i] + 3 - r[i].size(), ' ');
        }
        std::cout << line << "\n";
    }
    return 0;
}

}  // namespace forkbox::cmd
