// memory-costs: what the kernel (and the hypervisor under it) charges for the operations a
// container or sandbox start is made of, on this machine. Where forkbox's own work goes on
// these PVM guests is mostly here, not in its instructions: per syscall, per page fault, per
// page first touched, per fork. Each figure is per operation (per page for the page rows).
//
//   syscall               getppid, in a tight loop
//   anon fault            first write to a fresh anonymous page (zero fill)
//   anon populate         MADV_POPULATE_WRITE of fresh anonymous pages, per page
//   anon first touch      the first read of a page populated just before: no guest fault,
//                         what remains is the hypervisor's (its shadow page tables)
//   file fault            first read of a fresh private mapping of a file in the page cache,
//                         every 64 KiB (the kernel maps 16 pages around each fault)
//   file populate         MADV_POPULATE_READ of that mapping, per page
//   file first touch      the first read of a populated file page
//   fork (parent's side)  fork() of this small process until it returns in the parent
//   child exit, reaped    from there until waitpid has reaped the child, which exits at once
//   COW fault             a forked child's first write to a page it shares with its parent
//   COW populate          MADV_POPULATE_WRITE of shared pages in a forked child, per page
//
// usage: build/bench-memory-costs [FILE] [ROUNDS]
//   FILE: a file of at least 4 MiB for the file rows (default /proc/self/exe, this program:
//   smaller, then the rows use what there is); ROUNDS (default 20): each row's median is over
//   that many rounds. `make build/bench-memory-costs` builds it; bench/floor.sh runs it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "libforkbox/base/syscalls.hpp"  // MADV_POPULATE_* on older headers

using forkbox::bench::now_us;
using forkbox::bench::quantile;

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kPages = 256;  // per round, for the page rows

char* fresh_anon(size_t pages) {
    void* p = ::mmap(nullptr, pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        std::perror("mmap");
        std::exit(1);
    }
    return static_cast<char*>(p);
}

void touch_read(const char* p, size_t pages, size_t stride = kPage) {
    for (size_t o = 0; o < pages * kPage; o += stride) (void)*static_cast<const volatile char*>(p + o);
}

void touch_write(char* p, size_t pages) {
    for (size_t i = 0; i < pages; ++i) *static_cast<volatile char*>(p + i * kPage) = 1;
}

// Runs `round` ROUNDS times; each returns the microseconds of one operation.
void row(const char* name, int rounds, const std::function<double()>& round) {
    std::vector<double> v;
    for (int i = 0; i < rounds; ++i) v.push_back(round());
    std::printf("%-20s %9.2f %9.2f %9.2f\n", name, quantile(v, 0.1), quantile(v, 0.5), quantile(v, 0.9));
}

// In a forked child: `work` timed there, its microseconds sent back through a pipe.
double in_child(const std::function<double()>& work) {
    int p[2];
    if (::pipe(p) < 0) return -1;
    pid_t pid = ::fork();
    if (pid == 0) {
        double t = work();
        (void)!::write(p[1], &t, sizeof t);
        ::_exit(0);
    }
    double t = -1;
    (void)!::read(p[0], &t, sizeof t);
    ::waitpid(pid, nullptr, 0);
    ::close(p[0]);
    ::close(p[1]);
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    const char* file = argc > 1 ? argv[1] : "/proc/self/exe";
    int rounds = argc > 2 ? std::atoi(argv[2]) : 20;
    int fd = ::open(file, O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) < 0) {
        std::perror(file);
        return 1;
    }
    size_t file_pages = std::min<size_t>(static_cast<size_t>(st.st_size) / kPage, 1024);
    if (file_pages < 16) {
        std::fprintf(stderr, "bench-memory-costs: %s is too small\n", file);
        return 1;
    }
    {  // the file in the page cache
        char* p = static_cast<char*>(::mmap(nullptr, file_pages * kPage, PROT_READ, MAP_PRIVATE, fd, 0));
        touch_read(p, file_pages);
        ::munmap(p, file_pages * kPage);
    }
    // A shared region for the COW rows: written by the parent before each fork.
    char* shared = fresh_anon(kPages);
    touch_write(shared, kPages);

    std::printf("operation            p10 us    median       p90   (%d rounds; page rows per page, %zu pages a round)\n",
                rounds, kPages);
    row("syscall", rounds, [] {
        double t0 = now_us();
        for (int i = 0; i < 1000; ++i) ::syscall(SYS_getppid);
        return (now_us() - t0) / 1000;
    });
    row("anon fault", rounds, [] {
        char* p = fresh_anon(kPages);
        double t0 = now_us();
        touch_write(p, kPages);
        double t = (now_us() - t0) / kPages;
        ::munmap(p, kPages * kPage);
        return t;
    });
    row("anon populate", rounds, [] {
        char* p = fresh_anon(kPages);
        double t0 = now_us();
        ::madvise(p, kPages * kPage, MADV_POPULATE_WRITE);
        double t = (now_us() - t0) / kPages;
        ::munmap(p, kPages * kPage);
        return t;
    });
    row("anon first touch", rounds, [] {
        char* p = fresh_anon(kPages);
        ::madvise(p, kPages * kPage, MADV_POPULATE_WRITE);
        double t0 = now_us();
        touch_read(p, kPages);
        double t = (now_us() - t0) / kPages;
        ::munmap(p, kPages * kPage);
        return t;
    });
    auto map_file = [&] { return static_cast<char*>(::mmap(nullptr, file_pages * kPage, PROT_READ, MAP_PRIVATE, fd, 0)); };
    row("file fault (64 KiB)", rounds, [&] {
        char* p = map_file();
        double t0 = now_us();
        touch_read(p, file_pages, 16 * kPage);
        double t = (now_us() - t0) / static_cast<double>(file_pages / 16);
        ::munmap(p, file_pages * kPage);
        return t;
    });
    row("file populate", rounds, [&] {
        char* p = map_file();
        double t0 = now_us();
        ::madvise(p, file_pages * kPage, MADV_POPULATE_READ);
        double t = (now_us() - t0) / static_cast<double>(file_pages);
        ::munmap(p, file_pages * kPage);
        return t;
    });
    row("file first touch", rounds, [&] {
        char* p = map_file();
        ::madvise(p, file_pages * kPage, MADV_POPULATE_READ);
        double t0 = now_us();
        touch_read(p, file_pages);
        double t = (now_us() - t0) / static_cast<double>(file_pages);
        ::munmap(p, file_pages * kPage);
        return t;
    });
    std::vector<double> waits;
    row("fork (parent's side)", rounds, [&] {
        double t0 = now_us();
        pid_t pid = ::fork();
        if (pid == 0) ::_exit(0);
        double t = now_us() - t0;
        ::waitpid(pid, nullptr, 0);
        waits.push_back(now_us() - t0 - t);
        return t;
    });
    row("child exit, reaped", rounds, [&, i = size_t{0}]() mutable { return waits[i++ % waits.size()]; });
    row("COW fault", rounds, [&] {
        touch_write(shared, kPages);
        return in_child([&] {
            double t0 = now_us();
            touch_write(shared, kPages);
            return (now_us() - t0) / kPages;
        });
    });
    row("COW populate", rounds, [&] {
        touch_write(shared, kPages);
        return in_child([&] {
            double t0 = now_us();
            ::madvise(shared, kPages * kPage, MADV_POPULATE_WRITE);
            return (now_us() - t0) / kPages;
        });
    });
    return 0;
}
