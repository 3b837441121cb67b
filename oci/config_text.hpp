// Reading a config.json's text without parsing all of it. The seccomp profile is most of a
// typical config (a Docker-sized profile is ~11 KiB of 14), and parsing it only to find a
// compiled program that is already cached costs a create ~0.2 ms. Pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace forkbox::oci {

// A config's linux.seccomp member, found by scanning: the exact text of its value, and the
// config's text with the whole member (key, value and one separating comma) cut out.
struct SeccompMember {
    std::string_view profile;  // points into the scanned text
    std::string rest;
};

// nullopt when the config has no linux.seccomp, or when a scan cannot tell for sure which
// member the parser would take: a key written with an escape at the top level or in
// "linux", a repeated "linux" or "seccomp" key, or text that is not one JSON object. The
// caller then parses the whole text, which also reports any error.
std::optional<SeccompMember> split_seccomp_member(std::string_view config);

// linux.namespaces as a scan reads it, before the config is parsed: enough to begin making a
// network namespace while the parser runs. Only a hint: the Plan decides.
struct NamespaceHint {
    bool makes_network = false;  // a "network" entry without a path
    bool makes_user = false;     // a "user" entry without a path
    bool joins_any = false;      // an entry with a path
};

// nullopt when the scan cannot tell (the same rules as split_seccomp_member, and a "type" or
// "path" that is not a plain string).
std::optional<NamespaceHint> scan_namespaces(std::string_view config);

}  // namespace forkbox::oci
