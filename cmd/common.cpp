#include "cmd/common.hpp"

#include <unistd.h>

#include <climits>
#include <iostream>

#include "libforkbox/base/log.hpp"

namespace forkbox::cmd {

std::string absolute_from_cwd(const std::string& path) {
    if (path.empty() || path[0] == '/') return path;
    char cwd[PATH_MAX];
    if (!::getcwd(cwd, sizeof cwd)) return path;  // the daemon then refuses it as relative
    return std::string(cwd) + "/" + path;
}

bool VerbParser::parse(const std::vector<std::string>& args, po::variables_map& vm) {
    // No guessing from prefixes: runc takes whole flag names only, and a guess turns a
    // mistyped or unknown flag into another one (daemon --root meant --rootfs-after).
    auto style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    auto parsed = po::command_line_parser(args).options(desc_).positional(pos_).style(style).run();
    po::store(parsed, vm);
    if (vm.count("help")) {
        print_help();
        return false;
    }
    po::notify(vm);
    return true;
}

void VerbParser::print_help() const {
    std::cout << "Usage: forkbox " << usage_ << "\n\n" << summary_ << "\n\n" << desc_ << "\n";
}

int report(const Error& e) { return report(e.what()); }

int report(const std::string& msg) {
    log::error(msg);
    // With a log file the message went there; the caller still wants it on stderr.
    if (log::has_file()) std::cerr << "forkbox: " << msg << "\n";
    return 1;
}

std::string require_id(const po::variables_map& vm, const char* verb) {
    if (!vm.count("id")) throw UsageError(std::string("\"") + verb + "\" requires a container id");
    return vm["id"].as<std::string>();
}

}  // namespace forkbox::cmd
