// The zygote protocol (zygote/zygote.hpp), both directions: the daemon's request decoder
// (decode_request, with its id maps and cgroup parent), the client's reply decoder
// (decode_reply) and the spare cgroup names. Properties: what decodes encodes to a message
// that decodes to the same; a cgroup parent or a spare name never climbs out of its
// directory.
#include "libforkbox/zygote/zygote.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace forkbox;
using namespace forkbox::zygote;

namespace {

bool same(const Request& a, const Request& b) {
    return a.op == b.op && a.key == b.key && a.cgroup_parent == b.cgroup_parent &&
           a.rootfs_fingerprint == b.rootfs_fingerprint && a.rootfs_bundle == b.rootfs_bundle && a.id_maps == b.id_maps;
}

bool same(const Reply& a, const Reply& b) {
    return a.key == b.key && a.spare == b.spare && a.rootfs == b.rootfs && a.v1_cgroups_bound == b.v1_cgroups_bound &&
           a.device_program == b.device_program;
}

bool no_dot_components(std::string_view p) {
    return p.find("/../") == std::string_view::npos && !p.ends_with("/..") && p.find("/./") == std::string_view::npos &&
           !p.ends_with("/.");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text = fuzz::as_text(data, size);

    if (auto req = decode_request(text)) {
        FUZZ_CHECK(req->op == Request::Op::Stats || req->key != 0, "a take without a key");
        if (!req->cgroup_parent.empty()) {
            FUZZ_CHECK(req->cgroup_parent[0] == '/' && no_dot_components(req->cgroup_parent), req->cgroup_parent);
            FUZZ_CHECK(req->cgroup_parent.find_first_of(std::string_view(" \n\0", 3)) == std::string::npos,
                       req->cgroup_parent);
        }
        if (!req->rootfs_bundle.empty()) FUZZ_CHECK(req->rootfs_bundle[0] == '/', req->rootfs_bundle);
        std::string wire = encode_request(*req);
        auto again = decode_request(wire);
        FUZZ_CHECK(again && same(*req, *again), wire);
    }

    if (auto reply = decode_reply(text)) {
        if (!reply->spare.empty()) {
            FUZZ_CHECK(valid_spare_name(reply->spare), reply->spare);
            FUZZ_CHECK(reply->spare.find('/') == std::string::npos && reply->spare != "..", reply->spare);
        }
        std::string wire = encode_reply(*reply);
        auto again = decode_reply(wire);
        FUZZ_CHECK(again && same(*reply, *again), wire);
    }

    if (auto maps = decode_id_maps(text)) {
        std::string wire = encode_id_maps(maps->uids, maps->gids);
        auto again = decode_id_maps(wire);
        FUZZ_CHECK(again && encode_id_maps(again->uids, again->gids) == wire, wire);
    }

    if (valid_spare_name(text)) FUZZ_CHECK(text.find('/') == std::string_view::npos, std::string(text));
    (void)spare_owner(text);
    (void)cgroup_parent(std::string(text));
    return 0;
}
