// Checks of a parsed Spec before anything is created, in the spirit of runc's configs/validate:
// one checker per area, the first failure is returned and names the field
// ("process.capabilities.bounding: unknown capability \"CAP_FOO\""). Pure: no syscalls, so
// checks that need the host (does a namespace path point at the host's netns, is SELinux on)
// belong to the engine.
#pragma once

#include <string_view>

#include "libforkbox/base/error.hpp"
#include "oci/spec.hpp"

namespace forkbox::oci {

// Everything `create` / `run` needs: root and process present, names known, namespaces
// consistent with the settings that depend on them, paths absolute.
Result<void> validate(const Spec& spec);

// What a container needs when forkbox runs as an unprivileged user (runc's rootless
// checks, in its words): a user namespace, with uid and gid mappings unless it is joined by
// path; uid=/gid= mount options and additional gids that the mappings cover.
Result<void> validate_rootless(const Spec& spec);

// The process part alone, as `exec --process` uses it. `path` prefixes the error messages.
Result<void> validate_process(const Process& process, std::string_view path = "process");

}  // namespace forkbox::oci
