#include <iostream>
#include <iterator>

#include "cmd/common.hpp"
#include "libforkbox/cgroup/resources.hpp"
#include "libforkbox/container/container.hpp"
#include "oci/parse.hpp"

namespace forkbox::cmd {

namespace {
// "67108864", "64m", "1G", "-1": bytes as runc's flags take them.
int64_t parse_bytes(const std::string& flag, const std::string& text) {
    auto bytes = parse_memory_size(text);
    if (!bytes) throw UsageError("--" + flag + ": " + bytes.error().what());
    return *bytes;
}
}  // namespace

int cmd_update(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("update [command options] <container-id>",
                 "Change the cgroup limits of a container: a linux.resources JSON file (- for stdin)\n"
                 "and/or runc's per-field flags, which win over the file.");
    std::string file, memory, reservation, swap, cpus, mems;
    int64_t quota = 0, rt_runtime = 0, pids = 0;
    uint64_t shares = 0, period = 0, rt_period = 0;
    uint16_t blkio_weight = 0;
    p.add()("resources,r", po::value(&file), "linux.resources JSON file, - for stdin")(
        "memory", po::value(&memory), "memory limit (bytes, or with k/m/g)")(
        "memory-reservation", po::value(&reservation), "memory soft limit")(
        "memory-swap", po::value(&swap), "memory plus swap limit (-1: unlimited)")(
        "kernel-memory", po::value<std::string>(), "kernel memory limit (accepted and ignored, as runc)")(
        "kernel-memory-tcp", po::value<std::string>(), "kernel TCP memory limit (accepted and ignored)")(
        "cpu-share", po::value(&shares), "CPU shares (relative weight; runc's name)")(
        "cpu-shares", po::value(&shares), "CPU shares (relative weight)")(
        "cpu-quota", po::value(&quota), "CPU CFS quota in microseconds")(
        "cpu-period", po::value(&period), "CPU CFS period in microseconds")(
        "cpu-rt-runtime", po::value(&rt_runtime), "realtime runtime in microseconds")(
        "cpu-rt-period", po::value(&rt_period), "realtime period in microseconds")(
        "cpuset-cpus", po::value(&cpus), "CPUs allowed (0-3,5)")(
        "cpuset-mems", po::value(&mems), "memory nodes allowed")(
        "pids-limit", po::value(&pids), "maximum number of processes (<= 0: unlimited)")(
        "blkio-weight", po::value(&blkio_weight), "block IO weight (10-1000)")(
        "l3-cache-schema", po::value<std::string>(), "Intel RDT/CAT L3 cache schema (unsupported: an error when set)")(
        "mem-bw-schema", po::value<std::string>(), "Intel RDT/MBA memory bandwidth schema (unsupported: an error when set)")(
        "id", po::value<std::string>(), "container id");
    p.positional("id", 1);
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    std::string id = require_id(vm, "update");
    if (vm.count("l3-cache-schema") || vm.count("mem-bw-schema"))
        return report("Intel RDT is not supported: --l3-cache-schema and --mem-bw-schema cannot be applied");

    oci::Resources r;
    if (!file.empty()) {
        std::string text;
        if (file == "-") {
            text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
        } else {
            auto t = read_file(file);
            if (!t) return report(t.error());
            text = std::move(*t);
        }
        auto parsed = oci::parse_resources_json(text);
        if (!parsed) return report(parsed.error().wrap("--resources"));
        r = std::move(*parsed);
    }
    auto& mem = r.memory;
    auto& cpu = r.cpu;
    if (vm.count("memory")) mem.emplace().limit = parse_bytes("memory", memory);
    if (vm.count("memory-reservation")) {
        if (!mem) mem.emplace();
        mem->reservation = parse_bytes("memory-reservation", reservation);
    }
    if (vm.count("memory-swap")) {
        if (!mem) mem.emplace();
        mem->swap = parse_bytes("memory-swap", swap);
    }
    auto cpu_res = [&]() -> oci::CpuResources& {
        if (!cpu) cpu.emplace();
        return *cpu;
    };
    if (vm.count("cpu-shares") || vm.count("cpu-share")) cpu_res().shares = shares;
    if (vm.count("cpu-quota")) cpu_res().quota = quota;
    if (vm.count("cpu-period")) cpu_res().period = period;
    if (vm.count("cpu-rt-runtime")) cpu_res().realtime_runtime = rt_runtime;
    if (vm.count("cpu-rt-period")) cpu_res().realtime_period = rt_period;
    if (vm.count("cpuset-cpus")) cpu_res().cpus = cpus;
    if (vm.count("cpuset-mems")) cpu_res().mems = mems;
    if (vm.count("pids-limit")) r.pids_limit = pids;
    if (vm.count("blkio-weight")) {
        if (!r.block_io) r.block_io.emplace();
        r.block_io->weight = blkio_weight;
    }
    auto res = update_container(g.store(), id, r);
    if (!res) return report(res.error());
    return 0;
}

}  // namespace forkbox::cmd
