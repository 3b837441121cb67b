// The linux.seccomp profile `forkbox spec` writes: Docker's and podman's default profile in
// spirit. An allowlist (anything else fails with EPERM) in which the syscalls that only do
// something with a capability are allowed exactly when the process's bounding set has it, so
// the template's three capabilities leave mount, unshare, setns, ptrace, bpf, module loading,
// reboot and the like out. Some syscalls are never allowed: kexec, keyrings (not namespaced),
// userfaultfd, swapon/swapoff, io_uring.
#pragma once

#include <string>
#include <vector>

#include "libforkbox/base/json.hpp"
#include "oci/spec.hpp"

namespace forkbox::oci {

// The architectures a profile names: the native one plus the ABIs its kernel also runs
// (x86_64: i386 and x32; aarch64: 32-bit arm). A profile for one family says nothing about
// the others' syscalls.
enum class SeccompArchFamily { X86_64, AArch64, Other };

// The family this binary was built for.
SeccompArchFamily native_seccomp_arch_family();

// Pure: the default profile for a process whose bounding set is `capabilities` (spec names,
// "CAP_SYS_ADMIN").
Seccomp default_seccomp(const std::vector<std::string>& capabilities, SeccompArchFamily arch);

// Writes a profile as the spec's linux.seccomp object (the current key is its value). Every
// field is written: the seccomp cache keys compiled programs by this text.
void write_seccomp_json(json::Writer& w, const Seccomp& seccomp);

}  // namespace forkbox::oci
