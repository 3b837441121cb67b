// The sandbox protocol's messages (docs/sandbox-protocol.md), parsed and formatted without
// a syscall: the run request, the result and error replies, and the capture of a stream
// that keeps its head and tail. All of it is unit-tested.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libforkbox/base/error.hpp"
#include "libforkbox/process/credentials.hpp"

namespace forkbox::sandbox {

inline constexpr int kProtocolVersion = 1;
inline constexpr size_t kMaxRequestBytes = 128 * 1024;
inline constexpr size_t kMaxFrameData = 64 * 1024;  // after the one-byte tag
inline constexpr uint64_t kMaxOutputLimit = 64ull << 20;

// A run's environment when its request names none.
extern const std::vector<std::string> kDefaultEnv;

// Message tags after the first message.
inline constexpr char kStdinData = 'I', kStdinEnd = 'E', kKill = 'K';
inline bool is_stdin_or_kill(char tag) { return tag == kStdinData || tag == kStdinEnd || tag == kKill; }
inline constexpr char kStdoutData = '1', kStderrData = '2', kResult = 'X', kError = '!';

// The error kinds of a '!' reply. NoSuchSandbox: a session that is closed, expired or never
// was; FileError: a file verb failed inside the sandbox (with its errno).
enum class ErrorKind { InvalidRequest, SandboxError, Busy, NoSuchSandbox, FileError };
std::string_view error_kind_name(ErrorKind kind);

struct BindRequest {
    std::string source;       // absolute host path
    std::string destination;  // absolute sandbox path, cleaned
    bool writable = false;
    auto operator<=>(const BindRequest&) const = default;
};

// A run request with the daemon's defaults filled in.
struct RunRequest {
    std::vector<std::string> argv;
    std::vector<std::string> env;  // KEY=VALUE
    std::string cwd = "/";
    std::optional<uint64_t> timeout_ms;
    bool stdin_frames = false;
    uint64_t memory_mb = 0;  // 0: none
    uint64_t pids = 0;
    double cpus = 0;  // 0: none
    bool network = false;
    std::vector<BindRequest> mounts;
    std::string rootfs;  // the lower layer asked for: a directory or a bundle ("": the daemon's)
    uint64_t max_output = 1 << 20;
    bool drop_all_caps = false;
    std::string session;  // run in this session's sandbox (then the sandbox's keys are its)
    // Python code to run (argv is then python3 -c CODE): in a sandbox of its own, by a warm
    // interpreter that imported `preload` before the request.
    std::optional<std::string> python;
    std::vector<std::string> preload;
    // Set by the daemon, never read from a request: a group member's identity, with whose
    // rights its `mounts` and `rootfs` are opened (SandboxKind::member).
    std::optional<HostIdentity> member;
};

// The create verb: a session, one sandbox for many runs and file verbs.
struct SessionRequest {
    uint64_t memory_mb = 0;
    uint64_t pids = 0;
    double cpus = 0;
    bool network = false;
    std::vector<BindRequest> mounts;
    std::string rootfs;  // as RunRequest's
    bool drop_all_caps = false;
    std::optional<uint64_t> timeout_ms;  // each run's deadline unless the run gives one
    std::optional<uint64_t> ttl_s;       // the session ends this long after it began
    uint64_t idle_s = 600;               // ... or this long after its last run or verb ended
};

// A file verb's operation, as the sandbox's init runs it (tree.hpp).
enum class FileOp : char {
    Write = 'w', Read = 'r', List = 'l', Remove = 'x', Mkdir = 'm', Diff = 'd', Stat = 's', Rename = 'n'
};

struct FileRequest {
    FileOp op = FileOp::Read;
    std::string path = "/";
    uint32_t mode = 0644;
    bool recursive = false;  // remove: the whole tree; mkdir: the parents too
    std::string to;          // rename: the new path

