// The sandbox protocol as the daemon reads it (sandbox/request.hpp): the first message
// ("sandbox/1 run\n{...}") split, the run and file requests parsed (the run with the
// daemon's defaults), and the release an embryo decodes (sandbox/embryo.hpp). Properties: a
// parsed request has a command, an absolute cwd and mounts only where a sandbox may have
// them; its release reaches the embryo unchanged; a release that decodes encodes to one that
// decodes the same; a file request's paths are clean and reach the sandbox unchanged.
#include <stdexcept>

#include "libforkbox/plan/plan.hpp"
#include "libforkbox/sandbox/embryo.hpp"
#include "libforkbox/sandbox/request.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace forkbox;
using namespace forkbox::sandbox;

namespace {

bool has_nul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

// The words after "export" in warm_shell_environment's text, unquoted: '...' and \'.
std::vector<std::string> exported_words(const std::string& text) {
    std::vector<std::string> words;
    size_t at = text.find("; export ");
    if (at == std::string::npos) return words;
    std::string word;
    bool quoted = false;
    for (size_t i = at + 9; i < text.size(); ++i) {
        char c = text[i];
        if (quoted) {
            if (c == '\'') quoted = false;
            else word += c;
        } else if (c == '\'') {
            quoted = true;
        } else if (c == '\\' && i + 1 < text.size()) {
            word += text[++i];
        } else if (c == ' ' || c == ';') {
            if (!word.empty()) words.push_back(word);
            word.clear();
            if (c == ';') break;
        } else {
            word += c;
        }
    }
    return words;
}

void check_request(const RunRequest& r) {
    FUZZ_CHECK(!r.argv.empty() && !r.argv[0].empty(), "no command");
    for (const auto& a : r.argv) FUZZ_CHECK(!has_nul(a), "argv with NUL");
    for (const auto& e : r.env) FUZZ_CHECK(!has_nul(e) && e.find('=') != std::string::npos, "env " + e);
    FUZZ_CHECK(!r.cwd.empty() && r.cwd[0] == '/' && !has_nul(r.cwd), "cwd " + r.cwd);
    for (const auto& m : r.mounts) {
        FUZZ_CHECK(clean_container_path(m.destination) == m.destination, "mount destination " + m.destination);
        FUZZ_CHECK(m.destination != "/" && m.destination != "/proc" && !m.destination.starts_with("/proc/") &&
                       m.destination != "/dev" && !m.destination.starts_with("/dev/"),
                   "mount destination " + m.destination);
        FUZZ_CHECK(!m.source.empty() && m.source[0] == '/', "mount source " + m.source);
    }
    FUZZ_CHECK(r.max_output > 0 && r.max_output <= kMaxOutputLimit, "max_output");

    Release release;
    release.argv = r.argv;
    release.env = r.env;
    release.cwd = r.cwd;
    release.nproc_limit = r.pids;
    release.address_limit = r.memory_mb << 20;
    release.drop_all_caps = r.drop_all_caps;
    auto decoded = Release::decode(release.encode());
    FUZZ_CHECK(decoded && *decoded == release, "the release of a request does not decode to itself");
    // The warm shell's environment: its export, read back as a shell reads its words, is
    // the request's environment, every value whole.
    if (auto made = warm_shell_environment(r.env)) {
        FUZZ_CHECK(made->empty() == (r.env == kDefaultEnv), "the default environment is not the warm shell's own");
        if (!made->empty()) FUZZ_CHECK(exported_words(*made) == r.env, "the warm shell's export is not the environment");
    }
}

// A file verb: its paths clean and absolute, `to` for a rename alone, and what the service
// sends the sandbox's init decodes to the same request.
void check_file_request(const FileRequest& f) {
    auto clean = [](const std::string& p) { return check_sandbox_path(p).value_or("") == p; };
    FUZZ_CHECK(clean(f.path), "file path " + f.path);
    FUZZ_CHECK((f.op == FileOp::Rename) == !f.to.empty(), "rename's new path");
    FUZZ_CHECK(f.to.empty() || clean(f.to), "rename to " + f.to);
    auto decoded = FileRequest::decode(f.encode());
    FUZZ_CHECK(decoded && *decoded == f, "a file request does not decode to itself");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text = fuzz::as_text(data, size);
    if (auto first = split_first_message(text)) {
        Defaults defaults;
        if (first->verb == "file") {
            if (auto f = parse_file_request(first->body)) check_file_request(f->file);
        }
        if (first->verb == "run") {
            if (auto r = parse_run_request(first->body, defaults)) check_request(*r);
            defaults.max_timeout_ms = 1000;
            if (auto r = parse_run_request(first->body, defaults))
                FUZZ_CHECK(r->timeout_ms && *r->timeout_ms <= 1000, "timeout above the daemon's maximum");
        }
    } else if (!looks_like_sandbox_message(text)) {
        // Not a first message: as a release (the tag byte taken off).
        if (auto release = Release::decode(text)) {
            auto again = Release::decode(release->encode());
            FUZZ_CHECK(again && *again == *release, "a decoded release does not round-trip");
        }
    }
    return 0;
}
