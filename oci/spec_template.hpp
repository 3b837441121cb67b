// The config.json that `forkbox spec` writes: runc's `runc spec` example (libcontainer/specconv
// Example and ToRootless), so bundles made for one runtime work with the other, plus a default
// linux.seccomp profile (oci/default_seccomp.hpp) that runc's template lacks.
#pragma once

#include <cstdint>
#include <string>

#include "oci/default_seccomp.hpp"

namespace forkbox::oci {

struct SpecTemplateOptions {
    bool rootless = false;
    // runc adds a cgroup namespace only on a cgroup v2 (unified) host.
    bool cgroup_namespace = false;
    // Host ids mapped to root in the container when rootless (runc: euid and egid).
    uint32_t host_uid = 0;
    uint32_t host_gid = 0;
    // Which architectures linux.seccomp names (and their own syscalls it allows).
    SeccompArchFamily arch = native_seccomp_arch_family();
};

// Pure: the template for the given options, pretty-printed with tabs like runc, ending in a
// newline.
std::string default_spec_json(const SpecTemplateOptions& options);

// The template for this host: the caller's euid/egid for the rootless maps, and a cgroup
// namespace when /sys/fs/cgroup is cgroup v2.
std::string default_spec_json(bool rootless);

}  // namespace forkbox::oci