    std::string encode() const;
    static Result<FileRequest> decode(std::string_view data);
    bool operator==(const FileRequest&) const = default;
};

// The file verb: {"session", "op": write|read|list|remove|mkdir|diff|stat|rename, "path",
// "mode", "recursive", "to"}.
struct FileVerb {
    std::string session;
    FileRequest file;
};

// The fork verb: `count` new sessions whose state starts as the session's is now.
struct ForkRequest {
    std::string session;
    uint64_t count = 1;
};

inline constexpr uint64_t kMaxForkCount = 16;

struct Defaults {
    uint64_t memory_mb = 512;
    uint64_t pids = 256;
    double cpus = 0;
    uint64_t max_output = 1 << 20;
    std::optional<uint64_t> max_timeout_ms;  // the daemon's --max-timeout-ms
    uint64_t session_idle_s = 600;
};

// The first message: "sandbox/1 <verb>\n<json>".
struct FirstMessage {
    std::string verb;
    std::string_view body;
};
bool looks_like_sandbox_message(std::string_view message);
Result<FirstMessage> split_first_message(std::string_view message);

// The run verb's JSON -> RunRequest; an error names the key ("run: \"cwd\" must be ...").
Result<RunRequest> parse_run_request(std::string_view json, const Defaults& defaults);

Result<SessionRequest> parse_create_request(std::string_view json, const Defaults& defaults);
Result<FileVerb> parse_file_request(std::string_view json);
Result<ForkRequest> parse_fork_request(std::string_view json);
// The verbs without arguments (list, keep, info): an empty object, or nothing.
Result<void> parse_empty_request(std::string_view json, std::string_view verb);
// The verbs that name a session alone (close, pause, resume): its id.
Result<std::string> parse_session_ref(std::string_view json, std::string_view verb);

// A path a client names inside a sandbox: absolute, without ".." or NUL, at most 4096
// bytes; returned cleaned ("//a/./b/" -> "/a/b").
Result<std::string> check_sandbox_path(std::string_view path);

// How each limit was enforced: "cgroup", "rlimit" or "none".
struct Enforcement {
    std::string memory = "none", pids = "none", cpu = "none";
};

struct RunOutcome {
    int exit_code = 0;
    std::optional<int> signal;
    bool timed_out = false;
    bool oom_killed = false;
    double duration_ms = 0;
    uint64_t stdout_bytes = 0, stderr_bytes = 0;
    uint64_t stdout_dropped = 0, stderr_dropped = 0;
    std::optional<double> cpu_ms;
    std::optional<uint64_t> peak_memory_bytes;
    std::optional<int64_t> written_bytes;  // what the run added to the sandbox's writable layer
    Enforcement limits;
    std::optional<std::string> exec_error;
};

std::string format_result(const RunOutcome& outcome);            // "X{...}"
std::string format_error(ErrorKind kind, std::string_view message);  // "!{...}"
// A file verb's failure: "!{"error": "file_error", "errno": N, "message": ...}".
std::string format_file_error(int errnum, std::string_view message);

// A command's exit status from wait(): 128+N for signal N.
void set_exit_status(RunOutcome& outcome, int wait_status);

// One output stream's capture: the first half of `limit` bytes is sent as it comes, the
// last half kept in a ring and sent at the end; what lies between is dropped and counted.
class OutputCapture {
public:
    explicit OutputCapture(uint64_t limit) : head_limit_(limit - limit / 2), tail_limit_(limit / 2) {}
    // Takes `data` read from the pipe; returns the part to send now (within the head).
    std::string_view take(std::string_view data);
    // At the end: the kept tail, in order.
    std::string tail() const;
    uint64_t total() const { return total_; }
    uint64_t dropped() const { return total_ - head_sent_ - std::min<uint64_t>(ring_used_, tail_limit_); }

private:
    uint64_t head_limit_, tail_limit_;
    uint64_t head_sent_ = 0, total_ = 0;
    std::string ring_;        // tail_limit_ bytes once full
    uint64_t ring_used_ = 0;  // bytes ever put in the ring
    size_t ring_pos_ = 0;     // next write position when full
};

// Frames of at most kMaxFrameData bytes of `data`, each tagged.
std::vector<std::string> frames(char tag, std::string_view data);

}  // namespace forkbox::sandbox
