#include "libforkbox/seccomp/cache.hpp"

#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "libforkbox/container/state.hpp"
#include "oci/default_seccomp.hpp"

using namespace forkbox;

namespace {

oci::Seccomp small_profile(const std::string& denied = "mount") {
    oci::Seccomp sc;
    sc.default_action = "SCMP_ACT_ALLOW";
    oci::SeccompSyscall s;
    s.names = {denied};
    s.action = "SCMP_ACT_ERRNO";
    sc.syscalls.push_back(s);
    return sc;
}

SeccompProgram program_of(std::vector<sock_filter> bpf, unsigned flags = 0) {
    SeccompProgram p;
    p.bpf = std::move(bpf);
    p.flags = flags;
    return p;
}

// The cache file of small_profile() for this process.
std::string entry_name() {
    return seccomp_cache_file_name(seccomp_cache_key(small_profile(), seccomp_cache_environment()));
}

std::string entry_for(const SeccompProgram& p) {
    return encode_seccomp_cache_entry(seccomp_cache_key(small_profile(), seccomp_cache_environment()), p);
}

bool same_bpf(const SeccompProgram& a, const SeccompProgram& b) {
    if (a.bpf.size() != b.bpf.size()) return false;
    for (size_t i = 0; i < a.bpf.size(); ++i) {
        if (a.bpf[i].code != b.bpf[i].code || a.bpf[i].jt != b.bpf[i].jt ||
            a.bpf[i].jf != b.bpf[i].jf || a.bpf[i].k != b.bpf[i].k)
            return false;
    }
    return a.flags == b.flags;
}

// A scratch state root, removed with everything in it.
class TempRoot {
public:
    TempRoot() {
        char tmpl[] = "/tmp/forkbox-seccomp-cache-XXXXXX";
        path_ = ::mkdtemp(tmpl);
    }
    ~TempRoot() {
        for (const auto& n : entries()) ::unlink((path_ + "/" + n).c_str());
        ::rmdir(path_.c_str());
    }
    const std::string& path() const { return path_; }
    std::vector<std::string> entries() const {
        std::vector<std::string> out;
        DIR* d = ::opendir(path_.c_str());
        if (!d) return out;
        while (auto* e = ::readdir(d)) {
            std::string n = e->d_name;
            if (n != "." && n != "..") out.push_back(n);
        }
        ::closedir(d);
        return out;
    }
    void write(const std::string& name, const std::string& data) const {
        std::string path = path_ + "/" + name;
        int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
        ::close(fd);
    }

private:
    std::string path_;
};

}  // namespace

TEST(SeccompCache, KeyHoldsTheEnvironmentAndTheWholeProfile) {
    std::string a = seccomp_cache_key(small_profile("mount"), "env-1");
    EXPECT_TRUE(a.starts_with("env-1\n"));
    EXPECT_NE(a.find("\"mount\""), std::string::npos);
    EXPECT_NE(a, seccomp_cache_key(small_profile("umount2"), "env-1"));
    EXPECT_NE(a, seccomp_cache_key(small_profile("mount"), "env-2"));
    EXPECT_EQ(a, seccomp_cache_key(small_profile("mount"), "env-1"));
}

TEST(SeccompCache, FileNameCannotBeAContainerId) {
    std::string name = seccomp_cache_file_name("some key");
    EXPECT_TRUE(name.starts_with(".seccomp="));
    EXPECT_EQ(name.size(), std::string(".seccomp=").size() + 16);
    EXPECT_FALSE(validate_container_id(name));
    EXPECT_NE(name, seccomp_cache_file_name("some other key"));
}

TEST(SeccompCache, EntryRoundTripsForItsOwnKeyOnly) {
    SeccompProgram p = program_of({{0x20, 0, 0, 4}, {0x06, 0, 0, 0x7fff0000}}, 4);
    std::string data = encode_seccomp_cache_entry("key", p);
    auto back = decode_seccomp_cache_entry(data, "key");
    ASSERT_TRUE(back);
    EXPECT_TRUE(same_bpf(*back, p));
    EXPECT_FALSE(decode_seccomp_cache_entry(data, "kez"));
    EXPECT_FALSE(decode_seccomp_cache_entry(data, "key2"));
}

TEST(SeccompCache, TruncatedPaddedOrForeignDataIsAMiss) {
    SeccompProgram p = program_of({{0x06, 0, 0, 0x7fff0000}});
    std::string data = encode_seccomp_cache_entry("key", p);
    EXPECT_FALSE(decode_seccomp_cache_entry(data.substr(0, data.size() - 1), "key"));
    EXPECT_FALSE(decode_seccomp_cache_entry(data + "x", "key"));
    EXPECT_FALSE(decode_seccomp_cache_entry("", "key"));
    std::string foreign = data;
    foreign[0] = 'X';
    EXPECT_FALSE(decode_seccomp_cache_entry(foreign, "key"));
    EXPECT_FALSE(decode_seccomp_cache_entry(encode_seccomp_cache_entry("key", program_of({})), "key"));
}

