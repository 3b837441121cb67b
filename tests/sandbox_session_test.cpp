// Sessions' pure parts: the verbs' requests, sandbox paths, the file verb's encoding, and
// the diff of a state against its base.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/sandbox/request.hpp"
#include "libforkbox/sandbox/service.hpp"
#include "libforkbox/sandbox/tree.hpp"

using namespace forkbox;
using namespace forkbox::sandbox;

TEST(SandboxPath, IsCleanedAndRefusesDotDot) {
    EXPECT_EQ(*check_sandbox_path("/"), "/");
    EXPECT_EQ(*check_sandbox_path("//work/./main.py/"), "/work/main.py");
    EXPECT_FALSE(check_sandbox_path("work/x"));
    EXPECT_FALSE(check_sandbox_path(""));
    auto up = check_sandbox_path("/work/../etc/passwd");
    ASSERT_FALSE(up);
    EXPECT_NE(up.error().what().find("\"..\""), std::string::npos);
    EXPECT_FALSE(check_sandbox_path("/.."));
    EXPECT_FALSE(check_sandbox_path(std::string("/a\0b", 4)));
    EXPECT_FALSE(check_sandbox_path("/" + std::string(5000, 'a')));
    EXPECT_TRUE(check_sandbox_path("/a..b/...c"));  // names with dots are names
}

TEST(FileRequest, RoundTrips) {
    FileRequest r;
    r.op = FileOp::Write;
    r.path = "/work/a b";
    r.mode = 0755;
    r.recursive = true;
    auto back = FileRequest::decode(r.encode());
    ASSERT_TRUE(back) << back.error().what();
    EXPECT_EQ(*back, r);
    EXPECT_FALSE(FileRequest::decode(""));
    EXPECT_FALSE(FileRequest::decode("q420\0"));
    EXPECT_FALSE(FileRequest::decode(std::string("r420\0" "0\0" "/a/../b", 13)));
    FileRequest rename;
    rename.op = FileOp::Rename;
    rename.path = "/a";
    rename.to = "/b c/d";
    back = FileRequest::decode(rename.encode());
    ASSERT_TRUE(back) << back.error().what();
    EXPECT_EQ(*back, rename);
    EXPECT_FALSE(FileRequest::decode(std::string("n420\0" "0\0" "/a", 8)));  // no new path
    EXPECT_FALSE(FileRequest::decode(std::string("n420\0" "0\0" "/a\0/../b", 13)));
}

