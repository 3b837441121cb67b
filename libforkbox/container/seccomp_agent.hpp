// Seccomp notify: the agent listening at linux.seccomp.listenerPath gets the filter's
// listener fd, with runc's ContainerProcessState document, over one unix connection.
#pragma once

#include <sys/types.h>

#include <string>

#include "libforkbox/base/error.hpp"
#include "libforkbox/container/state.hpp"
#include "libforkbox/seccomp/seccomp.hpp"

namespace forkbox {

// runc's ContainerProcessState: {"ociVersion","fds":["seccompFd"],"pid","metadata","state"}
// where state is the OCI state document with the given status (pure).
std::string container_process_state(const ContainerState& state, const char* status, pid_t pid,
                                    const std::string& metadata);

// Connects to the agent and sends the document with the listener fd (SCM_RIGHTS).
Result<void> hand_listener_to_agent(const std::string& listener_path, int listener_fd,
                                    const std::string& document);

// In init or the exec child: loads the filter; a notify listener goes to the parent over
// the sync socket (which hands it to the agent), and this waits until it has.
Result<void> load_seccomp_via_parent(const SeccompProgram& program, int sync_fd);

}  // namespace forkbox
