#include <grp.h>

#include <cstdlib>
#include <iostream>

#include "cmd/common.hpp"
#include "libforkbox/container/state.hpp"
#include "libforkbox/plan/plan.hpp"
#include "libforkbox/process/rootless.hpp"
#include "libforkbox/seccomp/cache.hpp"
#include "libforkbox/zygote/daemon.hpp"
#include "libforkbox/zygote/zygote.hpp"
#include "oci/config_text.hpp"
#include "oci/parse.hpp"

namespace forkbox::cmd {

namespace {

// The kind of container a bundle's config.json makes (--warm). Its seccomp profile is
// compiled into the state root's cache now, so even the first create finds it there.
Result<zygote::DaemonOptions::WarmKind> bundle_key(const std::string& relative_bundle, const StateStore& store) {
    char* real = ::realpath(relative_bundle.c_str(), nullptr);
    if (!real) return sys_error("bundle " + relative_bundle);
    std::string bundle(real);
    std::free(real);
    FB_ASSIGN(std::string text, read_file(bundle + "/config.json"));
    auto spec = oci::parse_config(text);
    if (!spec) return std::unexpected(spec.error().wrap(bundle + "/config.json"));
    FB_ASSIGN(Plan plan, make_plan(*spec, PlanOptions{"warm", bundle}));
    if (spec->linux && spec->linux->seccomp) {
        FB_TRY(store.ensure_root());
        auto member = oci::split_seccomp_member(text);
        auto program = compile_seccomp_cached(*spec->linux->seccomp, store.root(),
                                              member ? member->profile : std::string_view{});
        if (!program) return std::unexpected(program.error().wrap(bundle + "/config.json: seccomp"));
    }
    zygote::DaemonOptions::WarmKind kind{zygote::template_key(plan), zygote::cgroup_parent(plan.cgroups_path), "", ""};
    if (kind.key & CLONE_NEWUSER) kind.id_maps = zygote::encode_id_maps(plan.uid_mappings, plan.gid_mappings);
    if (zygote::rootfs_template_fits(plan)) kind.rootfs = zygote::config_fingerprint(text) + " " + bundle;
    return kind;
}

}  // namespace

int cmd_daemon(const Globals& g, const std::vector<std::string>& args) {
    VerbParser p("daemon [--socket PATH] [--pool N] [--root DIR] [--warm BUNDLE]... [--stats] [sandbox options]",
                 "Serve sandboxes (forkbox sandbox, the Python SDK) and keep warm namespace templates for\n"
                 "zygote-mode create/run, on one socket (in the foreground; SIGTERM stops it).");
    zygote::DaemonOptions o;
    std::vector<std::string> warm, allow_groups;
    std::string rootfs;
    bool stats = false, no_sandboxes = false, no_warm_shell = false;
    uint64_t max_timeout_ms = 0;
    std::string root = g.root;
    p.add()("socket", po::value(&o.socket_path)->default_value(zygote::default_socket_path()),
            "unix socket to serve (FORKBOX_SOCKET overrides the default)")(
        "pool", po::value(&o.pool_size)->default_value(4), "warm templates kept per kind of container")(
        "evict-after", po::value(&o.evict_after_seconds)->default_value(600),
        "seconds after which a kind of container, or of sandbox, nobody asks for loses its pool")(
        "refill-delay", po::value(&o.refill_delay_ms)->default_value(10),
        "milliseconds without a request before pools are refilled (at once when a pool is below a quarter)")(
        "rootfs-after", po::value(&o.rootfs_after)->default_value(2),
        "requests for the same bundle and config before rootfs templates are made for it")(
        "warm", po::value(&warm)->composing(), "keep templates for this bundle's containers warm from the start")(
        "root", po::value(&root), "state root of the containers served (default: the global --root): "
                                  "--warm bundles' seccomp profiles are compiled into its cache at start")(
        "stats", po::bool_switch(&stats), "print a running daemon's counters and exit")(
        "no-sandboxes", po::bool_switch(&no_sandboxes), "serve zygote templates only")(
        "no-warm-shell", po::bool_switch(&no_warm_shell),
        "start a sandbox's /bin/sh for a shell line when the line comes, not before (its command line is the line)")(
        "sandbox-pool", po::value(&o.sandbox.pool_size)->default_value(2), "sandboxes kept ready per kind asked for")(
        "max-sandboxes", po::value(&o.sandbox.max_live)->default_value(128), "sandboxes at once; more are told to retry (busy)")(
        "allow-group", po::value(&allow_groups)->composing(),
        "also serve sandboxes to members of this group (name or gid); by default only the daemon's own user")(
        "max-timeout-ms", po::value(&max_timeout_ms)->default_value(0), "deadline of every sandbox run (0: only the request's)")(
        "memory-mb", po::value(&o.sandbox.defaults.memory_mb)->default_value(512), "a sandbox's default memory limit")(
        "pids", po::value(&o.sandbox.defaults.pids)->default_value(256), "a sandbox's default process limit")(
        "tmpfs-mb", po::value(&o.sandbox.upper_size_mb)->default_value(512), "size of a sandbox's writable layer, and of its /tmp")(
        "rootfs", po::value(&rootfs),
        "sandboxes' read-only lower layer: a directory or an OCI bundle (default: the host's /)");
    po::variables_map vm;
    if (!p.parse(args, vm)) return 0;
    if (stats) {
        auto s = zygote::daemon_stats(o.socket_path);
        if (!s) return report(s.error());
        std::cout << *s << "\n";
        return 0;
    }
    if (o.pool_size < 1 || o.pool_size > 1024) return report("--pool must be between 1 and 1024");
    if (o.sandbox.pool_size < 0 || o.sandbox.pool_size > 64) return report("--sandbox-pool must be between 0 and 64");
    if (o.sandbox.max_live < 1) return report("--max-sandboxes must be at least 1");
    if (o.sandbox.defaults.memory_mb == 0 || o.sandbox.defaults.pids == 0 || o.sandbox.upper_size_mb == 0)
        return report("--memory-mb, --pids and --tmpfs-mb must be positive");
    // A user's sandboxes read the host with that user's rights: the group's members would get them.
    if (!allow_groups.empty() && !sandbox::can_map_id_range())
        return report("--allow-group needs a root daemon (with CAP_SETUID and CAP_SETGID): a user's daemon would give "
                      "the group's members that user's rights over the host's files");
    for (const auto& g : allow_groups) {
        char* end = nullptr;
        unsigned long gid = std::strtoul(g.c_str(), &end, 10);
        if (end && *end == '\0' && !g.empty()) {
            o.sandbox.allowed_groups.push_back(static_cast<gid_t>(gid));
        } else if (const group* gr = ::getgrnam(g.c_str())) {
            o.sandbox.allowed_groups.push_back(gr->gr_gid);
        } else {
            return report("--allow-group " + g + ": no such group");
        }
    }
    if (max_timeout_ms) o.sandbox.defaults.max_timeout_ms = max_timeout_ms;
    o.sandbox.evict_after_s = o.evict_after_seconds;
    if (!rootfs.empty()) {
        auto resolved = sandbox::resolve_sandbox_rootfs(absolute_from_cwd(rootfs));
        if (!resolved) return report(resolved.error().wrap("--rootfs"));
        o.sandbox.rootfs = *resolved;
    }
    o.sandboxes = !no_sandboxes;
    o.sandbox.warm_shell = !no_warm_shell;
    o.sandbox.socket_path = o.socket_path;
    // The sandboxes' mount point (always empty on the host: each embryo mounts on it in its
    // own mount namespace). A root daemon's sandboxes are an unprivileged uid on the host, so
    // it must be reachable by anyone: not beside a socket in a 0700 directory.
    bool real_root = ::geteuid() == 0 && !rootless_mode().in_user_namespace;
    o.sandbox.stage_dir = real_root ? "/run/forkbox-sandbox" : o.socket_path + ".stage";
    for (const auto& b : warm) {
        auto key = bundle_key(b, StateStore(root));
        if (!key) return report(key.error());
        if (key->key == 0) return report("--warm " + b + ": no template fits this bundle (a joined user namespace, or no new namespaces)");
        o.warm_keys.push_back(*key);
    }
    auto r = zygote::run_daemon(o);
    if (!r) return report(r.error());
    return 0;
}

}  // namespace forkbox::cmd
