// state.json as every verb reads it (ContainerDir::read_state). Properties: what parses
// serializes to a document that parses back to the same state, and the pid is the one the
// file names (a pid silently cut to 32 bits would name another process).
#include "libforkbox/base/json.hpp"
#include "libforkbox/container/state.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace forkbox;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text = fuzz::as_text(data, size);
    auto state = parse_state(text);
    if (!state) return 0;
    if (auto doc = json::Document::parse(text)) {
        if (auto pid = doc->root().get("pid")) {
            auto n = pid->as_int64();
            FUZZ_CHECK(n && *n == state->pid, "pid " + std::string(text.substr(0, 200)));
        }
    }
    std::string once = serialize_state(*state);
    auto again = parse_state(once);
    FUZZ_CHECK(again.has_value(), once + ": " + again.error().what());
    FUZZ_CHECK(serialize_state(*again) == once, once);
    return 0;
}
