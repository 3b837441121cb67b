// `update`'s inputs: a linux.resources document (--resources FILE), a memory size
// (--memory 64m) and, for `events --interval`, a Go duration ("1m30s"). Every input goes
// to all three. Properties: cgroup writes name files in the container's cgroup directory,
// never paths; a size is at least -1; a duration written back in nanoseconds parses to the
// same value.
#include <string>

#include "libforkbox/base/clock.hpp"
#include "libforkbox/cgroup/resources.hpp"
#include "oci/parse.hpp"
#include "tests/fuzz/cgroup_writes.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace forkbox;

namespace {

void check_resources(std::string_view text) {
    auto resources = oci::parse_resources_json(text);
    if (!resources) return;
    fuzz::check_cgroup_writes(*resources);
    if (resources->memory && resources->memory->limit)
        (void)memory_swap_to_v2(resources->memory->swap.value_or(0), *resources->memory->limit);
}

void check_size(std::string_view text) {
    auto bytes = parse_memory_size(text);
    if (bytes) FUZZ_CHECK(*bytes >= -1, std::string(text) + " -> " + std::to_string(*bytes));
}

void check_duration(std::string_view text) {
    auto d = parse_go_duration(text);
    if (!d) return;
    std::string ns = std::to_string(d->count()) + "ns";
    auto again = parse_go_duration(ns);
    FUZZ_CHECK(again && *again == *d, std::string(text) + " -> " + ns);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text = fuzz::as_text(data, size);
    check_resources(text);
    if (size <= 256) {
        check_size(text);
        check_duration(text);
    }
    return 0;
}
