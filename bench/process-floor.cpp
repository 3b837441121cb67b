// process-floor: what any process costs on this machine before it does any work, and what
// forkbox's own start-up adds to that. A warm create+start+wait is three process start-ups
// (`create`, `start` and the container's `true`), so their sum is a floor under it that no
// runtime work can go below.
//
// Each command is run with vfork + execve + waitpid, the commands alternating inside one
// loop so the machine's drift hits all alike; stdout and stderr go to /dev/null. Also times the
// cpuid instruction, which this VM traps (glibc's start-up runs it dozens of times, see
// bench/floor.sh).
//
// usage: build/bench-process-floor RUNS NAME=COMMAND [NAME=COMMAND...]
//   COMMAND is split on spaces, the first word an absolute path.
// Prints p10, median and p90 in us per command, and the cpuid cost.
#include <cpuid.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/timing.hpp"

using forkbox::bench::now_us;
using forkbox::bench::quantile;

namespace {

struct Subject {
    std::string name;
    std::vector<std::string> words;
    std::vector<double> samples;
};

// One vfork + execve + wait, in us; negative when the command failed to run.
double run_once(const Subject& s, int devnull) {
    std::vector<char*> argv;
    for (const auto& w : s.words) argv.push_back(const_cast<char*>(w.c_str()));
    argv.push_back(nullptr);
    double t0 = now_us();
    pid_t pid = ::vfork();
    if (pid == 0) {
        ::dup2(devnull, STDOUT_FILENO);
        ::dup2(devnull, STDERR_FILENO);
        ::execve(argv[0], argv.data(), environ);
        ::_exit(127);
    }
    if (pid < 0) return -1;
    int status = 0;
    ::waitpid(pid, &status, 0);
    double elapsed = now_us() - t0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 127 ? -1 : elapsed;
}

double cpuid_cost_us() {
    constexpr int kRounds = 2000;
    unsigned a, b, c, d;
    double t0 = now_us();
    for (int i = 0; i < kRounds; ++i) {
        __cpuid_count(0, 0, a, b, c, d);
        asm volatile("" : : "r"(a), "r"(b), "r"(c), "r"(d));  // results used: the loop stays
    }
    return (now_us() - t0) / kRounds;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s RUNS NAME=COMMAND [NAME=COMMAND...]\n", argv[0]);
        return 2;
    }
    int runs = std::atoi(argv[1]);
    if (runs < 10) runs = 10;
    std::vector<Subject> subjects;
    for (int i = 2; i < argc; ++i) {
        std::string arg = argv[i];
        auto eq = arg.find('=');
        if (eq == std::string::npos) {
            std::fprintf(stderr, "process-floor: %s is not NAME=COMMAND\n", argv[i]);
            return 2;
        }
        Subject s;
        s.name = arg.substr(0, eq);
        std::istringstream words(arg.substr(eq + 1));
        for (std::string w; words >> w;) s.words.push_back(w);
        if (s.words.empty() || s.words[0][0] != '/') {
            std::fprintf(stderr, "process-floor: %s: the command must start with an absolute path\n", s.name.c_str());
            return 2;
        }
        subjects.push_back(std::move(s));
    }
    int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    for (int warm = 0; warm < 5; ++warm)
        for (auto& s : subjects) (void)run_once(s, devnull);
    for (int r = 0; r < runs; ++r)
        for (auto& s : subjects) {
            double us = run_once(s, devnull);
            if (us < 0) {
                std::fprintf(stderr, "process-floor: %s failed to run\n", s.name.c_str());
                return 1;
            }
            s.samples.push_back(us);
        }
    std::printf("%-34s %8s %8s %8s   (vfork+execve+wait, %d runs each, alternating)\n", "process", "p10 us",
                "median", "p90", runs);
    for (const auto& s : subjects)
        std::printf("%-34s %8.0f %8.0f %8.0f\n", s.name.c_str(), quantile(s.samples, 0.1), quantile(s.samples, 0.5),
                    quantile(s.samples, 0.9));
    std::printf("cpuid instruction: %.2f us each\n", cpuid_cost_us());
    return 0;
}