TEST(SessionRequests, RenameTakesItsNewPathAndOnlyRenameDoes) {
    auto f = parse_file_request(R"({"session": "sb-1", "op": "rename", "path": "/w/a", "to": "/w//b/"})");
    ASSERT_TRUE(f) << f.error().what();
    EXPECT_EQ(f->file.op, FileOp::Rename);
    EXPECT_EQ(f->file.to, "/w/b");
    auto missing = parse_file_request(R"({"session": "sb-1", "op": "rename", "path": "/w/a"})");
    ASSERT_FALSE(missing);
    EXPECT_EQ(missing.error().what(), "file: \"to\" is required");
    EXPECT_FALSE(parse_file_request(R"({"session": "sb-1", "op": "stat", "path": "/w/a", "to": "/b"})"));
    EXPECT_FALSE(parse_file_request(R"({"session": "sb-1", "op": "rename", "path": "/w/a", "to": "/x/../y"})"));
    auto stat = parse_file_request(R"({"session": "sb-1", "op": "stat", "path": "/"})");
    ASSERT_TRUE(stat) << stat.error().what();
    EXPECT_EQ(stat->file.op, FileOp::Stat);
}

TEST(SessionRequests, CreateTakesTheSandboxsKeysAndLifetimes) {
    Defaults d;
    auto r = parse_create_request(R"({"memory_mb": 128, "ttl_s": 600, "idle_s": 30, "timeout_ms": 500, "network": true})", d);
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_EQ(r->memory_mb, 128u);
    EXPECT_EQ(r->ttl_s, 600u);
    EXPECT_EQ(r->idle_s, 30u);
    EXPECT_EQ(r->timeout_ms, 500u);
    EXPECT_TRUE(r->network);
    auto defaults = parse_create_request("{}", d);
    ASSERT_TRUE(defaults);
    EXPECT_EQ(defaults->pids, d.pids);
    EXPECT_FALSE(defaults->ttl_s);
    EXPECT_EQ(defaults->idle_s, d.session_idle_s);
    auto typo = parse_create_request(R"({"ttl": 5})", d);
    ASSERT_FALSE(typo);
    EXPECT_EQ(typo.error().what(), "create: \"ttl\" is not a key of a create request");
    EXPECT_FALSE(parse_create_request(R"({"ttl_s": 0})", d));
    EXPECT_FALSE(parse_create_request("[]", d));
}

TEST(SessionRequests, ARunInASessionTakesNoSandboxKeys) {
    Defaults d;
    auto r = parse_run_request(R"({"argv": ["true"], "session": "sb-00ff"})", d);
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_EQ(r->session, "sb-00ff");
    auto limits = parse_run_request(R"({"argv": ["true"], "session": "sb-00ff", "memory_mb": 5})", d);
    ASSERT_FALSE(limits);
    EXPECT_NE(limits.error().what().find("the session's"), std::string::npos);
    EXPECT_FALSE(parse_run_request(R"({"argv": ["true"], "session": "../x"})", d));
}

TEST(SessionRequests, FileForkRefAndList) {
    auto f = parse_file_request(R"({"session": "sb-1", "op": "write", "path": "/w//x", "mode": 448})");
    ASSERT_TRUE(f) << f.error().what();
    EXPECT_EQ(f->file.op, FileOp::Write);
    EXPECT_EQ(f->file.path, "/w/x");
    EXPECT_EQ(f->file.mode, 0700u);
    EXPECT_TRUE(parse_file_request(R"({"session": "sb-1", "op": "diff"})"));
    EXPECT_FALSE(parse_file_request(R"({"session": "sb-1", "op": "read"})"));  // no path
    EXPECT_FALSE(parse_file_request(R"({"session": "sb-1", "op": "chmod", "path": "/"})"));
    EXPECT_FALSE(parse_file_request(R"({"op": "read", "path": "/"})"));
    auto up = parse_file_request(R"({"session": "sb-1", "op": "read", "path": "/a/../../etc/shadow"})");
    ASSERT_FALSE(up);
    EXPECT_NE(up.error().what().find("refused"), std::string::npos);

    auto k = parse_fork_request(R"({"session": "sb-1", "count": 3})");
    ASSERT_TRUE(k);
    EXPECT_EQ(k->count, 3u);
    EXPECT_EQ(parse_fork_request(R"({"session": "sb-1"})")->count, 1u);
    EXPECT_FALSE(parse_fork_request(R"({"session": "sb-1", "count": 17})"));

    EXPECT_EQ(*parse_session_ref(R"({"session": "sb-1"})", "close"), "sb-1");
    auto extra = parse_session_ref(R"({"session": "sb-1", "force": true})", "close");
    ASSERT_FALSE(extra);
    EXPECT_NE(extra.error().what().find("close: \"force\""), std::string::npos);
    EXPECT_FALSE(parse_session_ref("{}", "pause"));
    EXPECT_TRUE(parse_empty_request("", "list"));
    EXPECT_TRUE(parse_empty_request("{}", "keep"));
    auto unknown = parse_empty_request(R"({"all": true})", "keep");
    ASSERT_FALSE(unknown);
    EXPECT_EQ(unknown.error().what(), std::string("keep: \"all\" is not a key of a keep request"));
}

TEST(SessionRequests, FileErrorsCarryTheirErrno) {
    std::string m = format_file_error(2, "/x: open: No such file or directory");
    EXPECT_EQ(m, R"(!{"error":"file_error","errno":2,"message":"/x: open: No such file or directory"})");
}

namespace {

ManifestEntry file(uint64_t size, int64_t mtime) { return ManifestEntry{'f', size, mtime}; }
ManifestEntry dir() { return ManifestEntry{'d', 0, 0}; }
ManifestEntry whiteout() { return ManifestEntry{'w', 0, 0}; }
ManifestEntry opaque_dir() { return ManifestEntry{'d', 0, 0, true}; }
std::vector<std::pair<std::string, char>> nothing_below(const std::string&) { return {}; }

}  // namespace

TEST(SessionDiff, AgainstTheLowerLayer) {
    Manifest base = {{"/tmp", dir()}};
    Manifest now = {{"/tmp", dir()},           {"/tmp/new", file(3, 1)}, {"/etc", dir()},
                    {"/etc/hosts", file(9, 2)}, {"/etc/motd", whiteout()}, {"/work", dir()}};
    auto lower = [](const std::string& p) -> char {
        return p == "/etc" ? 'd' : p == "/etc/hosts" || p == "/etc/motd" ? 'f' : '\0';
    };
    std::vector<Change> want = {{"/etc/hosts", "modified", 'f', 9},
                                {"/etc/motd", "deleted", 'f', 0},
                                {"/tmp/new", "created", 'f', 3},
                                {"/work", "created", 'd', 0}};
    EXPECT_EQ(compute_diff(base, now, lower, nothing_below), want);
}

TEST(SessionDiff, AgainstAForkPoint) {
    auto none = [](const std::string&) { return '\0'; };
    Manifest base = {{"/w", dir()}, {"/w/kept", file(1, 1)}, {"/w/changed", file(1, 1)}, {"/w/gone", file(1, 1)},
                     {"/w/was_deleted", whiteout()}};
    Manifest now = {{"/w", dir()}, {"/w/kept", file(1, 1)}, {"/w/changed", file(2, 5)}, {"/w/was_deleted", file(4, 7)}};
    std::vector<Change> want = {{"/w/changed", "modified", 'f', 2},
                                {"/w/gone", "deleted", 'f', 0},
                                {"/w/was_deleted", "created", 'f', 4}};
    EXPECT_EQ(compute_diff(base, now, none, nothing_below), want);
    EXPECT_EQ(format_changes({want[0]}), R"([{"path":"/w/changed","change":"modified","type":"file","size":2}])");
}

// rm -rf /etc/ssl; mkdir /etc/ssl; touch /etc/ssl/new: overlayfs makes /etc/ssl opaque, with
// no whiteouts for what it hides.
TEST(SessionDiff, ADirectoryMadeAgainHidesTheLowerEntriesBelowIt) {
    Manifest base = {{"/tmp", opaque_dir()}, {"/etc", dir()}, {"/etc/ssl", dir()}, {"/etc/ssl/gone", whiteout()}};
    Manifest now = {{"/tmp", opaque_dir()},      {"/etc", dir()}, {"/etc/ssl", opaque_dir()},
                    {"/etc/ssl/new", file(1, 1)}, {"/etc/ssl/certs", dir()}};
    auto lower = [](const std::string& p) -> char {
        return p == "/etc" || p == "/etc/ssl" || p == "/etc/ssl/certs" || p == "/tmp" ? 'd' : '\0';
    };
    auto below = [](const std::string& p) -> std::vector<std::pair<std::string, char>> {
        if (p == "/tmp") return {{"/tmp/host-file", 'f'}};  // opaque from the start: never seen
        if (p != "/etc/ssl") return {};
        return {{"/etc/ssl/certs", 'd'}, {"/etc/ssl/certs/ca.pem", 'f'}, {"/etc/ssl/gone", 'f'}, {"/etc/ssl/openssl.cnf", 'f'}};
    };
    std::vector<Change> want = {{"/etc/ssl/certs/ca.pem", "deleted", 'f', 0},
                                {"/etc/ssl/new", "created", 'f', 1},
                                {"/etc/ssl/openssl.cnf", "deleted", 'f', 0}};
    EXPECT_EQ(compute_diff(base, now, lower, below), want);
}

TEST(WarmPython, ARunOfPythonCodeIsPython3DashC) {
    Defaults d;
    auto r = parse_run_request(R"J({"python": "print(1)", "preload": ["json", "os.path"]})J", d);
    ASSERT_TRUE(r) << r.error().what();
    EXPECT_EQ(r->argv, (std::vector<std::string>{"python3", "-c", "print(1)"}));
    EXPECT_EQ(r->preload, (std::vector<std::string>{"json", "os.path"}));
    EXPECT_FALSE(parse_run_request(R"J({"python": "print(1)", "argv": ["x"]})J", d));
    EXPECT_FALSE(parse_run_request(R"J({"preload": ["json"], "argv": ["x"]})J", d));
    EXPECT_FALSE(parse_run_request(R"J({"python": "print(1)", "preload": ["os; import x"]})J", d));
    EXPECT_FALSE(parse_run_request(R"J({"python": "print(1)", "preload": [".x"]})J", d));
    EXPECT_FALSE(parse_run_request(R"J({"python": "print(1)", "caps": []})J", d));
    EXPECT_FALSE(parse_run_request("{\"python\": \"a\\u0000b\"}", d));
}

// A fork's copy of its parent's state: files (hard links kept), symlinks as links (never
// followed), FIFOs made, not opened, and subdirectories.
TEST(CopyTree, CopiesWhatAForkCarriesWithoutFollowingOrOpeningIt) {
    char src_tmpl[] = "/tmp/fb-copy-src.XXXXXX", dst_tmpl[] = "/tmp/fb-copy-dst.XXXXXX";
    ASSERT_TRUE(::mkdtemp(src_tmpl));
    ASSERT_TRUE(::mkdtemp(dst_tmpl));
    std::string src = src_tmpl, dst = dst_tmpl;
    auto write = [](const std::string& path, const std::string& text) {
        unique_fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        ASSERT_TRUE(fd);
        ASSERT_EQ(::write(fd.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
    };
    write(src + "/a", "state");
    ASSERT_EQ(::link((src + "/a").c_str(), (src + "/b").c_str()), 0);
    ASSERT_EQ(::symlink("/etc/passwd", (src + "/l").c_str()), 0);
    ASSERT_EQ(::mkfifo((src + "/p").c_str(), 0600), 0);
    ASSERT_EQ(::mkdir((src + "/d").c_str(), 0755), 0);
    write(src + "/d/e", "deep");
    {
        unique_fd from(::open(src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        unique_fd to(::open(dst.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        auto copied = copy_tree(from.get(), to.get());
        ASSERT_TRUE(copied) << copied.error().what();
    }
    struct stat a, b, l, p;
    ASSERT_EQ(::stat((dst + "/a").c_str(), &a), 0);
    ASSERT_EQ(::stat((dst + "/b").c_str(), &b), 0);
    EXPECT_EQ(a.st_ino, b.st_ino);
    EXPECT_EQ(a.st_size, 5);
    ASSERT_EQ(::lstat((dst + "/l").c_str(), &l), 0);
    EXPECT_TRUE(S_ISLNK(l.st_mode));
    ASSERT_EQ(::lstat((dst + "/p").c_str(), &p), 0);
    EXPECT_TRUE(S_ISFIFO(p.st_mode));
    EXPECT_EQ(::access((dst + "/d/e").c_str(), F_OK), 0);
    for (const auto& root : {src, dst}) {
        for (const char* n : {"/a", "/b", "/l", "/p", "/d/e"}) ::unlink((root + n).c_str());
        ::rmdir((root + "/d").c_str());
        ::rmdir(root.c_str());
    }
}

namespace forkbox::sandbox {
namespace {

std::string report_ending_at(Clock::time_point at) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
    return "0 10 20 3000 0 " + std::to_string(ns);
}

// The end a run's init reports is when it reaped the command; the service reads it a
// wake-up later. That later moment is not the command's: duration_ms ends at the reaping.
TEST(EndReport, EndsTheRunWhenItsInitReapedTheCommand) {
    sandbox::Run r;
    r.released = Clock::now() - std::chrono::milliseconds(20);
    auto reaped = r.released + std::chrono::milliseconds(7);
    take_end_report(r, report_ending_at(reaped));
    EXPECT_TRUE(r.exited);
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.ended, reaped);
    EXPECT_EQ(r.usage.ru_maxrss, 3000);
}

TEST(EndReport, AnEndBeforeTheDeadlineReportedAfterItIsNotATimeout) {
    sandbox::Run r;
    r.released = Clock::now() - std::chrono::milliseconds(20);
    r.request.timeout_ms = 10;
    r.deadline = r.released + std::chrono::milliseconds(10);
    r.timed_out = true;  // the timer's event came before the report
    take_end_report(r, report_ending_at(r.released + std::chrono::milliseconds(9)));
    EXPECT_FALSE(r.timed_out);
    // Reaped after the deadline: the kill did it.
    sandbox::Run late;
    late.released = r.released;
    late.request.timeout_ms = 10;
    late.deadline = r.deadline;
    late.timed_out = true;
    take_end_report(late, report_ending_at(late.released + std::chrono::milliseconds(11)));
    EXPECT_TRUE(late.timed_out);
}

// At a deadline the service SIGKILLs the command itself and, awake, sees it die before its
// init wakes to reap it: a timed-out run ends at that sight, the earlier of the two.
TEST(EndReport, ATimedOutRunEndsWhenTheServiceSawItsKilledProcessesDead) {
    auto released = Clock::now() - std::chrono::milliseconds(20);
    auto deadline = released + std::chrono::milliseconds(10);
    auto timed_out_run = [&](std::chrono::microseconds seen_after_deadline) {
        auto r = std::make_unique<sandbox::Run>();
        r->released = released;
        r->request.timeout_ms = 10;
        r->deadline = deadline;
        r->timed_out = true;
        r->killed_seen_dead = deadline + seen_after_deadline;
        return r;
    };
    auto seen_first = timed_out_run(std::chrono::microseconds(150));
    take_end_report(*seen_first, report_ending_at(deadline + std::chrono::microseconds(400)));
    EXPECT_TRUE(seen_first->timed_out);
    EXPECT_EQ(seen_first->ended, deadline + std::chrono::microseconds(150));
    // Reaped (and reported) before the service looked: the report's end stays.
    auto reaped_first = timed_out_run(std::chrono::microseconds(500));
    take_end_report(*reaped_first, report_ending_at(deadline + std::chrono::microseconds(300)));
    EXPECT_EQ(reaped_first->ended, deadline + std::chrono::microseconds(300));
    // Only a run that timed out: an end before the deadline is the report's.
    auto early = timed_out_run(std::chrono::microseconds(100));
    take_end_report(*early, report_ending_at(released + std::chrono::milliseconds(9)));
    EXPECT_FALSE(early->timed_out);
    EXPECT_EQ(early->ended, released + std::chrono::milliseconds(9));
}

// The init runs beside untrusted code: an end before the release or after now is not taken.
TEST(EndReport, AnImpossibleEndIsNotTaken) {
    for (auto offset : {std::chrono::milliseconds(-5), std::chrono::milliseconds(60000)}) {
        sandbox::Run r;
        r.released = Clock::now() - std::chrono::milliseconds(20);
        auto before = Clock::now();
        take_end_report(r, report_ending_at(r.released + offset));
        EXPECT_GE(r.ended, before);
    }
    sandbox::Run old_format;
    old_format.released = Clock::now();
    auto before = Clock::now();
    take_end_report(old_format, "0 10 20 3000 0");
    EXPECT_GE(old_format.ended, before);
}

}  // namespace
}  // namespace forkbox::sandbox
