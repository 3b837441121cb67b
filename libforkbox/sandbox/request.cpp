#include "libforkbox/sandbox/request.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>

#include "libforkbox/base/json.hpp"
#include "libforkbox/plan/plan.hpp"

namespace forkbox::sandbox {

const std::vector<std::string> kDefaultEnv = {
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "TERM=xterm",
    "LANG=C.UTF-8"};

namespace {

constexpr std::string_view kPrefix = "sandbox/";

// The verb being parsed, for the messages of the helpers below ("create: \"ttl_s\" must ...").
thread_local std::string_view parsing_verb = "run";

struct ParsingVerb {
    explicit ParsingVerb(std::string_view verb) { parsing_verb = verb; }
    ~ParsingVerb() { parsing_verb = "run"; }
};

std::unexpected<Error> invalid(std::string_view key, std::string_view what) {
    return fail(EINVAL, std::string(parsing_verb) + ": \"" + std::string(key) + "\" " + std::string(what));
}

bool has_nul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

Result<std::vector<std::string>> string_array(const json::Value& v, std::string_view key) {
    if (!v.is_array()) return invalid(key, "must be an array of strings");
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) {
        auto s = v.at(i).as_string();
        if (!s) return invalid(key, "must be an array of strings");
        if (has_nul(*s)) return invalid(key, "must not contain NUL bytes");
        out.push_back(std::move(*s));
    }
    return out;
}

Result<uint64_t> positive(const json::Value& v, std::string_view key, uint64_t max) {
    auto n = v.as_uint64();
    if (!n || *n == 0 || *n > max) return invalid(key, "must be an integer from 1 to " + std::to_string(max));
    return *n;
}

Result<std::string> absolute_path(const json::Value& v, std::string_view key) {
    auto s = v.as_string();
    if (!s || s->empty() || (*s)[0] != '/') return invalid(key, "must be an absolute path");
    if (has_nul(*s) || s->size() > 4096) return invalid(key, "must be a path without NUL bytes, at most 4096 bytes");
    return *s;
}

Result<std::vector<BindRequest>> parse_mounts(const json::Value& v) {
    if (!v.is_array()) return invalid("mounts", "must be an array of {source, destination, mode}");
    if (v.size() > 64) return invalid("mounts", "may name at most 64 mounts");
    std::vector<BindRequest> out;
    for (size_t i = 0; i < v.size(); ++i) {
        json::Value m = v.at(i);
        if (!m.is_object()) return invalid("mounts", "must be an array of {source, destination, mode}");
        BindRequest b;
        bool have_source = false, have_destination = false;
        FB_TRY(m.for_each_member([&](std::string_view key, const json::Value& value) -> Result<void> {
            if (key == "source") {
                FB_ASSIGN(b.source, absolute_path(value, "mounts[].source"));
                have_source = true;
            } else if (key == "destination") {
                FB_ASSIGN(std::string d, absolute_path(value, "mounts[].destination"));
                b.destination = clean_container_path(d);
                have_destination = true;
            } else if (key == "mode") {
                auto mode = value.as_string();
                if (!mode || (*mode != "ro" && *mode != "rw")) return invalid("mounts[].mode", "must be \"ro\" or \"rw\"");
                b.writable = *mode == "rw";
            } else {
                return invalid("mounts[]." + std::string(key), "is not a key of a mount");
            }
            return {};
        }));
        if (!have_source || !have_destination) return invalid("mounts", "entries need a source and a destination");
        if (b.destination == "/" || b.destination == "/proc" || b.destination.starts_with("/proc/") ||
            b.destination == "/dev" || b.destination.starts_with("/dev/"))
            return invalid("mounts[].destination", "must not be /, or under /proc or /dev: " + b.destination);
        out.push_back(std::move(b));
    }
    return out;
}

}  // namespace

