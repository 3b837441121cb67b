// Numbered, typed messages between `create` (parent) and container init (child) over a
// SOCK_SEQPACKET socketpair. The protocol, in order:
//
//   parent -> child   Go              state JSON for hooks; cgroup placement is done, but
//                                     for the v1 cgroups a cold create makes meanwhile:
//   parent -> child   CgroupsPlaced   (InitArgs::v1_cgroups_follow) they exist now: join them
//                                     (through their `tasks` files, passed along when opened)
//   child  -> parent  UsernsReady     (new user ns) write my uid/gid maps
//   parent -> child   UsernsDone
//   child  -> parent  InitPid         (intermediate only) value = host pid of init
//   child  -> parent  RuntimeHooks    (hooks present) run prestart + createRuntime now
//   parent -> child   RuntimeHooksDone
//   child  -> parent  SeccompListener (notify rules) the filter's listener fd attached
//   parent -> child   SeccompListenerDone  the agent at listenerPath has it
//   child  -> parent  Ready           init is set up (its death signal is off from here)
//   parent -> child   Recorded        state.json names init: only now may init outlive
//                                     `create` (it then blocks on the exec fifo); EOF
//                                     instead means create died first, and init exits
//   child  -> parent  Error           value = errno, payload = message; child then exits
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"

namespace forkbox {

enum class SyncType : uint32_t {
    Go = 1,
    UsernsReady,
    UsernsDone,
    InitPid,
    RuntimeHooks,
    RuntimeHooksDone,
    Ready,
    Error,
    SeccompListener,
    SeccompListenerDone,
    Recorded,
    CgroupsPlaced,
};

struct SyncMessage {
    SyncType type{};
    int32_t value = 0;
    std::string payload;
    std::vector<unique_fd> fds;  // fds passed with the message (SCM_RIGHTS), if any
};

// At most this many fds pass with one message.
constexpr size_t kSyncMaxFds = 32;

Result<void> sync_send(int fd, SyncType type, int32_t value = 0, std::string_view payload = {},
                       std::span<const int> pass_fds = {});
// Blocks for the next message. EOF (peer gone without a message) is an EPIPE error.
Result<SyncMessage> sync_recv(int fd);
// Receives and checks the type; an Error message from the peer becomes this call's error.
Result<SyncMessage> sync_expect(int fd, SyncType type);

const char* sync_type_name(SyncType t);

// The other end is closed (its process died): a poll, no message is read.
bool sync_peer_gone(int fd);

}  // namespace forkbox
