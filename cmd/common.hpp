// Shared by the verb files: global options, verb flag parsing, error reporting.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/container/state.hpp"

namespace forkbox::cmd {

namespace po = boost::program_options;

// The heap a create (or run) starts with (prefault::reserve_heap): glibc's first ~132 KiB
// ran out on the PVM guest ~10 pages short, a fault each.
constexpr size_t kCreateHeap = 256 << 10;

struct Globals {
    std::string root;
    std::string log_file;
    std::string log_format = "text";
    bool debug = false;
    bool systemd_cgroup = false;
    std::string zygote_socket;  // zygote mode on (--zygote, FORKBOX_ZYGOTE=1), else empty
    StateStore store() const { return StateStore(root); }
};

// Parses a verb's arguments; --help prints usage and sets help_shown.
struct VerbParser {
    VerbParser(const char* usage, const char* summary) : usage_(usage), summary_(summary), desc_("Options") {
        desc_.add_options()("help,h", "show help");
    }
    po::options_description_easy_init add() { return desc_.add_options(); }
    VerbParser& positional(const char* name, int count) {
        pos_.add(name, count);
        return *this;
    }
    // True when arg ("--name" or "-n") names one of the options that take a value.
    bool takes_value(const std::string& arg) const {
        const po::option_description* d = nullptr;
        if (arg.starts_with("--")) d = desc_.find_nothrow(arg.substr(2), false);
        else if (arg.size() == 2 && arg[0] == '-') d = desc_.find_nothrow(arg, false);
        return d && d->semantic()->max_tokens() > 0;
    }
    // Returns false when --help was shown (exit 0).
    bool parse(const std::vector<std::string>& args, po::variables_map& vm);
    void print_help() const;

private:
    const char* usage_;
    const char* summary_;
    po::options_description desc_;
    po::positional_options_description pos_;
};

// Prints "forkbox: <msg>" on stderr (and logs it at error level to --log); returns 1.
int report(const Error& e);
int report(const std::string& msg);

// `path` made absolute against the current directory: a daemon resolves what it is sent
// from its own.
std::string absolute_from_cwd(const std::string& path);

// Requires exactly the container id as positional argument.
std::string require_id(const po::variables_map& vm, const char* verb);

using Verb = int (*)(const Globals&, const std::vector<std::string>&);
int cmd_create(const Globals&, const std::vector<std::string>&);
int cmd_start(const Globals&, const std::vector<std::string>&);
int cmd_run(const Globals&, const std::vector<std::string>&);
int cmd_sandbox(const Globals&, const std::vector<std::string>&);
int cmd_state(const Globals&, const std::vector<std::string>&);
int cmd_kill(const Globals&, const std::vector<std::string>&);
int cmd_delete(const Globals&, const std::vector<std::string>&);
int cmd_list(const Globals&, const std::vector<std::string>&);
int cmd_spec(const Globals&, const std::vector<std::string>&);
int cmd_features(const Globals&, const std::vector<std::string>&);
int cmd_update(const Globals&, const std::vector<std::string>&);
int cmd_pause(const Globals&, const std::vector<std::string>&);
int cmd_resume(const Globals&, const std::vector<std::string>&);
int cmd_ps(const Globals&, const std::vector<std::string>&);
int cmd_exec(const Globals&, const std::vector<std::string>&);
int cmd_daemon(const Globals&, const std::vector<std::string>&);
int cmd_events(const Globals&, const std::vector<std::string>&);

// Thrown for usage errors inside verbs (caught in main, exit 1).
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace forkbox::cmd
