// config.json as `create` reads it: parse, validate (also the rootless checks), plan, and the
// pure steps after the plan (seccomp rules, cgroup writes for v1, v2 and hybrid hosts, the
// zygote template key). Properties:
//  * a Plan holds only absolute, clean container paths;
//  * every cgroup write names a file in the container's cgroup directory, never a path;
//  * the scan that cuts linux.seccomp out of the text (config_text.hpp, used to skip parsing
//    a cached profile) agrees with the parser about which profile the config has, and the
//    scan of linux.namespaces (a hint to begin a network namespace early) with its namespaces;
//  * a user namespace's id maps survive the zygote protocol's encoding.
#include "libforkbox/plan/plan.hpp"
#include "libforkbox/seccomp/seccomp.hpp"
#include "libforkbox/zygote/zygote.hpp"
#include "oci/config_text.hpp"
#include "oci/parse.hpp"
#include "oci/validate.hpp"
#include "tests/fuzz/cgroup_writes.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace forkbox;

namespace {

bool clean_absolute(const std::string& p) { return clean_container_path(p) == p; }

void check_plan(const Plan& plan) {
    FUZZ_CHECK(clean_absolute(plan.rootfs), "rootfs " + plan.rootfs);
    for (const auto& m : plan.mounts) FUZZ_CHECK(clean_absolute(m.destination), "mount destination " + m.destination);
    for (const auto& p : plan.masked_paths) FUZZ_CHECK(clean_absolute(p), "masked path " + p);
    for (const auto& p : plan.readonly_paths) FUZZ_CHECK(clean_absolute(p), "readonly path " + p);
    for (const auto& d : plan.devices) FUZZ_CHECK(clean_absolute(d.path), "device " + d.path);
}

// The fields of a profile, for comparing two parses of one.
bool same_profile(const oci::Seccomp& a, const oci::Seccomp& b) {
    auto same_syscall = [](const oci::SeccompSyscall& x, const oci::SeccompSyscall& y) {
        if (x.names != y.names || x.action != y.action || x.errno_ret != y.errno_ret || x.args.size() != y.args.size())
            return false;
        for (size_t i = 0; i < x.args.size(); ++i)
            if (x.args[i].index != y.args[i].index || x.args[i].value != y.args[i].value ||
                x.args[i].value_two != y.args[i].value_two || x.args[i].op != y.args[i].op)
                return false;
        return true;
    };
    if (a.default_action != b.default_action || a.default_errno_ret != b.default_errno_ret ||
        a.architectures != b.architectures || a.flags != b.flags || a.listener_path != b.listener_path ||
        a.listener_metadata != b.listener_metadata || a.syscalls.size() != b.syscalls.size())
        return false;
    for (size_t i = 0; i < a.syscalls.size(); ++i)
        if (!same_syscall(a.syscalls[i], b.syscalls[i])) return false;
    return true;
}

// create's shortcut (container/create.cpp): with a cached program for the cut-out profile
// text, only the rest is parsed. That must mean what parsing the whole text means.
void check_seccomp_split(std::string_view text, const Result<oci::Spec>& whole) {
    auto member = oci::split_seccomp_member(text);
    if (!member) return;
    auto rest = oci::parse_config(member->rest);
    if (!rest || (rest->linux && rest->linux->seccomp)) return;  // create parses the whole text then
    std::string alone = R"({"ociVersion": "1.0.0", "linux": {"seccomp": )" + std::string(member->profile) + "}}";
    auto profile = oci::parse_config(alone);
    if (!profile) return;  // never compiled, so never cached
    FUZZ_CHECK(whole.has_value(), "the rest and the profile parse, the whole config does not: " + whole.error().what());
    FUZZ_CHECK(whole->linux && whole->linux->seccomp, "the scan found a profile the parser does not see");
    FUZZ_CHECK(same_profile(*whole->linux->seccomp, *profile->linux->seccomp),
               "the scan cut out another profile than the parser's");
    FUZZ_CHECK(whole->process.has_value() == rest->process.has_value() && whole->mounts.size() == rest->mounts.size() &&
                   whole->hostname == rest->hostname,
               "the config without its profile parses differently");
}

void check_namespace_hint(std::string_view text, const oci::Spec& spec) {
    auto hint = oci::scan_namespaces(text);
    if (!hint) return;
    oci::NamespaceHint parsed;
    if (spec.linux)
        for (const auto& ns : spec.linux->namespaces) {
            parsed.joins_any |= !ns.path.empty();
            parsed.makes_network |= ns.path.empty() && ns.type == "network";
            parsed.makes_user |= ns.path.empty() && ns.type == "user";
        }
    FUZZ_CHECK(hint->makes_network == parsed.makes_network && hint->makes_user == parsed.makes_user &&
                   hint->joins_any == parsed.joins_any,
               "the namespace scan reads other namespaces than the parser");
}

void check_id_maps(const Plan& plan) {
    if (!(zygote::template_key(plan) & CLONE_NEWUSER)) return;
    std::string wire = zygote::encode_id_maps(plan.uid_mappings, plan.gid_mappings);
    auto maps = zygote::decode_id_maps(wire);
    if (!maps) return;  // too many entries or an empty range: the cold path is taken
    FUZZ_CHECK(zygote::encode_id_maps(maps->uids, maps->gids) == wire, wire);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text = fuzz::as_text(data, size);
    auto spec = oci::parse_config(text);
    check_seccomp_split(text, spec);
    (void)oci::parse_process_json(text);
    if (!spec) return 0;
    check_namespace_hint(text, *spec);
    (void)oci::validate_rootless(*spec);
    if (!oci::validate(*spec)) return 0;
    auto plan = make_plan(*spec, PlanOptions{"fuzz", "/run/bundle"});
    if (!plan) return 0;
    check_plan(*plan);
    check_id_maps(*plan);
    (void)zygote::rootfs_template_fits(*plan);
    if (spec->linux && spec->linux->seccomp) (void)plan_seccomp(*spec->linux->seccomp);
    if (spec->linux && spec->linux->resources) fuzz::check_cgroup_writes(*spec->linux->resources);
    return 0;
}
