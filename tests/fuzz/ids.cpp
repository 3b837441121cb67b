// Container ids and container paths: validate_container_id (every verb's id, which becomes
// one directory name under --root), container_id_for_bundle (`run BUNDLE/`) and
// clean_container_path (mount destinations, masked paths, sandbox binds). Properties: an
// accepted id is one safe path element; a bundle's id is always accepted; a cleaned path is
// absolute, has no empty, "." or ".." component, and cleaning it again changes nothing.
#include "libforkbox/container/state.hpp"
#include "libforkbox/plan/plan.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace forkbox;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string text(fuzz::as_text(data, size));

    if (validate_container_id(text)) {
        FUZZ_CHECK(!text.empty() && text.size() <= 1024 && text != "." && text != "..", text);
        for (unsigned char c : text) FUZZ_CHECK(c > ' ' && c < 0x7f && c != '/' && c != '\\', text);
    }
    std::string id = container_id_for_bundle(text, "3f9c2a71");
    FUZZ_CHECK(validate_container_id(id), id);

    std::string clean = clean_container_path(text);
    FUZZ_CHECK(!clean.empty() && clean[0] == '/', clean);
    FUZZ_CHECK(clean == "/" || clean.back() != '/', clean);
    FUZZ_CHECK(clean.find("//") == std::string::npos, clean);
    for (std::string_view bad : {"/./", "/../"}) FUZZ_CHECK((clean + "/").find(bad) == std::string::npos, clean);
    FUZZ_CHECK(clean_container_path(clean) == clean, clean);
    return 0;
}
