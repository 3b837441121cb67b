#include "libforkbox/base/clock.hpp"
#include "libforkbox/container/state.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

using namespace forkbox;

namespace {

ContainerState full_state() {
    ContainerState s;
    s.oci_version = "1.3.0";
    s.id = "web-1";
    s.pid = 4242;
    s.pid_start_time = 123456789;
    s.bundle = "/run/bundles/web-1";
    s.rootfs = "/run/bundles/web-1/rootfs";
    s.created = "2026-12-01T03:44:33.123456789Z";
    s.owner = "root";
    s.annotations = {{"org.example.a", "1"}, {"org.example.b", "two"}};
    s.own_pid_namespace = true;
    s.cgroup_dirs = {"/sys/fs/cgroup/memory/forkbox/web-1", "/sys/fs/cgroup/unified/forkbox/web-1"};
    s.cgroup_dirs_created = {"/sys/fs/cgroup/memory/forkbox", "/sys/fs/cgroup/memory/forkbox/web-1"};
    s.net_devices = {{"enp7s0", "eth1"}, {"dummy0", "dummy0"}};
    return s;
}

ContainerState round_trip(const ContainerState& s) {
    auto r = parse_state(serialize_state(s));
    EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().what());
    return r ? *r : ContainerState{};
}

void expect_same(const ContainerState& a, const ContainerState& b) {
    EXPECT_EQ(a.oci_version, b.oci_version);
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.pid, b.pid);
    EXPECT_EQ(a.pid_start_time, b.pid_start_time);
    EXPECT_EQ(a.bundle, b.bundle);
    EXPECT_EQ(a.rootfs, b.rootfs);
    EXPECT_EQ(a.created, b.created);
    EXPECT_EQ(a.owner, b.owner);
    EXPECT_EQ(a.annotations, b.annotations);
    EXPECT_EQ(a.own_pid_namespace, b.own_pid_namespace);
    EXPECT_EQ(a.cgroup_dirs, b.cgroup_dirs);
    EXPECT_EQ(a.cgroup_dirs_created, b.cgroup_dirs_created);
    EXPECT_EQ(a.systemd_unit, b.systemd_unit);
    EXPECT_EQ(a.net_devices, b.net_devices);
}

bool id_ok(const std::string& id) { return validate_container_id(id).has_value(); }

}  // namespace

// ---- serialize_state / parse_state ----

TEST(State, EveryFieldSurvivesARoundTrip) {
    auto s = full_state();
    expect_same(round_trip(s), s);
}

TEST(State, DefaultStateSurvivesARoundTrip) {
    ContainerState s;
    expect_same(round_trip(s), s);
}

TEST(State, StringsNeedingJsonEscapesSurviveARoundTrip) {
    auto s = full_state();
    s.annotations = {{"quote\"key", "back\\slash"}, {"ctl", "line\nbreak\ttab\x01"}, {"utf8", "h\xc3\xa9llo"}};
    s.bundle = "/run/bundle with space/\"x\"";
    expect_same(round_trip(s), s);
}

// The start time is a raw kernel counter: it must not be squeezed through int64 or a double.
TEST(State, PidStartTimeAboveInt64MaxSurvivesARoundTrip) {
    auto s = full_state();
    s.pid_start_time = UINT64_MAX;
    EXPECT_EQ(round_trip(s).pid_start_time, UINT64_MAX);
}

TEST(State, SerializedStateUsesTheOciFieldNames) {
    auto text = serialize_state(full_state());
    EXPECT_NE(text.find("\"ociVersion\":\"1.3.0\""), std::string::npos) << text;
    EXPECT_NE(text.find("\"id\":\"web-1\""), std::string::npos) << text;
    EXPECT_NE(text.find("\"pid\":4242"), std::string::npos) << text;
    EXPECT_NE(text.find("\"bundle\":\"/run/bundles/web-1\""), std::string::npos) << text;
}

TEST(State, EmptyObjectParsesToDefaults) {
    auto r = parse_state("{}");
    ASSERT_TRUE(r.has_value()) << r.error().what();
    expect_same(*r, ContainerState{});
}

