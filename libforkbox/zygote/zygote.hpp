// Zygote mode, shared by the daemon and its clients: which namespaces a warm template can
// hold for a Plan, and the wire protocol. The daemon keeps pools of freshly made namespaces
// (the network namespace alone costs ~0.4 ms to make and more to tear down), a client
// takes one per container, and anything unexpected makes the client fall back to the cold
// path: zygote mode never makes a create fail.
//
// Besides namespaces, a template holds spare cgroups: a directory with a made-up name
// (".zygote-PID-N") under the container's cgroup parent in every cgroup v1 hierarchy,
// which the client renames to the container's own (v1 mkdir with its controllers costs
// tens of us per hierarchy, rename a few; cgroup v2 has no rename, so v2 is made as usual).
//
// A rootfs template goes further, for containers whose whole rootfs setup is known ahead
// (rootfs_template_fits): a mount namespace with the bundle's rootfs built and pivoted into
// (mounts, devices, masked and read-only paths), its /proc made for a still-empty pid
// namespace (procfs pidns=), hostname set. The client's init joins it and becomes pid 1
// of that pid namespace; it attaches the container's own cgroups itself (their names are
// not known ahead). A container with a cgroup namespace fits too: init unshares it once in
// its cgroups, as a cold init does, then mounts cgroup2 fresh inside it (v1 hierarchies
// stay binds of its own cgroups, which show the same from inside the namespace).
//
// A container in a new user namespace takes a template whose namespaces were made inside a
// user namespace with the same id maps (the key then has CLONE_NEWUSER): its network, ipc
// and uts namespaces are owned by that user namespace, as a cold clone's would be. init
// joins them like namespaces given by path (through the intermediate process, which then
// makes the mount and pid namespaces inside the user namespace).
//
// Protocol: one SOCK_SEQPACKET connection per request, one message each way.
//   client: "take <key>[ <cgroup parent>[ userns <id maps>][ rootfs <fingerprint> <bundle>]]"
//           (the parent "-", or none: no spare cgroups, as the systemd driver asks)
//                          daemon: "ok <key>[ <spare cgroup name>][ rootfs[ cgroups][ devices]]" with
//                                  one nsfs fd per namespace in the key (SCM_RIGHTS, in
//                                  kTemplateOrder), then, for a rootfs template, the mount
//                                  namespace and the pid namespace for children, then with
//                                  "devices" the config's cgroup v2 device program (a BPF
//                                  program fd); or "none". A rootfs request
//                                  may be answered with a namespace-only template.
//   client: "stats"        daemon: "stats served=N rootfs=N missed=N ready=N pools=N failed=N"
#pragma once

#include <sched.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/plan/plan.hpp"
#include "libforkbox/process/namespaces.hpp"

