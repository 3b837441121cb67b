// Compiled seccomp programs, cached under the state root. libseccomp 2.5 needs 5-25 ms to
// build and export a Docker-sized profile (about 370 syscalls for three x86 ABIs), more than
// the rest of the cold path together, and nearly every container brings the same profile.
//
// One file per profile in the root: ".seccomp=<FNV-1a of the key, 16 hex digits>" (`=` is no
// container id character, and `list` skips plain files). It holds a header, the key and the
// BPF. The key is the whole profile as JSON plus what else shapes the program (the forkbox
// binary, libseccomp version, kernel release, machine); a hit compares it byte for byte, so a hash
// collision is only a miss. Entries are written under a unique temporary name and renamed,
// so a reader never sees half of one; a failed cache write only costs the next create a
// compile. At most kSeccompCacheEntries files are kept (the oldest go first).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "libforkbox/base/error.hpp"
#include "libforkbox/seccomp/seccomp.hpp"
#include "oci/spec.hpp"

namespace forkbox {

inline constexpr size_t kSeccompCacheEntries = 32;

// Pure pieces, unit-tested.
// The cache key of a profile given as JSON text: the exact text of config.json's
// linux.seccomp value when it is known (oci::split_seccomp_member), which lets create find
// the program without parsing the profile, else the profile written out again.
// `environment` names the forkbox, libseccomp and kernel.
std::string seccomp_cache_key(std::string_view profile_json, std::string_view environment);
std::string seccomp_cache_key(const oci::Seccomp& seccomp, std::string_view environment);
// ".seccomp=" + 16 hex digits.
std::string seccomp_cache_file_name(std::string_view key);
std::string encode_seccomp_cache_entry(std::string_view key, const SeccompProgram& program);
// nullopt unless `data` is a whole entry for exactly this key.
std::optional<SeccompProgram> decode_seccomp_cache_entry(std::string_view data, std::string_view key);

// This process's environment line for seccomp_cache_key.
std::string seccomp_cache_environment();

// compile_seccomp, through the cache in `root` (the state root), keyed by `profile_json`
// (the profile's text in config.json; empty: the profile written out). A root that does not
// exist yet or cannot be written is not an error: the program is compiled and not cached.
Result<SeccompProgram> compile_seccomp_cached(const oci::Seccomp& seccomp, const std::string& root,
                                              std::string_view profile_json = {});

// The cached program for a profile's text, without parsing or compiling anything; nullopt
// on a miss. Entries are only ever written for profiles that parsed, validated and compiled.
std::optional<SeccompProgram> find_cached_seccomp(std::string_view profile_json, const std::string& root);

}  // namespace forkbox