TEST(State, UnknownFieldsAreIgnored) {
    auto r = parse_state(R"({"id":"a","status":"running","future":{"x":[1,2]}})");
    ASSERT_TRUE(r.has_value()) << r.error().what();
    EXPECT_EQ(r->id, "a");
}

TEST(State, TheSystemdDriversUnitSurvivesARoundTrip) {
    ContainerState s = full_state();
    s.systemd_unit = "libpod-web-1.scope";
    std::string json = serialize_state(s);
    EXPECT_NE(json.find(R"("cgroupDriver":"systemd")"), std::string::npos);
    expect_same(round_trip(s), s);
    // cgroupfs containers' state has neither field.
    EXPECT_EQ(serialize_state(full_state()).find("cgroupDriver"), std::string::npos);
}

TEST(State, AnUnknownCgroupDriverOrASystemdDriverWithoutItsUnitIsAnError) {
    EXPECT_FALSE(parse_state(R"({"cgroupDriver":"lxcfs"})"));
    EXPECT_FALSE(parse_state(R"({"cgroupDriver":"systemd"})"));
}

TEST(State, NonObjectIsAnError) { EXPECT_FALSE(parse_state("[]").has_value()); }

TEST(State, InvalidJsonIsAnError) { EXPECT_FALSE(parse_state("{\"id\":").has_value()); }

TEST(State, PidOfTheWrongTypeIsAnError) { EXPECT_FALSE(parse_state(R"({"pid":"42"})").has_value()); }

// Found by tests/fuzz/state.cpp: 4294967297 was cut to 32 bits and read as pid 1.
TEST(State, PidOutsideThePidRangeIsAnError) {
    EXPECT_FALSE(parse_state(R"({"pid":4294967297})").has_value());
    EXPECT_FALSE(parse_state(R"({"pid":2147483648})").has_value());
    EXPECT_FALSE(parse_state(R"({"pid":-1})").has_value());
    auto r = parse_state(R"({"pid":2147483647})");
    ASSERT_TRUE(r.has_value()) << r.error().what();
    EXPECT_EQ(r->pid, 2147483647);
}

TEST(State, NonStringAnnotationIsAnError) {
    EXPECT_FALSE(parse_state(R"({"annotations":{"a":1}})").has_value());
}

TEST(State, NonArrayCgroupDirsIsAnError) {
    EXPECT_FALSE(parse_state(R"({"cgroupDirs":"/sys/fs/cgroup"})").has_value());
}

// ---- validate_container_id ----

TEST(ContainerId, LettersDigitsAndUnderscorePlusMinusDotAreAccepted) {
    EXPECT_TRUE(id_ok("Web_1+a-b.c"));
}

TEST(ContainerId, SingleCharacterIsAccepted) { EXPECT_TRUE(id_ok("a")); }

TEST(ContainerId, EmptyIsRefused) {
    auto r = validate_container_id("");
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().errnum(), EINVAL);
    EXPECT_EQ(r.error().what(), "container id cannot be empty");
}

TEST(ContainerId, DotIsRefused) { EXPECT_FALSE(id_ok(".")); }

TEST(ContainerId, DotDotIsRefused) { EXPECT_FALSE(id_ok("..")); }

TEST(ContainerId, ThreeDotsIsAccepted) { EXPECT_TRUE(id_ok("...")); }

TEST(ContainerId, LeadingDotIsAccepted) { EXPECT_TRUE(id_ok(".hidden")); }

TEST(ContainerId, SlashIsRefusedWithTheIdInTheMessage) {
    auto r = validate_container_id("a/b");
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().errnum(), EINVAL);
    EXPECT_EQ(r.error().what(), "invalid container ID format: a/b");
}

TEST(ContainerId, PathTraversalIsRefused) { EXPECT_FALSE(id_ok("../etc")); }

TEST(ContainerId, SpaceIsRefused) { EXPECT_FALSE(id_ok("a b")); }

