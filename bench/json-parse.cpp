// json-parse: what reading config.json costs in-process. Parses FILE RUNS times with
// json::Document::parse alone and with oci::parse_config (which includes it), alternating, and
// prints the first call (cold caches, first allocations) and p10 / median / p90 in us.
//
// usage: build/bench-json-parse [FILE] [RUNS]   (default /var/tmp/forkbox-bench/bundle/config.json 2000)
// `make build/bench-json-parse` builds it.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "libforkbox/base/json.hpp"
#include "oci/parse.hpp"

using namespace forkbox;

using forkbox::bench::now_us;
using forkbox::bench::quantile;

namespace {

template <typename F>
double time_once(F f) {
    double t0 = now_us();
    f();
    return now_us() - t0;
}

void report(const char* what, double first, const std::vector<double>& v) {
    std::printf("%-22s first %8.1f  p10 %7.1f  median %7.1f  p90 %7.1f  us\n", what, first,
                quantile(v, 0.1), quantile(v, 0.5), quantile(v, 0.9));
}

long minor_faults() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

}  // namespace

int main(int argc, char** argv) {
    const char* file = argc > 1 ? argv[1] : "/var/tmp/forkbox-bench/bundle/config.json";
    int runs = argc > 2 ? std::atoi(argv[2]) : 2000;
    std::ifstream in(file);
    if (!in) {
        std::fprintf(stderr, "bench-json-parse: cannot open %s\n", file);
        return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();

    bool ok = true;
    auto doc = [&] { ok &= json::Document::parse(text).has_value(); };
    auto spec = [&] { ok &= oci::parse_config(text).has_value(); };

    // The first call of each, in the order create runs them (parse_config parses the document).
    long faults_before = minor_faults();
    double first_spec = time_once(spec);
    long first_spec_faults = minor_faults() - faults_before;
    faults_before = minor_faults();
    double first_doc = time_once(doc);
    long first_doc_faults = minor_faults() - faults_before;
    std::vector<double> d, s;
    d.reserve(static_cast<size_t>(runs));
    s.reserve(static_cast<size_t>(runs));
    for (int i = 0; i < runs; ++i) {
        d.push_back(time_once(doc));
        s.push_back(time_once(spec));
    }
    if (!ok) {
        std::fprintf(stderr, "bench-json-parse: %s does not parse\n", file);
        return 1;
    }
    std::printf("%s: %zu bytes, %d runs\n", file, text.size(), runs);
    report("json::Document::parse", first_doc, d);
    report("oci::parse_config", first_spec, s);
    std::printf("page faults in the first call: parse_config %ld, then Document::parse %ld\n", first_spec_faults,
                first_doc_faults);
    return 0;
}
