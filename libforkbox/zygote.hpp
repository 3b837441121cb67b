// Zygote mode, shared by the daemon and its clients: which namespaces a warm template can
// hold for a Plan, and the wire protocol. The daemon keeps pools of freshly made namespaces
// (the network namespace alone costs ~0.4 ms to make and more to tear down), a client
// takes one per container, and anything unexpected makes the client fall back to the cold
// path: zygote mode never makes a create fail.
//
// Protocol: one SOCK_SEQPACKET connection per request, one message each way.
//   client: "take <key>"   daemon: "ok <key>" with one nsfs fd per namespace in the key
//                                  (SCM_RIGHTS, in kTemplateOrder), or "none"
//   client: "stats"        daemon: "stats served=N missed=N ready=N pools=N"
#pragma once

#include <sched.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/error.hpp"
#include "libforkbox/namespaces.hpp"
#include "libforkbox/plan.hpp"

namespace forkbox::zygote {

// Namespaces a template holds, in the order their fds travel.
inline constexpr std::array<int, 3> kTemplateOrder = {CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUTS};
inline constexpr int kTemplateNamespaces = CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;

// The annotation that opts a container in.
inline constexpr const char* kAnnotation = "run.forkbox.zygote";

// FORKBOX_SOCKET, else /run/forkbox/forkbox.sock.
std::string default_socket_path();

// The template namespaces a Plan creates, or 0 when no template fits it. A container in a
// user namespace needs namespaces owned by that user namespace, which a template made in
// advance cannot have.
int template_key(const Plan& plan);

// Number of namespaces (fds) in a key.
int namespace_count(int key);

struct Request {
    enum class Op { Take, Stats } op = Op::Take;
    int key = 0;
};
std::string encode_request(const Request& r);
Result<Request> decode_request(std::string_view text);

// Client side. Takes a template for `key`; nullopt (logged at debug level) on any problem:
// no daemon, a refusal, an empty pool, a slow daemon.
std::optional<std::vector<OpenNamespace>> take_template(const std::string& socket_path, int key);

// Client side, for tests and `forkbox daemon --stats`: the daemon's counters line.
Result<std::string> daemon_stats(const std::string& socket_path);

}  // namespace forkbox::zygote