TEST(ContainerId, ColonIsRefused) { EXPECT_FALSE(id_ok("a:b")); }

TEST(ContainerId, NulByteIsRefused) { EXPECT_FALSE(id_ok(std::string("a\0b", 3))); }

TEST(ContainerId, NonAsciiIsRefused) { EXPECT_FALSE(id_ok("caf\xc3\xa9")); }

TEST(ContainerId, ExactlyMaxLengthIsAccepted) { EXPECT_TRUE(id_ok(std::string(1024, 'a'))); }

TEST(ContainerId, LongerThanMaxLengthIsRefused) {
    auto r = validate_container_id(std::string(1025, 'a'));
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().what(), "invalid container ID format: longer than 1024 bytes");
}

TEST(Rfc3339Utc, MatchesGmtime) {
    // Epoch, leap days, century rules, far future, and one second before the epoch.
    const int64_t samples[] = {0, 951782400, 951868800, 1796114919, 4102444800, 253402300799, -1, 68256000};
    for (int64_t t : samples) {
        time_t tt = static_cast<time_t>(t);
        struct tm tm;
        ASSERT_NE(gmtime_r(&tt, &tm), nullptr);
        char want[64];
        size_t n = strftime(want, sizeof want, "%Y-%m-%dT%H:%M:%S", &tm);
        std::snprintf(want + n, sizeof want - n, ".%09dZ", 123);
        EXPECT_EQ(forkbox::rfc3339_utc(t, 123), want) << t;
    }
}

TEST(BundleId, IsTheBundleNameAndTheSuffix) {
    EXPECT_EQ(container_id_for_bundle("app", "0123abcd"), "app-0123abcd");
    EXPECT_TRUE(id_ok(container_id_for_bundle("app", random_id_suffix())));
}

TEST(BundleId, CharactersAnIdCannotHoldBecomeDashes) {
    EXPECT_EQ(container_id_for_bundle("my bundle:v1", "00000000"), "my-bundle-v1-00000000");
    EXPECT_EQ(container_id_for_bundle("caf\xc3\xa9", "00000000"), "caf---00000000");
}

TEST(BundleId, ANameOfDotsOrNothingBecomesBundle) {
    EXPECT_EQ(container_id_for_bundle("", "00000000"), "bundle-00000000");
    EXPECT_EQ(container_id_for_bundle("..", "00000000"), "bundle-00000000");
    EXPECT_EQ(container_id_for_bundle("/", "00000000"), "bundle-00000000");
}

TEST(BundleId, ALongNameIsCutTo64Bytes) {
    EXPECT_EQ(container_id_for_bundle(std::string(300, 'x'), "00000000"), std::string(64, 'x') + "-00000000");
}

TEST(BundleId, SuffixesDiffer) {
    EXPECT_NE(random_id_suffix(), random_id_suffix());
    EXPECT_EQ(random_id_suffix().size(), 8u);
}

// ---- StateStore: create against concurrent verbs ----

