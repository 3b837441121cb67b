// The "linux" object of config.json (config-linux.md): namespaces, id maps, devices, cgroup
// resources, seccomp and the rest. Resources and seccomp are applied by later stages but are
// parsed and type-checked here, so a bad config fails before anything is created.
#include <cerrno>

#include "oci/parse_internal.hpp"

namespace forkbox::oci::detail {

namespace {

Result<Namespace> parse_namespace(const Value& v) {
    FB_TRY(v.expect_object());
    Namespace n;
    FB_TRY(req_string(v, "type", n.type));
    FB_TRY(opt_string(v, "path", n.path));
    return n;
}

Result<TimeOffset> parse_time_offset(const Value& v) {
    FB_TRY(v.expect_object());
    TimeOffset t;
    FB_TRY(opt_integer(v, "secs", t.secs));
    FB_TRY(opt_integer(v, "nanosecs", t.nanosecs));
    return t;
}

Result<Device> parse_device(const Value& v) {
    FB_TRY(v.expect_object());
    Device d;
    FB_TRY(req_string(v, "type", d.type));
    FB_TRY(req_string(v, "path", d.path));
    // major and minor are REQUIRED unless the device is a fifo.
    if (d.type == "p") {
        FB_TRY(opt_integer(v, "major", d.major));
        FB_TRY(opt_integer(v, "minor", d.minor));
    } else {
        FB_TRY(req_integer(v, "major", d.major));
        FB_TRY(req_integer(v, "minor", d.minor));
    }
    FB_TRY(opt_integer(v, "fileMode", d.file_mode));
    FB_TRY(opt_integer(v, "uid", d.uid));
    FB_TRY(opt_integer(v, "gid", d.gid));
    return d;
}

Result<DeviceRule> parse_device_rule(const Value& v) {
    FB_TRY(v.expect_object());
    DeviceRule r;
    auto allow = v.get("allow");
    if (!allow) return missing(v, "allow");
    FB_ASSIGN(r.allow, allow->as_bool());
    FB_TRY(opt_string(v, "type", r.type));
    FB_TRY(opt_integer(v, "major", r.major));
    FB_TRY(opt_integer(v, "minor", r.minor));
    FB_TRY(opt_string(v, "access", r.access));
    // runc keeps the letters it knows ("rwa" is "rw"); one with none of them stays as it
    // is, for validation to refuse.
    std::string known;
    for (char c : r.access)
        if ((c == 'r' || c == 'w' || c == 'm') && known.find(c) == std::string::npos) known += c;
    if (!known.empty()) r.access = known;
    return r;
}

Result<MemoryResources> parse_memory(const Value& v) {
    FB_TRY(v.expect_object());
    MemoryResources m;
    FB_TRY(opt_integer(v, "limit", m.limit));
    FB_TRY(opt_integer(v, "reservation", m.reservation));
    FB_TRY(opt_integer(v, "swap", m.swap));
    FB_TRY(opt_integer(v, "kernel", m.kernel));
    FB_TRY(opt_integer(v, "kernelTCP", m.kernel_tcp));
    FB_TRY(opt_integer(v, "swappiness", m.swappiness));
    FB_TRY(opt_bool(v, "disableOOMKiller", m.disable_oom_killer));
    FB_TRY(opt_bool(v, "useHierarchy", m.use_hierarchy));
    FB_TRY(opt_bool(v, "checkBeforeUpdate", m.check_before_update));
    return m;
}

Result<CpuResources> parse_cpu(const Value& v) {
    FB_TRY(v.expect_object());
    CpuResources c;
    FB_TRY(opt_integer(v, "shares", c.shares));
    FB_TRY(opt_integer(v, "quota", c.quota));
    FB_TRY(opt_integer(v, "burst", c.burst));
    FB_TRY(opt_integer(v, "period", c.period));
    FB_TRY(opt_integer(v, "realtimeRuntime", c.realtime_runtime));
    FB_TRY(opt_integer(v, "realtimePeriod", c.realtime_period));
    FB_TRY(opt_string(v, "cpus", c.cpus));
    FB_TRY(opt_string(v, "mems", c.mems));
    FB_TRY(opt_integer(v, "idle", c.idle));
    return c;
}

Result<WeightDevice> parse_weight_device(const Value& v) {
    FB_TRY(v.expect_object());
    WeightDevice w;
    FB_TRY(req_integer(v, "major", w.major));
    FB_TRY(req_integer(v, "minor", w.minor));
    FB_TRY(opt_integer(v, "weight", w.weight));
    FB_TRY(opt_integer(v, "leafWeight", w.leaf_weight));
    return w;
}

Result<ThrottleDevice> parse_throttle_device(const Value& v) {
    FB_TRY(v.expect_object());
    ThrottleDevice t;
    FB_TRY(req_integer(v, "major", t.major));
    FB_TRY(req_integer(v, "minor", t.minor));
    FB_TRY(req_integer(v, "rate", t.rate));
    return t;
}

Result<BlockIoResources> parse_block_io(const Value& v) {
    FB_TRY(v.expect_object());
    BlockIoResources b;
    FB_TRY(opt_integer(v, "weight", b.weight));
    FB_TRY(opt_integer(v, "leafWeight", b.leaf_weight));
    FB_TRY(opt_array(v, "weightDevice", b.weight_device, parse_weight_device));
    FB_TRY(opt_array(v, "throttleReadBpsDevice", b.throttle_read_bps, parse_throttle_device));
    FB_TRY(opt_array(v, "throttleWriteBpsDevice", b.throttle_write_bps, parse_throttle_device));
    FB_TRY(opt_array(v, "throttleReadIOPSDevice", b.throttle_read_iops, parse_throttle_device));
    FB_TRY(opt_array(v, "throttleWriteIOPSDevice", b.throttle_write_iops, parse_throttle_device));
    return b;
}

Result<HugepageLimit> parse_hugepage_limit(const Value& v) {
    FB_TRY(v.expect_object());
    HugepageLimit h;
    FB_TRY(req_string(v, "pageSize", h.page_size));
    FB_TRY(req_integer(v, "limit", h.limit));
    return h;
}

Result<NetworkPriority> parse_network_priority(const Value& v) {
    FB_TRY(v.expect_object());
    NetworkPriority p;
    FB_TRY(req_string(v, "name", p.name));
    FB_TRY(req_integer(v, "priority", p.priority));
    return p;
}

Result<NetworkResources> parse_network(const Value& v) {
    FB_TRY(v.expect_object());
    NetworkResources n;
    FB_TRY(opt_integer(v, "classID", n.class_id));
    FB_TRY(opt_array(v, "priorities", n.priorities, parse_network_priority));
    return n;
}

Result<RdmaLimit> parse_rdma(const Value& v) {
    FB_TRY(v.expect_object());
    RdmaLimit r;
    FB_TRY(opt_integer(v, "hcaHandles", r.hca_handles));
    FB_TRY(opt_integer(v, "hcaObjects", r.hca_objects));
    return r;
}

Result<int64_t> parse_pids(const Value& v) {
    FB_TRY(v.expect_object());
    int64_t limit = 0;
    FB_TRY(req_integer(v, "limit", limit));
    return limit;
}

Result<Resources> parse_resources_object(const Value& v) {
    FB_TRY(v.expect_object());
    Resources r;
    FB_TRY(opt_array(v, "devices", r.devices, parse_device_rule));
    FB_TRY(opt_object(v, "memory", r.memory, parse_memory));
    FB_TRY(opt_object(v, "cpu", r.cpu, parse_cpu));
    FB_TRY(opt_object(v, "pids", r.pids_limit, parse_pids));
    FB_TRY(opt_object(v, "blockIO", r.block_io, parse_block_io));
    FB_TRY(opt_array(v, "hugepageLimits", r.hugepage_limits, parse_hugepage_limit));
    FB_TRY(opt_object(v, "network", r.network, parse_network));
    FB_TRY(opt_object_map(v, "rdma", r.rdma, parse_rdma));
    FB_TRY(opt_string_map(v, "unified", r.unified));
    return r;
}

Result<SeccompArg> parse_seccomp_arg(const Value& v) {
    FB_TRY(v.expect_object());
    SeccompArg a;
    FB_TRY(req_integer(v, "index", a.index));
    FB_TRY(req_integer(v, "value", a.value));
    FB_TRY(opt_integer(v, "valueTwo", a.value_two));
    FB_TRY(req_string(v, "op", a.op));
    return a;
}

Result<SeccompSyscall> parse_seccomp_syscall(const Value& v) {
    FB_TRY(v.expect_object());
    SeccompSyscall s;
    auto names = v.get("names");
    if (!names) return missing(v, "names");
    FB_ASSIGN(s.names, to_strings(*names));
    FB_TRY(req_string(v, "action", s.action));
    FB_TRY(opt_integer(v, "errnoRet", s.errno_ret));
    FB_TRY(opt_array(v, "args", s.args, parse_seccomp_arg));
    return s;
}

Result<Seccomp> parse_seccomp(const Value& v) {
    FB_TRY(v.expect_object());
    Seccomp s;
    FB_TRY(req_string(v, "defaultAction", s.default_action));
    FB_TRY(opt_integer(v, "defaultErrnoRet", s.default_errno_ret));
    FB_TRY(opt_strings(v, "architectures", s.architectures));
    FB_TRY(opt_strings(v, "flags", s.flags));
    FB_TRY(opt_string(v, "listenerPath", s.listener_path));
    FB_TRY(opt_string(v, "listenerMetadata", s.listener_metadata));
    FB_TRY(opt_array(v, "syscalls", s.syscalls, parse_seccomp_syscall));
    return s;
}

Result<IntelRdt> parse_intel_rdt(const Value& v) {
    FB_TRY(v.expect_object());
    IntelRdt r;
    FB_TRY(opt_string(v, "closID", r.clos_id));
    FB_TRY(opt_string(v, "l3CacheSchema", r.l3_cache_schema));
    FB_TRY(opt_string(v, "memBwSchema", r.mem_bw_schema));
    // "schemata" (runtime-spec 1.2.1) has no field in spec.hpp yet: type-checked, then dropped.
    std::string schemata;
    FB_TRY(opt_string(v, "schemata", schemata));
    FB_TRY(opt_bool(v, "enableCMT", r.enable_cmt));
    FB_TRY(opt_bool(v, "enableMBM", r.enable_mbm));
    return r;
}

Result<Personality> parse_personality(const Value& v) {
    FB_TRY(v.expect_object());
    Personality p;
    FB_TRY(req_string(v, "domain", p.domain));
    FB_TRY(opt_strings(v, "flags", p.flags));
    return p;
}

Result<MemoryPolicy> parse_memory_policy(const Value& v) {
    FB_TRY(v.expect_object());
    MemoryPolicy m;
    FB_TRY(req_string(v, "mode", m.mode));
    FB_TRY(opt_string(v, "nodes", m.nodes));
    FB_TRY(opt_strings(v, "flags", m.flags));
    return m;
}

Result<NetDevice> parse_net_device(const Value& v) {
    FB_TRY(v.expect_object());
    NetDevice d;
    FB_TRY(opt_string(v, "name", d.name));
    return d;
}

}  // namespace

Result<Linux> parse_linux(const Value& v) {
    FB_TRY(v.expect_object());
    Linux l;
    FB_TRY(opt_array(v, "namespaces", l.namespaces, parse_namespace));
    FB_TRY(opt_array(v, "uidMappings", l.uid_mappings, parse_id_mapping));
    FB_TRY(opt_array(v, "gidMappings", l.gid_mappings, parse_id_mapping));
    FB_TRY(opt_object_map(v, "timeOffsets", l.time_offsets, parse_time_offset));
    FB_TRY(opt_array(v, "devices", l.devices, parse_device));
    FB_TRY(opt_string(v, "cgroupsPath", l.cgroups_path));
    FB_TRY(opt_object(v, "resources", l.resources, parse_resources_object));
    FB_TRY(opt_string(v, "rootfsPropagation", l.rootfs_propagation));
    FB_TRY(opt_object(v, "seccomp", l.seccomp, parse_seccomp));
    FB_TRY(opt_string_map(v, "sysctl", l.sysctl));
    FB_TRY(opt_strings(v, "maskedPaths", l.masked_paths));
    FB_TRY(opt_strings(v, "readonlyPaths", l.readonly_paths));
    FB_TRY(opt_string(v, "mountLabel", l.mount_label));
    FB_TRY(opt_object(v, "intelRdt", l.intel_rdt, parse_intel_rdt));
    FB_TRY(opt_object(v, "personality", l.personality, parse_personality));
    FB_TRY(opt_object(v, "memoryPolicy", l.memory_policy, parse_memory_policy));
    FB_TRY(opt_object_map(v, "netDevices", l.net_devices, parse_net_device));
    return l;
}

Result<Resources> parse_resources(const Value& v) { return parse_resources_object(v); }

}  // namespace forkbox::oci::detail