namespace forkbox::zygote {

// Namespaces a template holds, in the order their fds travel.
inline constexpr std::array<int, 4> kTemplateOrder = {CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUTS};
inline constexpr int kTemplateNamespaces = CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
inline constexpr int kTemplateKeyFlags = kTemplateNamespaces | CLONE_NEWUSER;

// The annotation that opts a container in.
inline constexpr const char* kAnnotation = "run.forkbox.zygote";

// FORKBOX_SOCKET, else forkbox.sock in the default state root (/run/forkbox, or a user's
// $XDG_RUNTIME_DIR/forkbox).
std::string default_socket_path();

// The template namespaces a Plan creates, or 0 when no template fits it. With a new user
// namespace (and both id maps given) the key has CLONE_NEWUSER and the template's
// namespaces are made inside a user namespace with those maps; a container joining a user
// namespace by path gets none (namespaces owned by another user namespace are no use to it).
int template_key(const Plan& plan);

// A user namespace's id maps on the wire: "u<container>:<host>:<size>" and "g..." entries,
// comma-separated, uid entries first ("" for none). No spaces: one protocol word.
std::string encode_id_maps(const std::vector<oci::IdMapping>& uids, const std::vector<oci::IdMapping>& gids);
struct IdMaps {
    std::vector<oci::IdMapping> uids, gids;
};
// At least one entry of each, at most 340 (the kernel's limit), no empty range.
Result<IdMaps> decode_id_maps(std::string_view text);

// Number of namespaces (fds) in a key.
int namespace_count(int key);

// The directory holding a container's cgroup ("/forkbox" for "/forkbox/ID"): spare cgroups
// live there, since a cgroup can only be renamed within its parent.
std::string cgroup_parent(const std::string& cgroups_path);

// A spare cgroup name is ".zygote-" and digits and dashes: never a path.
bool valid_spare_name(std::string_view name);
// Spare cgroup names of daemon `pid`, and whose daemon a name belongs to (0: not a spare).
std::string spare_name(pid_t daemon_pid, long sequence);
pid_t spare_owner(std::string_view name);

// Whether a rootfs template can stand in for what init would build: fresh mount and pid
// namespaces, no user or time namespace, nothing joined, no hooks that run while
// the rootfs is being built, at most one cgroup mount.
bool rootfs_template_fits(const Plan& plan);

// Identifies a config.json's text (a rootfs template is built from the same text).
std::string config_fingerprint(std::string_view config_text);

struct Request {
    enum class Op { Take, Stats } op = Op::Take;
    int key = 0;
    std::string cgroup_parent;  // absolute, clean; "" from a client without spares
    // A rootfs template of this bundle, whose config.json has this fingerprint (both or neither).
    std::string rootfs_fingerprint;
    std::string rootfs_bundle;
    std::string id_maps;  // encode_id_maps(), exactly when the key has CLONE_NEWUSER
};
std::string encode_request(const Request& r);
Result<Request> decode_request(std::string_view text);

struct Reply {
    int key = 0;
    std::string spare;  // "" when the template has no spare cgroups
    bool rootfs = false;
    bool v1_cgroups_bound = false;  // a rootfs template with its spare v1 cgroups bound in
    bool device_program = false;    // a rootfs template with its cgroup v2 device program loaded
};
std::string encode_reply(const Reply& r);
Result<Reply> decode_reply(std::string_view text);

struct Template {
    std::vector<OpenNamespace> namespaces;
    std::string spare_cgroup;  // a name under the cgroup parent, or ""
    unique_fd mount_namespace;  // a rootfs template's; else empty
    unique_fd pid_namespace;    // the pid namespace its /proc shows (init enters it as pid 1)
    // Its /sys/fs/cgroup binds the spare v1 cgroups: they are the container's once renamed.
    bool v1_cgroups_bound = false;
    // The config's cgroup v2 device program, loaded by the daemon (verifying and JITing it
    // takes the kernel ~0.45 ms): create attaches it. Empty when the daemon has none.
    unique_fd device_program;
};

// Client side: a take request sent and its reply not read yet, so the daemon answers while
// the client does other work. take() reads the reply: a template, or nullopt (logged at
// debug level) on any problem: a refusal, an empty pool, a slow daemon. A request dropped
// without take() leaves the reply (and the spare cgroups it names) unread: see
// WarmTemplateRequest in container/create.cpp, which takes and discards it.
class PendingTemplate {
public:
    // nullopt (logged) when the daemon cannot be reached.
    static std::optional<PendingTemplate> ask(const std::string& socket_path, const Request& request);
    std::optional<Template> take();
    bool answered() const { return !sock_; }

private:
    PendingTemplate(unique_fd sock, const Request& request) : sock_(std::move(sock)), key_(request.key),
                                                              rootfs_asked_(!request.rootfs_fingerprint.empty()) {}
    unique_fd sock_;
    int key_ = 0;
    bool rootfs_asked_ = false;
};

// Client side, for tests and `forkbox daemon --stats`: the daemon's counters line.
Result<std::string> daemon_stats(const std::string& socket_path);

}  // namespace forkbox::zygote
