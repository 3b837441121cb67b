#include "libforkbox/container/seccomp_agent.hpp"

#include "libforkbox/base/json.hpp"
#include "libforkbox/base/unix_socket.hpp"
#include "libforkbox/container/container.hpp"
#include "libforkbox/process/sync.hpp"
#include "libforkbox/process/terminal.hpp"

namespace forkbox {

std::string container_process_state(const ContainerState& state, const char* status, pid_t pid,
                                    const std::string& metadata) {
    ContainerState s = state;
    s.pid = pid;
    json::Writer w;
    w.begin_object();
    w.key("ociVersion").value(state.oci_version);
    w.key("fds").begin_array().value("seccompFd").end_array();
    w.key("pid").value(static_cast<int64_t>(pid));
    w.key("metadata").value(metadata);
    w.key("state").raw(hook_state_json(s, status));
    w.end_object();
    return w.take();
}

Result<void> hand_listener_to_agent(const std::string& listener_path, int listener_fd,
                                    const std::string& document) {
    FB_ASSIGN(unique_fd sock, connect_unix_socket(listener_path, "seccomp agent"));  // a stream socket, as runc dials
    int fds[] = {listener_fd};
    return send_with_fds(sock.get(), document, fds, "send the seccomp listener to " + listener_path);
}

Result<void> load_seccomp_via_parent(const SeccompProgram& program, int sync_fd) {
    FB_ASSIGN(unique_fd listener, load_seccomp(program));
    if (!listener) return {};
    int passed = listener.get();
    FB_TRY(sync_send(sync_fd, SyncType::SeccompListener, 0, {}, std::span<const int>(&passed, 1)));
    FB_TRY(sync_expect(sync_fd, SyncType::SeccompListenerDone));
    return {};
}

}  // namespace forkbox
