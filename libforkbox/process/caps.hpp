// Capabilities (libcap): the five sets of process.capabilities.
#pragma once

#include <cstdint>

#include "libforkbox/base/error.hpp"
#include "oci/spec.hpp"

namespace forkbox {

struct CapabilitySets {
    uint64_t bounding = 0, effective = 0, permitted = 0, inheritable = 0, ambient = 0;
};

// Names -> bit masks (pure). Unknown names are an error naming the set.
Result<CapabilitySets> capability_sets(const oci::Capabilities& caps);

// Whether this thread holds every capability of `mask` (bits: 1 << CAP_*) in its effective set.
bool holds_capabilities(uint64_t mask);

// Drops every capability not in `keep` from the bounding set (needs CAP_SETPCAP).
Result<void> drop_bounding_set(uint64_t keep);

// Sets effective/permitted/inheritable, then the ambient set. Call after the uid change.
Result<void> apply_capabilities(const CapabilitySets& sets);

}  // namespace forkbox