namespace {

class StateRoot {
public:
    explicit StateRoot(const std::string& under = "/tmp") {
        std::string tmpl = under + "/fb-state-test.XXXXXX";
        path_ = ::mkdtemp(tmpl.data());
    }
    ~StateRoot() { std::system(("rm -rf '" + path_ + "'").c_str()); }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

bool linked_at(const ContainerDir& dir) {
    struct stat by_fd, by_path;
    return ::fstat(dir.fd(), &by_fd) == 0 && by_fd.st_nlink > 0 && ::stat(dir.path().c_str(), &by_path) == 0 &&
           by_fd.st_ino == by_path.st_ino && by_fd.st_dev == by_path.st_dev;
}

}  // namespace

// `delete --force` of an id being created, or being deleted (4 processes creating and deleting one id): the
// deleter must never find the directory before its creator holds the lock, or it removes
// it under the create (which then fails, or writes into a directory nobody can see).
TEST(StateStore, ACreatedDirectoryIsLockedBeforeAnyoneCanOpenIt) {
    StateRoot root;
    StateStore store(root.path());
    std::atomic<bool> stop{false};
    std::atomic<int> removed_under_create{0};
    std::thread deleter([&] {
        while (!stop) {
            auto dir = store.open("churn");
            if (!dir) continue;
            // What delete --force does with a directory that has no state yet.
            if (::faccessat(dir->fd(), kStateFile, F_OK, 0) < 0) {
                removed_under_create++;
                (void)dir->remove();
            }
        }
    });
    int failed = 0, unlinked = 0, not_removed = 0;
    for (int i = 0; i < 1000; ++i) {
        auto dir = store.create("churn");
        if (!dir) {
            ++failed;
            continue;
        }
        if (!linked_at(*dir)) ++unlinked;
        (void)dir->write_state(ContainerState{});
        // An open racing with the removal must not bring the lock file back (ENOTEMPTY).
        if (!dir->remove()) ++not_removed;
    }
    stop = true;
    deleter.join();
    EXPECT_EQ(failed, 0);
    EXPECT_EQ(unlinked, 0);
    EXPECT_EQ(not_removed, 0);
    EXPECT_EQ(removed_under_create, 0);
}

TEST(StateStore, ACreateOfATakenIdSaysSoAndLeavesNothing) {
    StateRoot root;
    StateStore store(root.path());
    auto first = store.create("taken");
    ASSERT_TRUE(first.has_value()) << first.error().what();
    auto second = store.create("taken");
    ASSERT_FALSE(second.has_value());
    EXPECT_EQ(second.error().errnum(), EEXIST);
    EXPECT_NE(second.error().what().find("container with id exists: taken"), std::string::npos);
    auto ids = store.list();
    ASSERT_TRUE(ids.has_value());
    EXPECT_EQ(*ids, std::vector<std::string>{"taken"});
    // Nothing else in the root: no staging directory stayed.
    int entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(root.path())) entries += e.is_directory();
    EXPECT_EQ(entries, 1);
}

// A create SIGKILLed between making its directory and naming it leaves a staging
// directory: list never shows it, and it is not a container.
TEST(StateStore, StagingDirectoriesAreNotContainers) {
    StateRoot root;
    StateStore store(root.path());
    ASSERT_EQ(::mkdir((root.path() + "/x~1234abcd").c_str(), 0711), 0);
    auto ids = store.list();
    ASSERT_TRUE(ids.has_value());
    EXPECT_TRUE(ids->empty());
}

// Readers take no lock (state, ps, list, exec): one that has read a container's state and
// then finds none is watching a delete empty the directory, and must see it so, never as a
// container being created (whose lock file is there, locked, before its first state).
TEST(StateStore, AReaderThatLosesTheStateToADeleteSeesItBeingRemoved) {
    StateRoot root("/dev/shm");  // tmpfs, as /run is on a host: it lists the newest files first
    StateStore store(root.path());
    std::atomic<bool> stop{false};
    std::atomic<int> lost{0}, unexplained{0};
    std::thread reader([&] {
        while (!stop) {
            auto dir = store.open("gone", StateStore::Lock::None);
            if (!dir || !dir->read_state()) continue;
            while (!stop) {
                auto st = dir->read_state();
                if (st) continue;
                lost++;
                if (st.error().errnum() != ENOENT || dir->locked_elsewhere() || !dir->being_removed()) unexplained++;
                break;
            }
        }
    });
    for (int i = 0; i < 2000; ++i) {
        auto dir = store.create("gone");
        ASSERT_TRUE(dir.has_value()) << dir.error().what();
        ASSERT_TRUE(dir->write_state(ContainerState{}).has_value());
        EXPECT_FALSE(dir->being_removed());
        std::this_thread::sleep_for(std::chrono::microseconds(50));  // for the reader to read it
        ASSERT_TRUE(dir->remove().has_value());
        EXPECT_TRUE(dir->being_removed());
    }
    stop = true;
    reader.join();
    EXPECT_GT(lost, 0);
    EXPECT_EQ(unexplained, 0) << "of " << lost << " readers that lost the state";
}