std::string_view error_kind_name(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::InvalidRequest: return "invalid_request";
        case ErrorKind::SandboxError: return "sandbox_error";
        case ErrorKind::Busy: return "busy";
        case ErrorKind::NoSuchSandbox: return "no_such_sandbox";
        case ErrorKind::FileError: return "file_error";
    }
    return "sandbox_error";
}

bool looks_like_sandbox_message(std::string_view message) { return message.starts_with(kPrefix); }

Result<FirstMessage> split_first_message(std::string_view message) {
    if (!message.starts_with(kPrefix)) return fail(EPROTO, "not a sandbox request: it must start with \"sandbox/1 \"");
    size_t line_end = message.find('\n');
    std::string_view line = message.substr(0, line_end);
    std::string_view rest = line.substr(kPrefix.size());
    size_t space = rest.find(' ');
    std::string_view version = rest.substr(0, space);
    if (version != std::to_string(kProtocolVersion))
        return fail(EPROTO, "protocol version \"" + std::string(version.substr(0, 16)) + "\" is not served (versions served: 1)");
    if (space == std::string_view::npos || space + 1 >= rest.size()) return fail(EPROTO, "no verb after \"sandbox/1 \"");
    FirstMessage m;
    m.verb = std::string(rest.substr(space + 1));
    m.body = line_end == std::string_view::npos ? std::string_view{} : message.substr(line_end + 1);
    return m;
}

