// Shared by the config and resources targets: a linux.resources planned for a v1, a v2 and
// a hybrid host. Property: every write names a file in the container's cgroup directory,
// never a path (a name with a '/' would write outside it, as root).
#pragma once

#include <string>
#include <vector>

#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/cgroup/resources.hpp"
#include "tests/fuzz/fuzz.hpp"

namespace forkbox::fuzz {

inline const std::vector<CgroupLayout>& cgroup_layouts() {
    static const std::vector<CgroupLayout> all = [] {
        CgroupLayout v1;
        v1.mode = CgroupMode::V1;
        for (const char* c : {"name=systemd", "cpu,cpuacct", "memory", "cpuset", "pids", "devices", "blkio",
                              "net_cls,net_prio", "hugetlb", "rdma"})
            v1.hierarchies.push_back({std::string("/sys/fs/cgroup/") + c, false, c});
        CgroupLayout v2;
        v2.mode = CgroupMode::V2;
        v2.hierarchies.push_back({"/sys/fs/cgroup", true, "cpuset,cpu,io,memory,hugetlb,pids,rdma,misc"});
        CgroupLayout hybrid = parse_cgroup_layout(
            "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
            "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
            "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
            "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
        for (auto& h : hybrid.hierarchies)
            if (h.unified) h.controllers = "hugetlb,pids";
        return std::vector<CgroupLayout>{v1, v2, hybrid};
    }();
    return all;
}

inline void check_cgroup_writes(const oci::Resources& resources) {
    for (const CgroupLayout& layout : cgroup_layouts()) {
        if (auto writes = plan_cgroup_writes(resources, layout)) {
            for (const auto& w : *writes) {
                FUZZ_CHECK(w.hierarchy < layout.hierarchies.size(), w.file);
                FUZZ_CHECK(!w.file.empty() && w.file.find('/') == std::string::npos && w.file != "." && w.file != "..",
                           "cgroup write to \"" + w.file + "\"");
            }
        }
        (void)plan_device_program(resources, layout);
    }
}

}  // namespace forkbox::fuzz
