#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "libforkbox/base/fd.hpp"
#include "libforkbox/base/flock.hpp"

using namespace forkbox;

namespace {
const char* kLocks =
    "1: POSIX  ADVISORY  WRITE 700 fe:00:42 0 EOF\n"
    "2: FLOCK  ADVISORY  WRITE 10816 fe:00:10952925 0 EOF\n"
    "2: -> FLOCK  ADVISORY  WRITE 10823 fe:00:10952925 0 EOF\n"
    "3: FLOCK  ADVISORY  READ 99 00:1a:10952925 0 EOF\n";
}  // namespace

TEST(FlockHolder, TheHolderOfTheFilesFlockIsFound) {
    EXPECT_EQ(parse_flock_holder(kLocks, ::makedev(0xfe, 0), 10952925), 10816);
}

TEST(FlockHolder, TheDeviceTellsFilesWithOneInodeNumberApart) {
    EXPECT_EQ(parse_flock_holder(kLocks, ::makedev(0, 0x1a), 10952925), 99);
}

TEST(FlockHolder, AWaiterOrAPosixLockIsNoHolder) {
    EXPECT_EQ(parse_flock_holder("1: -> FLOCK  ADVISORY  WRITE 5 fe:00:7 0 EOF\n", ::makedev(0xfe, 0), 7),
              std::nullopt);
    EXPECT_EQ(parse_flock_holder(kLocks, ::makedev(0xfe, 0), 42), std::nullopt);
}

TEST(FlockHolder, GarbageIsNoHolder) {
    EXPECT_EQ(parse_flock_holder("", 0, 0), std::nullopt);
    EXPECT_EQ(parse_flock_holder("1: FLOCK\n2: FLOCK ADVISORY WRITE x fe:00:7 0 EOF\n3:", ::makedev(0xfe, 0), 7),
              std::nullopt);
    EXPECT_EQ(parse_flock_holder("1: FLOCK  ADVISORY  WRITE 5 fe00:7 0 EOF", ::makedev(0xfe, 0), 7), std::nullopt);
}

TEST(FlockHolder, TheKernelNamesAChildHoldingALockOnAFile) {
    char path[] = "/tmp/fb-flock-test.XXXXXX";
    unique_fd fd(::mkstemp(path));
    ASSERT_TRUE(fd);
    ::unlink(path);
    EXPECT_EQ(flock_holder(fd.get()), std::nullopt);
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        unique_fd own(::open(("/proc/self/fd/" + std::to_string(fd.get())).c_str(), O_RDWR));
        if (!own || ::flock(own.get(), LOCK_EX) < 0) ::_exit(1);
        (void)!::write(ready[1], "1", 1);
        ::pause();
        ::_exit(0);
    }
    char c;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    EXPECT_EQ(flock_holder(fd.get()), child);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    EXPECT_EQ(flock_holder(fd.get()), std::nullopt);
    ::close(ready[0]);
    ::close(ready[1]);
}
