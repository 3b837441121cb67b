// The runtime-spec features document (features.md, features-linux.md) that `forkbox features`
// prints: what this build of forkbox recognizes and implements, independent of the host.
#pragma once

#include <string>

namespace forkbox {

// Pretty-printed JSON, ending in a newline. Only what forkbox really implements is claimed:
// seccomp, AppArmor, SELinux, Intel RDT and idmapped mounts report enabled=false.
std::string features_json();

}  // namespace forkbox