namespace {

// The keys that say what the sandbox is (a run's own, or its session's at create).
// Returns false when `key` is not one of them.
template <typename Request>
Result<bool> parse_sandbox_key(std::string_view key, const json::Value& v, Request& r) {
    if (key == "memory_mb") {
        FB_ASSIGN(r.memory_mb, positive(v, key, 1 << 24));
    } else if (key == "pids") {
        FB_ASSIGN(r.pids, positive(v, key, 1 << 22));
    } else if (key == "cpus") {
        auto d = v.as_double();
        if (!d || !std::isfinite(*d) || *d < 0.01 || *d > 1024) return invalid(key, "must be a number from 0.01 to 1024");
        r.cpus = *d;
    } else if (key == "network") {
        auto b = v.as_bool();
        if (!b) return invalid(key, "must be true or false");
        r.network = *b;
    } else if (key == "mounts") {
        FB_ASSIGN(r.mounts, parse_mounts(v));
    } else if (key == "rootfs") {
        FB_ASSIGN(r.rootfs, absolute_path(v, key));
    } else if (key == "caps") {
        FB_ASSIGN(auto caps, string_array(v, key));
        if (!caps.empty()) return invalid(key, "must be null (Docker's default set) or [] (none)");
        r.drop_all_caps = true;
    } else {
        return false;
    }
    return true;
}

Result<json::Document> parse_object(std::string_view text, std::string_view verb) {
    parsing_verb = verb;
    auto doc = json::Document::parse(text);
    if (!doc) return fail(EINVAL, std::string(verb) + ": the request is not JSON: " + doc.error().what());
    if (!doc->root().is_object()) return fail(EINVAL, std::string(verb) + ": the request must be a JSON object");
    return doc;
}

Result<std::string> session_id(const json::Value& v) {
    auto s = v.as_string();
    if (!s || s->empty() || s->size() > 64 || s->find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
        return invalid("session", "must be a session id (\"sb-...\")");
    return *s;
}

}  // namespace

Result<RunRequest> parse_run_request(std::string_view text, const Defaults& defaults) {
    ParsingVerb scope("run");
    FB_ASSIGN(json::Document doc, parse_object(text, "run"));
    json::Value root = doc.root();
    RunRequest r;
    r.memory_mb = defaults.memory_mb;
    r.pids = defaults.pids;
    r.cpus = defaults.cpus;
    r.max_output = defaults.max_output;
    bool have_env = false;
    std::string sandbox_key;  // one the request gave: a session's are its own
    FB_TRY(root.for_each_member([&](std::string_view key, const json::Value& v) -> Result<void> {
        if (v.is_null()) return {};  // absent: the default
        FB_ASSIGN(bool sandbox, parse_sandbox_key(key, v, r));
        if (sandbox) {
            sandbox_key = key;
        } else if (key == "argv") {
            FB_ASSIGN(r.argv, string_array(v, key));
        } else if (key == "env") {
            FB_ASSIGN(r.env, string_array(v, key));
            for (const auto& e : r.env)
                if (e.find('=') == std::string::npos || e.front() == '=')
                    return invalid(key, "entries must be KEY=VALUE: " + e.substr(0, 64));
            have_env = true;
        } else if (key == "cwd") {
            FB_ASSIGN(r.cwd, absolute_path(v, key));
        } else if (key == "timeout_ms") {
            FB_ASSIGN(uint64_t t, positive(v, key, 7 * 24 * 3600 * 1000ull));
            r.timeout_ms = t;
        } else if (key == "stdin") {
            auto b = v.as_bool();
            if (!b) return invalid(key, "must be true or false");
            r.stdin_frames = *b;
        } else if (key == "max_output") {
            FB_ASSIGN(r.max_output, positive(v, key, kMaxOutputLimit));
        } else if (key == "session") {
            FB_ASSIGN(r.session, session_id(v));
        } else if (key == "python") {
            auto code = v.as_string();
            if (!code) return invalid(key, "must be a string of Python code");
            if (has_nul(*code)) return invalid(key, "must not contain NUL bytes (Python source cannot)");
            r.python = std::move(*code);
        } else if (key == "preload") {
            FB_ASSIGN(r.preload, string_array(v, key));
            if (r.preload.size() > 64) return invalid(key, "may name at most 64 modules");
            for (const auto& m : r.preload)
                if (m.empty() || m.size() > 128 || m.front() == '.' || m.back() == '.' ||
                    m.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") != std::string::npos)
                    return invalid(key, "must name modules (\"json\", \"os.path\"), not \"" + m.substr(0, 64) + "\"");
        } else {
            return invalid(key, "is not a key of a run request");
        }
        return {};
    }));
    if (r.python) {
        if (!r.argv.empty()) return invalid("argv", "and \"python\" are one or the other");
        if (r.drop_all_caps) return invalid("caps", "cannot be dropped for a warm Python (it starts before the request)");
        r.argv = {"python3", "-c", *r.python};
    } else if (!r.preload.empty()) {
        return invalid("preload", "needs \"python\"");
    }
    if (r.argv.empty()) return invalid("argv", "must be a non-empty array of strings");
    if (r.argv[0].empty()) return invalid("argv", "must not start with an empty string");
    if (!r.session.empty() && !sandbox_key.empty())
        return invalid(sandbox_key, "is the session's (given when it was created), not a run's in it");
    if (!have_env) r.env = kDefaultEnv;
    if (std::none_of(r.env.begin(), r.env.end(), [](const std::string& e) { return e.starts_with("PATH="); }))
        r.env.push_back(kDefaultEnv[0]);
    if (defaults.max_timeout_ms && (!r.timeout_ms || *r.timeout_ms > *defaults.max_timeout_ms))
        r.timeout_ms = defaults.max_timeout_ms;
    return r;
}

Result<SessionRequest> parse_create_request(std::string_view text, const Defaults& defaults) {
    ParsingVerb scope("create");
    FB_ASSIGN(json::Document doc, parse_object(text, "create"));
    SessionRequest r;
    r.memory_mb = defaults.memory_mb;
    r.pids = defaults.pids;
    r.cpus = defaults.cpus;
    r.idle_s = defaults.session_idle_s;
    FB_TRY(doc.root().for_each_member([&](std::string_view key, const json::Value& v) -> Result<void> {
        if (v.is_null()) return {};
        FB_ASSIGN(bool sandbox, parse_sandbox_key(key, v, r));
        if (sandbox) return {};
        if (key == "timeout_ms") {
            FB_ASSIGN(uint64_t t, positive(v, key, 7 * 24 * 3600 * 1000ull));
            r.timeout_ms = t;
        } else if (key == "ttl_s") {
            FB_ASSIGN(uint64_t t, positive(v, key, 30 * 24 * 3600ull));
            r.ttl_s = t;
        } else if (key == "idle_s") {
            FB_ASSIGN(r.idle_s, positive(v, key, 30 * 24 * 3600ull));
        } else {
            return invalid(key, "is not a key of a create request");
        }
        return {};
    }));
    if (defaults.max_timeout_ms && (!r.timeout_ms || *r.timeout_ms > *defaults.max_timeout_ms))
        r.timeout_ms = defaults.max_timeout_ms;
    return r;
}

Result<FileVerb> parse_file_request(std::string_view text) {
    ParsingVerb scope("file");
    FB_ASSIGN(json::Document doc, parse_object(text, "file"));
    FileVerb f;
    bool have_op = false, have_path = false;
    FB_TRY(doc.root().for_each_member([&](std::string_view key, const json::Value& v) -> Result<void> {
        if (v.is_null()) return {};
        if (key == "session") {
            FB_ASSIGN(f.session, session_id(v));
        } else if (key == "op") {
            static const std::pair<std::string_view, FileOp> ops[] = {
                {"write", FileOp::Write},   {"read", FileOp::Read}, {"list", FileOp::List},
                {"remove", FileOp::Remove}, {"mkdir", FileOp::Mkdir}, {"diff", FileOp::Diff},
                {"stat", FileOp::Stat},     {"rename", FileOp::Rename}};
            auto op = v.as_string();
            auto it = std::find_if(std::begin(ops), std::end(ops), [&](auto& o) { return op && o.first == *op; });
            if (it == std::end(ops)) return invalid(key, "must be one of write, read, list, remove, mkdir, diff, stat, rename");
            f.file.op = it->second;
            have_op = true;
        } else if (key == "path") {
            auto p = v.as_string();
            if (!p) return invalid(key, "must be a string");
            FB_ASSIGN(f.file.path, check_sandbox_path(*p));
            have_path = true;
        } else if (key == "mode") {
            auto m = v.as_uint64();
            if (!m || *m > 07777) return invalid(key, "must be a file mode from 0 to 0o7777");
            f.file.mode = static_cast<uint32_t>(*m);
        } else if (key == "recursive") {
            auto b = v.as_bool();
            if (!b) return invalid(key, "must be true or false");
            f.file.recursive = *b;
        } else if (key == "to") {
            auto p = v.as_string();
            if (!p) return invalid(key, "must be a string");
            FB_ASSIGN(f.file.to, check_sandbox_path(*p));
        } else {
            return invalid(key, "is not a key of a file request");
        }
        return {};
    }));
    if (f.session.empty()) return invalid("session", "is required");
    if (!have_op) return invalid("op", "is required");
    if (!have_path && f.file.op != FileOp::Diff) return invalid("path", "is required");
    if (f.file.op == FileOp::Mkdir && !f.file.mode) f.file.mode = 0755;
    if ((f.file.op == FileOp::Rename) != !f.file.to.empty())
        return invalid("to", f.file.op == FileOp::Rename ? "is required" : "is only for rename");
    return f;
}

Result<ForkRequest> parse_fork_request(std::string_view text) {
    ParsingVerb scope("fork");
    FB_ASSIGN(json::Document doc, parse_object(text, "fork"));
    ForkRequest f;
    FB_TRY(doc.root().for_each_member([&](std::string_view key, const json::Value& v) -> Result<void> {
        if (v.is_null()) return {};
        if (key == "session") {
            FB_ASSIGN(f.session, session_id(v));
        } else if (key == "count") {
            FB_ASSIGN(f.count, positive(v, key, kMaxForkCount));
        } else {
            return invalid(key, "is not a key of a fork request");
        }
        return {};
    }));
    if (f.session.empty()) return invalid("session", "is required");
    return f;
}

Result<void> parse_empty_request(std::string_view text, std::string_view verb) {
    ParsingVerb scope(verb);
    if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return {};
    FB_ASSIGN(json::Document doc, parse_object(text, verb));
    return doc.root().for_each_member([&](std::string_view key, const json::Value&) -> Result<void> {
        return invalid(key, "is not a key of a " + std::string(verb) + " request");
    });
}

Result<std::string> parse_session_ref(std::string_view text, std::string_view verb) {
    ParsingVerb scope(verb);
    FB_ASSIGN(json::Document doc, parse_object(text, verb));
    std::string id;
    FB_TRY(doc.root().for_each_member([&](std::string_view key, const json::Value& v) -> Result<void> {
        if (key == "session") {
            FB_ASSIGN(id, session_id(v));
            return {};
        }
        return fail(EINVAL, std::string(verb) + ": \"" + std::string(key) + "\" is not a key of a " + std::string(verb) + " request");
    }));
    if (id.empty()) return fail(EINVAL, std::string(verb) + ": \"session\" is required");
    return id;
}

Result<std::string> check_sandbox_path(std::string_view path) {
    if (path.empty() || path[0] != '/') return fail(EINVAL, "a sandbox path must be absolute: \"" + std::string(path.substr(0, 256)) + "\"");
    if (path.size() > 4096 || path.find('\0') != std::string_view::npos)
        return fail(EINVAL, "a sandbox path must be at most 4096 bytes, without NUL");
    std::string out;
    size_t pos = 1;
    while (pos <= path.size()) {
        size_t end = path.find('/', pos);
        if (end == std::string_view::npos) end = path.size();
        std::string_view part = path.substr(pos, end - pos);
        pos = end + 1;
        if (part.empty() || part == ".") continue;
        if (part == "..")
            return fail(EINVAL, "the path \"" + std::string(path.substr(0, 256)) + "\" has a \"..\" component: refused");
        out += "/";
        out += part;
    }
    return out.empty() ? "/" : out;
}

std::string FileRequest::encode() const {
    std::string out(1, static_cast<char>(op));
    out += std::to_string(mode) + '\0' + (recursive ? '1' : '0') + '\0' + path;
    if (op == FileOp::Rename) out += '\0' + to;
    return out;
}

Result<FileRequest> FileRequest::decode(std::string_view data) {
    if (data.empty()) return fail(EPROTO, "file request: empty");
    FileRequest r;
    r.op = static_cast<FileOp>(data[0]);
    switch (r.op) {
        case FileOp::Write: case FileOp::Read: case FileOp::List: case FileOp::Remove: case FileOp::Mkdir:
        case FileOp::Diff: case FileOp::Stat: case FileOp::Rename: break;
        default: return fail(EPROTO, "file request: unknown op");
    }
    data.remove_prefix(1);
    size_t a = data.find('\0');
    if (a == std::string_view::npos || a == 0 || a > 8) return fail(EPROTO, "file request: bad mode");
    std::string mode(data.substr(0, a));
    if (mode.find_first_not_of("0123456789") != std::string::npos) return fail(EPROTO, "file request: bad mode");
    r.mode = static_cast<uint32_t>(std::stoul(mode));
    data.remove_prefix(a + 1);
    if (data.size() < 2 || (data[0] != '0' && data[0] != '1') || data[1] != '\0') return fail(EPROTO, "file request: bad flags");
    r.recursive = data[0] == '1';
    data.remove_prefix(2);
    if (r.op == FileOp::Rename) {
        size_t end = data.find('\0');
        if (end == std::string_view::npos) return fail(EPROTO, "file request: rename without its new path");
        FB_ASSIGN(r.to, check_sandbox_path(data.substr(end + 1)));
        data = data.substr(0, end);
    }
    FB_ASSIGN(r.path, check_sandbox_path(data));
    return r;
}

std::string format_result(const RunOutcome& o) {
    json::Writer w;
    w.begin_object();
    w.key("exit_code").value(o.exit_code);
    w.key("signal");
    if (o.signal) w.value(*o.signal);
    else w.null();
    w.key("timed_out").value(o.timed_out);
    w.key("oom_killed").value(o.oom_killed);
    w.key("duration_ms").value(o.duration_ms);
    w.key("stdout_bytes").value(o.stdout_bytes);
    w.key("stderr_bytes").value(o.stderr_bytes);
    w.key("stdout_dropped").value(o.stdout_dropped);
    w.key("stderr_dropped").value(o.stderr_dropped);
    w.key("cpu_ms");
    if (o.cpu_ms) w.value(*o.cpu_ms);
    else w.null();
    w.key("peak_memory_bytes");
    if (o.peak_memory_bytes) w.value(*o.peak_memory_bytes);
    else w.null();
    w.key("written_bytes");
    if (o.written_bytes) w.value(*o.written_bytes);
    else w.null();
    w.key("limits").begin_object();
    w.key("memory").value(o.limits.memory).key("pids").value(o.limits.pids).key("cpu").value(o.limits.cpu);
    w.end_object();
    w.key("exec_error");
    if (o.exec_error) w.value(*o.exec_error);
    else w.null();
    w.end_object();
    return std::string(1, kResult) + w.take();
}

std::string format_error(ErrorKind kind, std::string_view message) {
    json::Writer w;
    w.begin_object().key("error").value(error_kind_name(kind)).key("message").value(message).end_object();
    return std::string(1, kError) + w.take();
}

std::string format_file_error(int errnum, std::string_view message) {
    json::Writer w;
    w.begin_object().key("error").value("file_error").key("errno").value(errnum).key("message").value(message).end_object();
    return std::string(1, kError) + w.take();
}

void set_exit_status(RunOutcome& o, int status) {
    if (WIFEXITED(status)) {
        o.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        o.signal = WTERMSIG(status);
        o.exit_code = 128 + WTERMSIG(status);
    }
}

std::string_view OutputCapture::take(std::string_view data) {
    total_ += data.size();
    size_t now = static_cast<size_t>(std::min<uint64_t>(data.size(), head_limit_ - head_sent_));
    head_sent_ += now;
    std::string_view rest = data.substr(now);
    if (tail_limit_ == 0 || rest.empty()) return data.substr(0, now);
    // Only the last tail_limit_ bytes of `rest` can survive.
    if (rest.size() > tail_limit_) rest = rest.substr(rest.size() - tail_limit_);
    ring_used_ += rest.size();
    while (!rest.empty()) {
        if (ring_.size() < tail_limit_) {
            size_t n = std::min<size_t>(rest.size(), tail_limit_ - ring_.size());
            ring_.append(rest.substr(0, n));
            rest.remove_prefix(n);
            continue;
        }
        size_t n = std::min<size_t>(rest.size(), ring_.size() - ring_pos_);
        ring_.replace(ring_pos_, n, rest.substr(0, n));
        ring_pos_ = (ring_pos_ + n) % ring_.size();
        rest.remove_prefix(n);
    }
    return data.substr(0, now);
}

std::string OutputCapture::tail() const {
    if (ring_.size() < tail_limit_) return ring_;
    return ring_.substr(ring_pos_) + ring_.substr(0, ring_pos_);
}

std::vector<std::string> frames(char tag, std::string_view data) {
    std::vector<std::string> out;
    while (!data.empty()) {
        size_t n = std::min(data.size(), kMaxFrameData);
        std::string f(1, tag);
        f.append(data.substr(0, n));
        out.push_back(std::move(f));
        data.remove_prefix(n);
    }
    return out;
}

}  // namespace forkbox::sandbox
