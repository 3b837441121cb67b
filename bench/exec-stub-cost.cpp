// exec-stub-cost: what the exec guard (libforkbox/process/exec_guard.hpp) adds to a container start,
// in-process and alternating: fork + execve(PROGRAM) + wait against fork +
// exec_through_stub(PROGRAM) + wait, and make_exec_stub() on its own. Prints p10, median
// and p90 in us.
//
// usage: build/bench-exec-stub [RUNS] [PROGRAM ARGS...]   (default 1000 /bin/busybox true)
// `make build/bench-exec-stub` builds it.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "libforkbox/process/exec_guard.hpp"

using namespace forkbox;

using forkbox::bench::now_us;
using forkbox::bench::quantile;


int main(int argc, char** argv) {
    int runs = argc > 1 ? std::atoi(argv[1]) : 1000;
    std::vector<std::string> args;
    for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
    if (args.empty()) args = {"/bin/busybox", "true"};
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    char* envp[] = {nullptr};

    auto stub = make_exec_stub();
    if (!stub) {
        std::fprintf(stderr, "exec-stub-cost: %s\n", stub.error().what().c_str());
        return 1;
    }
    std::vector<double> direct, guarded, make;
    for (int i = 0; i < runs; ++i) {
        for (int guard = 0; guard < 2; ++guard) {
            double t0 = now_us();
            pid_t pid = ::fork();
            if (pid == 0) {
                if (guard) (void)exec_through_stub(stub->get(), args[0], cargv.data(), envp);
                else ::execve(args[0].c_str(), cargv.data(), envp);
                _exit(127);
            }
            int st = 0;
            ::waitpid(pid, &st, 0);
            double dt = now_us() - t0;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                std::fprintf(stderr, "exec-stub-cost: %s exited with status %d\n", args[0].c_str(), st);
                return 1;
            }
            (guard ? guarded : direct).push_back(dt);
        }
        double t0 = now_us();
        auto fd = make_exec_stub();
        make.push_back(now_us() - t0);
    }
    auto row = [](const char* what, const std::vector<double>& v) {
        std::printf("%-32s %8.1f %8.1f %8.1f\n", what, quantile(v, 0.1), quantile(v, 0.5), quantile(v, 0.9));
    };
    std::printf("us, runs=%-23d %8s %8s %8s\n", runs, "p10", "median", "p90");
    row("fork+execve+wait", direct);
    row("fork+exec_through_stub+wait", guarded);
    std::printf("%-32s %8.1f %8.1f\n", "difference (guarded - direct)",
                quantile(guarded, 0.1) - quantile(direct, 0.1), quantile(guarded, 0.5) - quantile(direct, 0.5));
    row("make_exec_stub (parent, once)", make);
    return 0;
}