TEST(SeccompCache, SecondCompileIsServedFromTheRoot) {
    TempRoot root;
    auto first = compile_seccomp_cached(small_profile(), root.path());
    ASSERT_TRUE(first) << first.error().what();
    auto names = root.entries();
    ASSERT_EQ(names.size(), 1u);
    std::string name = entry_name();
    EXPECT_EQ(names[0], name);

    // Replace the program in the entry: a hit must return what the file holds.
    SeccompProgram marker = program_of({{0x06, 0, 0, 0x7fff0000}});
    root.write(name, entry_for(marker));
    auto second = compile_seccomp_cached(small_profile(), root.path());
    ASSERT_TRUE(second);
    EXPECT_TRUE(same_bpf(*second, marker));
}

TEST(SeccompCache, EntriesKeyedByTheProfilesTextAreFoundWithoutParsing) {
    TempRoot root;
    const std::string text = R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mount"], "action": "SCMP_ACT_ERRNO"}]})";
    EXPECT_FALSE(find_cached_seccomp(text, root.path()));
    auto compiled = compile_seccomp_cached(small_profile(), root.path(), text);
    ASSERT_TRUE(compiled) << compiled.error().what();
    auto found = find_cached_seccomp(text, root.path());
    ASSERT_TRUE(found);
    EXPECT_TRUE(same_bpf(*found, *compiled));
    // Another text, even of the same profile, is another key; a root that is not there, none.
    EXPECT_FALSE(find_cached_seccomp(text + " ", root.path()));
    EXPECT_FALSE(find_cached_seccomp(text, "/nonexistent/forkbox-root"));
    EXPECT_EQ(seccomp_cache_key(small_profile(), "env"),
              seccomp_cache_key(std::string_view(seccomp_cache_key(small_profile(), "").substr(1)), "env"));
}

TEST(SeccompCache, TheEnvironmentNamesThisBuildOfTheBinary) {
    std::string env = seccomp_cache_environment();
    auto at = env.find(" build ");
    ASSERT_NE(at, std::string::npos) << env;  // gcc links a GNU build ID by default
    std::string id = env.substr(at + 7, env.find(';', at) - at - 7);
    EXPECT_GE(id.size(), 16u) << env;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << env;
    EXPECT_EQ(env, seccomp_cache_environment());
}

TEST(SeccompCache, ACorruptEntryIsRecompiledAndReplaced) {
    TempRoot root;
    auto fresh = compile_seccomp(small_profile());
    ASSERT_TRUE(fresh);
    std::string name = entry_name();
    root.write(name, "garbage");
    auto p = compile_seccomp_cached(small_profile(), root.path());
    ASSERT_TRUE(p);
    EXPECT_TRUE(same_bpf(*p, *fresh));
    auto again = compile_seccomp_cached(small_profile(), root.path());
    ASSERT_TRUE(again);
    EXPECT_TRUE(same_bpf(*again, *fresh));
    EXPECT_EQ(root.entries().size(), 1u) << "no temporary file left behind";
}

TEST(SeccompCache, AMissingRootOnlyMeansNoCache) {
    auto p = compile_seccomp_cached(small_profile(), "/nonexistent/forkbox-root");
    ASSERT_TRUE(p) << p.error().what();
    EXPECT_FALSE(p->bpf.empty());
}

TEST(SeccompCache, ErrorsOfTheProfileStillReachTheCaller) {
    TempRoot root;
    oci::Seccomp bad = small_profile();
    bad.default_action = "SCMP_ACT_BOGUS";
    EXPECT_FALSE(compile_seccomp_cached(bad, root.path()));
    EXPECT_TRUE(root.entries().empty());
}

TEST(SeccompCache, OnlyTheNewestEntriesAreKept) {
    TempRoot root;
    for (size_t i = 0; i < kSeccompCacheEntries + 3; ++i) {
        std::string name = ".seccomp=old" + std::to_string(i);
        root.write(name, "x");
        struct timespec times[2] = {{1000, 0}, {static_cast<time_t>(1000 + i), 0}};
        ::utimensat(AT_FDCWD, (root.path() + "/" + name).c_str(), times, 0);
    }
    root.write("a-container-dir-stand-in", "not a cache entry");
    ASSERT_TRUE(compile_seccomp_cached(small_profile(), root.path()));
    auto names = root.entries();
    size_t cache_files = 0;
    bool newest_kept = false, oldest_kept = false, other_kept = false;
    std::string mine = entry_name();
    for (const auto& n : names) {
        if (n.starts_with(".seccomp=")) ++cache_files;
        newest_kept |= n == mine;
        oldest_kept |= n == ".seccomp=old0";
        other_kept |= n == "a-container-dir-stand-in";
    }
    EXPECT_EQ(cache_files, kSeccompCacheEntries);
    EXPECT_TRUE(newest_kept);
    EXPECT_FALSE(oldest_kept);
    EXPECT_TRUE(other_kept);
}
