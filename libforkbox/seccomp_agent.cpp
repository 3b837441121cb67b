#include "libforkbox/seccomp_agent.hpp"

#include <sys/socket.h>

#include <cstring>

#include "libforkbox/container.hpp"
#include "libforkbox/terminal.hpp"
#include "oci/json.hpp"

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
    auto sock = connect_unix_socket(listener_path, "seccomp agent");  // a stream socket, as runc dials
    iovec iov{const_cast<char*>(document.data()), document.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &listener_fd, sizeof listener_fd);
    ssize_t n;
    if (!sock) return std::unexpected(sock.error());
    do n = ::sendmsg(sock->get(), &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0) return sys_error("send the seccomp listener to " + listener_path);
    return {};
}

}  // namespace forkbox
