// A session's file tree, from inside the sandbox: the file verbs (write, read, list, remove,
// mkdir, diff, stat, rename), each run by a child of the sandbox's init with the sandbox's
// root, creds and seccomp filter, so a path resolves in the sandbox and never on the host;
// and the copy a fork makes of its parent's writable state (the overlay's upper layer and,
// for a user's sandbox, the plain directories of its root), with the manifest a diff
// compares against.
//
// Where the state lives, in the stage tmpfs (embryo_root.cpp): a root daemon's sandbox has one
// overlay of "/", whose upper layer `upper/` is the whole state; a user's sandbox has one
// overlay per top-level directory (`upper/usr` for /usr, ...) and writable plain directories
// in `root/` (/tmp, /root, /run, and what the sandbox makes at the top).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/sandbox/request.hpp"

namespace forkbox::sandbox {

// What one path of the state was when the sandbox began (or was forked).
struct ManifestEntry {
    char type = 'f';  // f file, d dir, l symlink, w whiteout, o other
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    // A directory of the upper layer that hides the lower one's entries below it (overlayfs
    // makes one when a directory is removed and made again): they are gone.
    bool opaque = false;
    bool operator==(const ManifestEntry&) const = default;
};
using Manifest = std::map<std::string, ManifestEntry>;

// The state's parts: sandbox path <- path under the stage tmpfs.
struct StateRoot {
    std::string sandbox_path;
    std::string stage_path;
};

// Where the state is and what it was, for a diff.
struct TreeContext {
    int stage_fd = -1;  // a non-recursive copy of the stage tmpfs mount
    int lower_fd = -1;  // the sandbox's lower layer (the host's root as the sandbox sees it)
    bool per_directory = false;     // a user's sandbox (overlays per top-level directory)
    std::set<std::string> builder_names;  // per_directory: top-level names the root's builder made
    const Manifest* base = nullptr;
};

std::vector<StateRoot> state_roots(const TreeContext& t);

// The state as it is now (every entry under the state roots).
Manifest take_manifest(const TreeContext& t);

// One diff line per change since `base`: created / modified / deleted (pure).
struct Change {
    std::string path;
    std::string change;  // "created", "modified", "deleted"
    char type = 'f';
    uint64_t size = 0;
    bool operator==(const Change&) const = default;
};
// `lower_type(path)`: the type of the path in the lower layer, '\0' when it has none;
// `lower_below(path)`: the lower layer's entries below a directory, (path, type), any depth.
template <typename LowerType, typename LowerBelow>
std::vector<Change> compute_diff(const Manifest& base, const Manifest& now, LowerType lower_type,
                                 LowerBelow lower_below);
std::string format_changes(const std::vector<Change>& changes);  // a JSON array

// The file verb `r` inside the sandbox: reads from `in`, writes to `out`, a message on `err`.
// Returns the exit status: 0, or the errno of the failure.
int run_file_op(const FileRequest& r, int in, int out, int err, const TreeContext& t);

// Copies the tree under `src` (a directory fd) into the directory `dst`, merging into what
// is there: files, directories, symlinks, fifos, overlay whiteouts (0:0 devices), hard links,
// owners, modes, times and the user.* / security.capability xattrs. Never follows a symlink.
// `skip`: names at the top of `src` left out.
Result<void> copy_tree(int src, int dst, const std::set<std::string>* skip = nullptr);

// --- template definition ---

template <typename LowerType, typename LowerBelow>
std::vector<Change> compute_diff(const Manifest& base, const Manifest& now, LowerType lower_type,
                                 LowerBelow lower_below) {
    std::vector<Change> out;
    for (const auto& [path, e] : now) {
        auto b = base.find(path);
        if (b != base.end() && b->second == e) continue;
        char was = b != base.end() ? (b->second.type == 'w' ? '\0' : b->second.type) : lower_type(path);
        bool existed = was != '\0';
        if (e.type == 'w') {
            if (existed) out.push_back({path, "deleted", was, 0});
            continue;
        }
        if (e.type == 'd' && existed) {
            // A directory copied up: its entries tell. One made opaque since the base hides
            // the lower entries below it that the base still had.
            bool was_opaque = b != base.end() && b->second.opaque;
            if (e.opaque && !was_opaque)
                for (const auto& [below, type] : lower_below(path))
                    if (!now.count(below) && !base.count(below)) out.push_back({below, "deleted", type, 0});
            continue;
        }
        out.push_back({path, existed ? "modified" : "created", e.type, e.size});
    }
    // What was in the state and is gone without a whiteout (it was not in the lower layer).
    for (const auto& [path, e] : base)
        if (e.type != 'w' && !now.count(path)) out.push_back({path, "deleted", e.type, 0});
    std::sort(out.begin(), out.end(), [](const Change& a, const Change& b) { return a.path < b.path; });
    return out;
}

}  // namespace forkbox::sandbox
