// `create`: Spec -> validate -> Plan -> clone init and drive it through the sync protocol.
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <optional>

#include "libforkbox/base/clock.hpp"
#include "libforkbox/base/json.hpp"
#include "libforkbox/base/log.hpp"
#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/cgroup/resources.hpp"
#include "libforkbox/cgroup/systemd.hpp"
#include "libforkbox/cgroup/systemd_manager.hpp"
#include "libforkbox/container/container.hpp"
#include "libforkbox/container/init.hpp"
#include "libforkbox/container/net_devices.hpp"
#include "libforkbox/container/seccomp_agent.hpp"
#include "libforkbox/mount/rootfs.hpp"
#include "libforkbox/plan/plan.hpp"
#include "libforkbox/process/exec_guard.hpp"
#include "libforkbox/process/hooks.hpp"
#include "libforkbox/process/namespaces.hpp"
#include "libforkbox/process/pidfd.hpp"
#include "libforkbox/process/rootless.hpp"
#include "libforkbox/process/sync.hpp"
#include "libforkbox/process/terminal.hpp"
#include "libforkbox/process/vfork_helper.hpp"
#include "libforkbox/seccomp/cache.hpp"
#include "libforkbox/seccomp/seccomp.hpp"
#include "libforkbox/zygote/zygote.hpp"
#include "oci/config_text.hpp"
#include "oci/parse.hpp"
#include "oci/validate.hpp"

namespace forkbox {

namespace {

// What a user without a delegated cgroup gets from cgroupfs.
bool is_permission_error(const Error& e) {
    return e.errnum() == EACCES || e.errnum() == EPERM || e.errnum() == EROFS;
}

// Removes a half-made container directory unless dismissed.
struct ContainerDirGuard {
    ContainerDir* dir;
    bool armed = true;
    ~ContainerDirGuard() {
        if (armed) (void)dir->remove();
    }
};

// A systemd unit a failed create started: stopped (after init is killed: members order).
struct SystemdUnitGuard {
    SystemdUnitGuard(systemd::Manager* m, std::string u) : manager(m), unit(std::move(u)) {}
    SystemdUnitGuard(const SystemdUnitGuard&) = delete;
    SystemdUnitGuard& operator=(const SystemdUnitGuard&) = delete;
    ~SystemdUnitGuard() {
        if (!armed) return;
        if (auto r = manager->stop_unit(unit); !r) log::warn(r.error().what());
    }
    systemd::Manager* manager;
    std::string unit;
    bool armed = true;
};

Result<std::string> absolute_bundle(const std::string& bundle) {
    char* real = ::realpath(bundle.c_str(), nullptr);
    if (!real) return sys_error("bundle " + bundle);
    std::string out(real);
    std::free(real);
    struct stat st;
    if (::stat(out.c_str(), &st) < 0 || !S_ISDIR(st.st_mode)) return fail(ENOTDIR, "bundle " + bundle + " is not a directory");
    return out;
}

// An unprivileged user's config meets runc's rootless checks first (in runc's words,
// without a prefix), then the checks every config meets.
Result<void> validate_config(const oci::Spec& spec) {
    if (::geteuid() != 0) FB_TRY(oci::validate_rootless(spec));
    FB_TRY_CTX(oci::validate(spec), "config.json");
    return {};
}

struct LoadedConfig {
    oci::Spec spec;
    std::string text;
    std::string seccomp_json;  // linux.seccomp's text when a scan found it (the cache key)
    // The compiled program, found in the cache without parsing the profile: then
    // spec.linux->seccomp stays empty (a profile with notify rules is always parsed).
    std::optional<SeccompProgram> cached_seccomp;
};

Result<std::string> read_bundle_config(const std::string& bundle) {
    std::string path = bundle + "/config.json";
    auto text = read_file(path);
    if (!text && text.error().errnum() == ENOENT) return fail(ENOENT, "JSON specification file " + path + " not found");
    if (text) trace::mark("create: config read");
    return text;
}

Result<LoadedConfig> parse_bundle_config(std::string text, const std::string& root) {
    LoadedConfig c;
    c.text = std::move(text);
    if (auto member = oci::split_seccomp_member(c.text)) {
        c.seccomp_json = std::string(member->profile);
        // Validation of a profile depends on the profile alone, and the cache holds only
        // profiles that passed it: the rest of the config is parsed and validated as usual.
        auto program = find_cached_seccomp(member->profile, root);
        if (program && !program->wants_listener()) {
            auto spec = oci::parse_config(member->rest);
            if (spec && !(spec->linux && spec->linux->seccomp) && validate_config(*spec)) {
                trace::mark("create: config parsed");
                log::debug("seccomp: the profile's program is cached; the profile is not parsed");
                c.spec = std::move(*spec);
                c.cached_seccomp = std::move(*program);
                return c;
            }
            // Anything odd: the whole text is parsed below and reports its own errors.
        }
    }
    auto spec = oci::parse_config(c.text);
    trace::mark("create: config parsed");
    if (!spec) return std::unexpected(spec.error().wrap("config.json"));
    c.spec = std::move(*spec);
    FB_TRY(validate_config(c.spec));
    return c;
}

// A zygote template asked for as soon as the Plan is known, so that the daemon answers
// while create writes its state, and taken right before the cgroups (which consume its
// spares). Dropped untaken, when create fails in between, the reply is still read and
// its spare cgroups removed: nothing is left behind.
class WarmTemplateRequest {
public:
    WarmTemplateRequest(std::optional<zygote::PendingTemplate> pending, std::string cgroup_parent)
        : pending_(std::move(pending)), cgroup_parent_(std::move(cgroup_parent)) {}
    WarmTemplateRequest(const WarmTemplateRequest&) = delete;
    WarmTemplateRequest& operator=(const WarmTemplateRequest&) = delete;
    ~WarmTemplateRequest() {
        if (!pending_ || pending_->answered()) return;
        auto unused = pending_->take();
        if (!unused || unused->spare_cgroup.empty()) return;
        if (auto layout = detect_cgroup_layout()) remove_spare_cgroups(*layout, cgroup_parent_, unused->spare_cgroup);
    }
    bool asked() const { return pending_.has_value(); }
    std::optional<zygote::Template> take() {
        if (!pending_) return std::nullopt;
        auto t = pending_->take();
        if (t)
            log::debug(std::string("zygote: warm ") + (t->mount_namespace ? "rootfs" : "namespaces") +
                       (t->v1_cgroups_bound ? " with its v1 cgroups bound" : "") +
                       (t->device_program ? " and its device program loaded" : ""));
        return t;
    }

private:
    std::optional<zygote::PendingTemplate> pending_;
    std::string cgroup_parent_;
};

// Asks the zygote daemon for a template for this plan, when zygote mode is on; nothing is
// asked otherwise (the cold path makes namespaces and cgroups).
std::optional<zygote::PendingTemplate> ask_warm_template(const CreateOptions& opt, const oci::Spec& spec,
                                                         const Plan& plan, const std::string& config_text) {
    std::string socket = opt.zygote_socket;
    if (socket.empty()) {
        auto a = spec.annotations.find(zygote::kAnnotation);
        if (a == spec.annotations.end() || a->second != "true") return std::nullopt;
        socket = zygote::default_socket_path();
    }
    int key = zygote::template_key(plan);
    if (key == 0) {
        log::debug("zygote: cold path: no template fits this container (a joined user namespace, or no id maps)");
        return std::nullopt;
    }
    zygote::Request request;
    request.key = key;
    // The systemd driver's cgroups are the unit's, made by systemd: no spares to take.
    if (!opt.systemd_cgroup) request.cgroup_parent = zygote::cgroup_parent(plan.cgroups_path);
    if (key & CLONE_NEWUSER) request.id_maps = zygote::encode_id_maps(plan.uid_mappings, plan.gid_mappings);
    // --no-pivot asks for a rootfs built another way than a template's.
    if (!opt.no_pivot && zygote::rootfs_template_fits(plan)) {
        request.rootfs_fingerprint = zygote::config_fingerprint(config_text);
        request.rootfs_bundle = plan.bundle;
    }
    return zygote::PendingTemplate::ask(socket, request);
}

// sd_listen_fds(3): sockets passed to forkbox by socket activation (fds 3..3+N-1).
int activation_fds() {
    const char* pid = std::getenv("LISTEN_PID");
    const char* fds = std::getenv("LISTEN_FDS");
    if (!pid || !fds || std::atol(pid) != ::getpid()) return 0;
    int n = std::atoi(fds);
    return n > 0 ? n : 0;
}

// Drives init from Go (sent already) to Ready, doing while_init_works (if any) first.
// Returns init's pid (the clone child, or the grandchild the intermediate process forked).
// init_known(pid) runs once init's pid is known: at once, or from the intermediate.
Result<pid_t> drive_init(pid_t child, bool intermediate, int sync_fd, const Plan& plan, const IdMapWriter& id_maps,
                         ContainerState& state, std::optional<ChildGuard>& init_guard, const oci::Seccomp* seccomp,
                         const std::function<Result<void>()>& while_init_works,
                         const std::function<Result<void>(pid_t)>& init_known,
                         const std::function<Result<void>(pid_t)>& id_maps_written) {
    if (while_init_works) FB_TRY(while_init_works());
    pid_t init_pid = intermediate ? 0 : child;
    if (init_pid > 0) FB_TRY(init_known(init_pid));
    for (;;) {
        auto msg = sync_recv(sync_fd);
        if (!msg) {
            if (msg.error().errnum() == EPIPE) return fail(EPIPE, "container init exited during setup");
            return std::unexpected(msg.error());
        }
        switch (msg->type) {
        case SyncType::UsernsReady:
            FB_TRY(write_id_mappings(child, plan.uid_mappings, plan.gid_mappings, id_maps));
            FB_TRY(id_maps_written(child));
            FB_TRY(sync_send(sync_fd, SyncType::UsernsDone));
            trace::mark("create: id maps written");
            break;
        case SyncType::InitPid:
            init_pid = msg->value;
            init_guard.emplace(init_pid);
            state.pid = init_pid;
            trace::mark("create: init pid");
            FB_TRY(init_known(init_pid));
            break;
        case SyncType::RuntimeHooks: {
            std::string hs = hook_state_json(state, "created");
            FB_TRY(run_hooks(plan.hooks.prestart, hs, "prestart", state.bundle));
            FB_TRY(run_hooks(plan.hooks.create_runtime, hs, "createRuntime", state.bundle));
            FB_TRY(sync_send(sync_fd, SyncType::RuntimeHooksDone));
            break;
        }
        case SyncType::SeccompListener: {
            if (!seccomp || msg->fds.size() != 1) return fail(EPROTO, "sync: unexpected seccomp listener");
            std::string doc = container_process_state(state, "creating", init_pid > 0 ? init_pid : child,
                                                      seccomp->listener_metadata);
            FB_TRY(hand_listener_to_agent(seccomp->listener_path, msg->fds[0].get(), doc));
            FB_TRY(sync_send(sync_fd, SyncType::SeccompListenerDone));
            break;
        }
        case SyncType::Ready:
            if (init_pid <= 0) return fail(EPROTO, "sync: init ready before its pid was known");
            return init_pid;
        case SyncType::Error: return fail(msg->value, msg->payload);
        default:
            return fail(EPROTO, std::string("sync: unexpected message ") + sync_type_name(msg->type));
        }
    }
}

// Whether an idmapped bind takes the maps of the user namespace the container makes: it can
// then be idmapped with that very namespace, once create has written its maps.
bool takes_container_maps(const MountStep::IdMap& idmap, const Plan& plan) {
    return idmap.userns_path.empty() && (plan.new_namespaces & CLONE_NEWUSER) && idmap.uids == plan.uid_mappings &&
           idmap.gids == plan.gid_mappings;
}

// Gives each idmapped bind's cloned source its maps: a user namespace made for each distinct
// set of maps (a process that lives until they are written), or the one the container joins.
// With later_with_container_maps, the binds that take the container's own maps are left for
// idmap_with_container_namespace: no process of their own.
Result<void> idmap_bind_sources(const Plan& plan, const std::vector<unique_fd>& trees, bool later_with_container_maps) {
    std::vector<std::pair<std::string, unique_fd>> namespaces;
    for (size_t i = 0; i < plan.mounts.size() && i < trees.size(); ++i) {
        const MountStep& m = plan.mounts[i];
        if (!m.idmap || !trees[i]) continue;
        const MountStep::IdMap& idmap = *m.idmap;
        if (later_with_container_maps && takes_container_maps(idmap, plan)) continue;
        std::string key = idmap.userns_path.empty()
                              ? format_id_mappings(idmap.uids) + "|" + format_id_mappings(idmap.gids)
                              : "path " + idmap.userns_path;
        auto known = std::find_if(namespaces.begin(), namespaces.end(), [&](const auto& n) { return n.first == key; });
        if (known == namespaces.end()) {
            unique_fd ns;
            if (!idmap.userns_path.empty()) {
                ns.reset(::open(idmap.userns_path.c_str(), O_RDONLY | O_CLOEXEC));
                if (!ns) return sys_error("open user namespace " + idmap.userns_path + " for an idmapped mount");
            } else {
                FB_ASSIGN(ns, new_user_namespace(idmap.uids, idmap.gids));
            }
            namespaces.emplace_back(key, std::move(ns));
            known = std::prev(namespaces.end());
        }
        FB_TRY(idmap_tree(trees[i].get(), known->second.get(), idmap.recursive, m.source + " on " + m.destination));
    }
    return {};
}

// The binds idmap_bind_sources left: idmapped with the user namespace the container's first
// process made (its maps just written), before init attaches them (after UsernsDone). The
// kernel copies the maps into the mount's idmap, so the namespace need not outlive this.
Result<void> idmap_with_container_namespace(const Plan& plan, const std::vector<unique_fd>& trees, pid_t child) {
    unique_fd ns;
    for (size_t i = 0; i < plan.mounts.size() && i < trees.size(); ++i) {
        const MountStep& m = plan.mounts[i];
        if (!m.idmap || !trees[i] || !takes_container_maps(*m.idmap, plan)) continue;
        if (!ns) {
            std::string path = "/proc/" + std::to_string(child) + "/ns/user";
            ns.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
            if (!ns) return sys_error("open " + path + " for an idmapped mount");
        }
        FB_TRY(idmap_tree(trees[i].get(), ns.get(), m.idmap->recursive, m.source + " on " + m.destination));
    }
    return {};
}

// What the warm path brings in place of what the cold path makes itself: the template's
// fresh namespaces (a rootfs template's mount namespace with the rootfs built, and the pid
// namespace its /proc shows), its spare cgroups, and the device program the daemon loaded.
// The cold path is this, empty: both executors run the same Plan through the same phases.
struct WarmStart {
    std::vector<OpenNamespace> namespaces;
    unique_fd mount_namespace;  // init joins it itself
    std::string spare_cgroup;
    unique_fd device_program;  // loaded by the daemon from this very config
    bool v1_cgroups_bound = false;

    static WarmStart from(std::optional<zygote::Template> t) {
        WarmStart w;
        if (!t) return w;
        w.namespaces = std::move(t->namespaces);
        w.spare_cgroup = std::move(t->spare_cgroup);
        w.device_program = std::move(t->device_program);
        w.v1_cgroups_bound = t->v1_cgroups_bound;
        if (t->mount_namespace) {
            // init joins the mount namespace itself; we enter the pid namespace for the clone.
            w.mount_namespace = std::move(t->mount_namespace);
            OpenNamespace pid;
            pid.clone_flag = CLONE_NEWPID;
            pid.path = "zygote template";
            pid.fd = std::move(t->pid_namespace);
            w.namespaces.push_back(std::move(pid));
        }
        return w;
    }
    // The CLONE_NEW* flags that come ready-made.
    int clone_flags() const {
        int flags = 0;
        for (const auto& ns : namespaces) flags |= ns.clone_flag;
        if (mount_namespace) flags |= CLONE_NEWNS;
        return flags;
    }
};

// Where init cloned onto our memory starts (clone_child_on_shared_memory).
struct SharedInitStart {
    const InitArgs* args = nullptr;
    int parent_end = -1;
    int unified_procs = -1;  // in args->cgroup_task_fds: not written when born in the cgroup
};

// Init's own copies of what create owns and init reads, made before create goes on: create
// may change, free or exit with its own from then on. Never freed: init ends by its exec.
struct InitCopies {
    InitArgs args;
    Plan plan;
    CgroupLayout layout;
    std::optional<SeccompProgram> seccomp;
    std::vector<OpenNamespace> no_joins;
};

void start_init_on_shared_memory(void* p, ReleaseCaller release) {
    const auto* start = static_cast<const SharedInitStart*>(p);
    ::close(start->parent_end);
    const InitArgs& from = *start->args;
    auto* own = new InitCopies{from, *from.plan, *from.cgroup_layout, std::nullopt, {}};
    if (from.seccomp) own->seccomp = *from.seccomp;
    if (release.born_in_cgroup()) {
        std::erase(own->args.cgroup_task_fds, start->unified_procs);
        trace::mark("init: born in its cgroup");
    }
    own->args.plan = &own->plan;
    own->args.cgroup_layout = &own->layout;
    own->args.seccomp = own->seccomp ? &*own->seccomp : nullptr;
    own->args.namespaces = &own->no_joins;
    release();
    container_init(own->args);
}

// One `create`, phase by phase. Members are declared in the order the phases make them, so
// a failure at any step unwinds the rest in reverse: init and the intermediate are killed,
// then the cgroups removed, then the container directory, then the zygote reply drained.
class ContainerCreation : public CreationRemains {
public:
    ContainerCreation(const StateStore& store, const CreateOptions& opt, unique_fd* pty_master)
        : store_(store), opt_(opt), pty_master_(pty_master) {}
    bool has_poststop_hooks() const override { return !plan_.hooks.poststop.empty(); }
    ContainerCreation(const ContainerCreation&) = delete;
    ContainerCreation& operator=(const ContainerCreation&) = delete;

    // 1. config.json -> Spec -> validate -> Plan; in zygote mode, the template is asked for.
    Result<void> load_and_plan();
    // 2. What the process needs from us (activation fds, console), the seccomp program,
    //    and the state directory with config.json, the exec fifo and a first state.json.
    Result<void> prepare_state();
    // 3. The cgroups: planned writes, the warm template taken (or not: cold), placement,
    //    limits and the device program before the clone.
    Result<void> place_cgroups();
    // 4. Clone init into the namespaces (made, or the template's) and drive it to Ready.
    Result<void> clone_and_drive_init();
    // 5. The final state.json, --pid-file, the console; nothing is undone past here.
    Result<pid_t> finish();

private:
    const oci::Spec& spec() const { return cfg_.spec; }
    Result<void> clone_init(uint64_t flags);
    bool init_may_share_memory() const;
    Result<void> record_cgroups(PlannedCgroups planned);
    Result<void> run_without_cgroups(const Error& refused, const std::vector<CgroupWrite>& writes);
    Result<void> prepare_systemd_unit(std::vector<CgroupWrite> writes);
    Result<void> start_systemd_unit();
    bool v1_cgroups_may_follow_clone() const;
    Result<void> make_v1_cgroups();
    Result<void> place_v1_cgroups();

    const StateStore& store_;
    const CreateOptions& opt_;
    unique_fd* pty_master_;

    // load_and_plan
    std::string bundle_;
    LoadedConfig cfg_;
    bool terminal_ = false;
    Plan plan_;
    std::optional<WarmTemplateRequest> warm_request_;
    // Started at the config's read when the cold path will likely want it: it makes the
    // network namespace meanwhile, and clones init (or hands the namespace to a fork).
    std::optional<CloneHelper> clone_helper_;
    bool network_in_helper_ = false;  // the helper is in the container's network namespace

    // prepare_state
    int preserve_fds_ = 0;
    unique_fd console_fd_, console_peer_;  // the pty master's way out, and ours for a foreground run
    unique_fd pidfd_socket_;                // --pidfd-socket, connected before the clone
    std::optional<SeccompProgram> seccomp_;
    std::optional<ContainerDir> dir_;
    std::optional<ContainerDirGuard> dir_guard_;
    ContainerState state_;

    // place_cgroups
    CgroupLayout layout_;
    std::optional<std::vector<bpf_insn>> device_program_;
    bool device_program_while_init_works_ = false;
    WarmStart warm_;
    CgroupPlacement cgroups_;
    std::vector<std::string> mounted_cgroup_dirs_;  // without cgroups of its own: the caller's
    // v1 hosts, cold: the v1 cgroups and their writes, made as init starts (place_v1_cgroups).
    bool v1_cgroups_follow_ = false;
    std::vector<CgroupWrite> v1_cgroup_writes_;
    CgroupPlacement v1_cgroups_;
    std::optional<Result<void>> v1_cgroups_made_;  // their mkdirs, done while the helper clones init
    // The systemd driver: the manager, the unit's properties but PIDs, and the cgroupfs writes
    // held back until the unit (and so its cgroups) exists. Declared after cgroups_: a unit
    // started by a create that fails is stopped before forkbox's own cgroups are removed.
    std::optional<systemd::Manager> systemd_;
    systemd::Properties systemd_properties_;
    std::vector<CgroupWrite> systemd_writes_;
    std::optional<SystemdUnitGuard> systemd_unit_;

    // clone_and_drive_init
    IdMapWriter id_maps_;
    // Opened here when init enters a new user namespace, or for the idmapped binds.
    std::vector<unique_fd> bind_sources_;
    std::vector<OpenNamespace> namespaces_;
    unique_fd parent_end_, child_end_;
    InitArgs args_;
    pid_t child_ = -1;
    std::optional<ChildGuard> child_guard_;
    // Init cloned onto our memory (vfork_helper.hpp): what it starts from, and the v2
    // cgroup's cgroup.procs it joins itself (clone(2) has no CLONE_INTO_CGROUP).
    SharedInitStart shared_start_;
    unique_fd unified_procs_;
    std::optional<ChildGuard> init_guard_;
    // Holds the container's network namespace: a failed create moves the devices back
    // even after init is gone.
    std::optional<NetDevicesGuard> net_devices_;
};

Result<void> ContainerCreation::load_and_plan() {
    FB_TRY(validate_container_id(opt_.id));
    FB_ASSIGN(bundle_, absolute_bundle(opt_.bundle));
    FB_ASSIGN(std::string text, read_bundle_config(bundle_));
    // The cold path's network namespace is made on the other CPU while we go on, instead of
    // by the clone, by the thread that will clone init: begun now, on what a scan of the text
    // says, the kernel's ~0.7 ms for it overlap the parse too. Not when a template may bring
    // one (--zygote).
    if (auto hint = oci::scan_namespaces(text);
        hint && hint->makes_network && !hint->makes_user && !hint->joins_any && opt_.zygote_socket.empty())
        clone_helper_.emplace(CloneHelper::Options{.make_network_namespace = true});
    FB_ASSIGN(cfg_, parse_bundle_config(std::move(text), store_.root()));
    terminal_ = spec().process && spec().process->terminal;
    // Without a pty_master to fill, the container detaches from us: runc's rules apply.
    if (!pty_master_ || !opt_.console_socket.empty())
        FB_TRY(check_console_options(terminal_, true, opt_.console_socket));
    if (!terminal_) pty_master_ = nullptr;
    FB_ASSIGN(plan_, make_plan(spec(), PlanOptions{opt_.id, bundle_, !rootless_mode().any(), opt_.systemd_cgroup,
                                                    rootless_mode().any()}));
    trace::mark("create: planned");
    // Zygote mode: asked now, taken before the cgroups; the daemon answers meanwhile.
    warm_request_.emplace(ask_warm_template(opt_, spec(), plan_, cfg_.text),
                          opt_.systemd_cgroup ? std::string() : zygote::cgroup_parent(plan_.cgroups_path));
    trace::mark("create: zygote asked");
    // The Plan decides: not one a new or joined user namespace is to own, nor when a template
    // brings one. A scan that could not tell starts the thread now.
    bool network_ahead = (plan_.new_namespaces & CLONE_NEWNET) && !(plan_.new_namespaces & CLONE_NEWUSER) &&
                         !plan_.needs_intermediate() && !warm_request_->asked();
    if (!network_ahead) {
        clone_helper_.reset();
    } else if (!clone_helper_) {
        clone_helper_.emplace(CloneHelper::Options{.make_network_namespace = true});
    }
    if (!spec().process || plan_.process.args.empty()) return fail(EINVAL, "config.json: process.args must not be empty");
    return {};
}

Result<void> ContainerCreation::prepare_state() {
    preserve_fds_ = opt_.preserve_fds;
    // Socket activation of forkbox itself passes the sockets on, as runc does.
    if (int listen = activation_fds(); listen > 0) {
        preserve_fds_ += listen;
        plan_.process.env.push_back("LISTEN_FDS=" + std::to_string(listen));
        plan_.process.env.push_back("LISTEN_PID=1");
    }
    // The pty master goes to the manager's console socket, or to us for a foreground run.
    if (terminal_ && pty_master_) {
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return sys_error("console socketpair");
        console_fd_.reset(sv[0]);
        console_peer_.reset(sv[1]);
    } else if (terminal_) {
        FB_ASSIGN(console_fd_, connect_console_socket(opt_.console_socket));
    }
    if (!opt_.pidfd_socket.empty()) {
        FB_ASSIGN(pidfd_socket_, connect_unix_socket(opt_.pidfd_socket, "pidfd socket"));
    }
    // Compiled here, before clone: the child only hands the finished program to the kernel.
    // Through the cache in the state root: compiling the default profile takes milliseconds.
    // The root is made first, so even the first container of a new root fills the cache.
    seccomp_ = std::move(cfg_.cached_seccomp);
    if (!seccomp_ && spec().linux && spec().linux->seccomp) {
        FB_TRY(store_.ensure_root());
        auto program = compile_seccomp_cached(*spec().linux->seccomp, store_.root(), cfg_.seccomp_json);
        if (!program) return std::unexpected(program.error().wrap("seccomp"));
        seccomp_ = std::move(*program);
    }
    trace::mark("create: seccomp ready");

    FB_ASSIGN(ContainerDir dir, store_.create(opt_.id));
    dir_.emplace(std::move(dir));
    dir_guard_.emplace(&*dir_);
    FB_TRY(write_file_atomic(dir_->fd(), kConfigFile, cfg_.text, 0600));
    if (::mknodat(dir_->fd(), kExecFifo, S_IFIFO | 0600, 0) < 0) return sys_error("create exec fifo");
    // Any container user must be able to open the write end (runc uses 0622 too).
    if (::fchmodat(dir_->fd(), kExecFifo, 0622, 0) < 0) return sys_error("chmod exec fifo");

    state_.oci_version = spec().oci_version;
    state_.id = opt_.id;
    state_.bundle = bundle_;
    state_.rootfs = plan_.rootfs;
    state_.created = rfc3339_now();
    state_.annotations = spec().annotations;
    state_.own_pid_namespace = plan_.own_pid_namespace();
    state_.systemd_unit = plan_.systemd_unit;
    // The first state.json is written with the cgroups it is about to make (record_cgroups):
    // until then, `delete --force` of a crashed create removes a directory and nothing else.
    trace::mark("create: state dir made");
    return {};
}

// A state file before anything outside the state directory is made, naming the cgroups to
// be made, so that `delete --force` after a create killed at any later step finds them and
// the processes in them (a template's spares not renamed yet are the daemon's to remove).
Result<void> ContainerCreation::record_cgroups(PlannedCgroups planned) {
    state_.cgroup_dirs = std::move(planned.dirs);
    state_.cgroup_dirs_created = removable_cgroups(layout_, std::move(planned.created));
    FB_TRY(dir_->write_state(state_));
    trace::mark("create: state written");
    return {};
}

Result<void> ContainerCreation::place_cgroups() {
    FB_ASSIGN(layout_, detect_cgroup_layout());
    trace::mark("create: cgroup layout");
    // Planned before any cgroup exists, so a limit this host cannot hold fails create cleanly.
    // Device rules even without linux.resources (Plan::resources). They need no list of v2
    // controllers (v1's devices controller, or a program), the limits do.
    if (layout_.unified() && spec().linux && spec().linux->resources)
        FB_TRY_CTX(load_v2_controllers(layout_), "cgroup");
    FB_ASSIGN(std::vector<CgroupWrite> cgroup_writes, plan_cgroup_writes(plan_.resources, layout_));
    FB_ASSIGN(device_program_, plan_device_program(plan_.resources, layout_));
    // Zygote mode: fresh namespaces and spare cgroups from a warm template instead of
    // making them now. Taken right before the cgroups, which consume the spares.
    warm_ = WarmStart::from(warm_request_->take());
    trace::mark("create: zygote answered");
    if (!plan_.systemd_unit.empty()) return prepare_systemd_unit(std::move(cgroup_writes));
    FB_TRY(record_cgroups(planned_cgroups(layout_, plan_.cgroups_path)));
    // What is left before the clone faults little: the helper maps and writes the child's
    // stack and heap meanwhile (a fork's path ends it, and the stack is unmapped).
    if (clone_helper_) clone_helper_->prepare_child();
    // The v1 hierarchies' dirs are named now (init binds them), made as init starts.
    std::vector<bool> made_later;
    v1_cgroups_follow_ = v1_cgroups_may_follow_clone();
    if (v1_cgroups_follow_) {
        for (const auto& h : layout_.hierarchies) made_later.push_back(!h.unified);
        auto v1 = std::stable_partition(cgroup_writes.begin(), cgroup_writes.end(),
                                        [&](const CgroupWrite& w) { return layout_.hierarchies[w.hierarchy].unified; });
        v1_cgroup_writes_.assign(std::make_move_iterator(v1), std::make_move_iterator(cgroup_writes.end()));
        cgroup_writes.erase(v1, cgroup_writes.end());
    }
    auto placed = create_cgroups(layout_, plan_.cgroups_path, warm_.spare_cgroup, {}, made_later);
    if (!placed && rootless_mode().any() && is_permission_error(placed.error())) {
        // runc's contract for a delegated subtree: hierarchies the user was not given are
        // left alone, unless a limit needs them.
        std::vector<bool> skippable(layout_.hierarchies.size(), true);
        for (const auto& w : cgroup_writes) skippable[w.hierarchy] = false;
        if (device_program_ && layout_.unified())
            for (size_t i = 0; i < layout_.hierarchies.size(); ++i)
                if (layout_.hierarchies[i].unified) skippable[i] = false;
        auto again = create_cgroups(layout_, plan_.cgroups_path, {}, skippable);
        bool any = again && !first_cgroup_dir(again->dirs()).empty();
        if (any) placed = std::move(again);
    }
    if (placed) {
        cgroups_ = std::move(*placed);
    } else {
        FB_TRY(run_without_cgroups(placed.error(), cgroup_writes));
        device_program_.reset();
    }
    trace::mark("create: cgroups placed");
    // Before clone, so the limits hold from the container's first instruction; on failure
    // the placement guard removes the cgroups again.
    FB_TRY(apply_cgroup_writes(cgroup_writes, layout_, cgroups_.dirs()));
    // cgroup v2's device program: the kernel takes ~0.45 ms to verify and JIT it, so it is
    // loaded while init sets up (on the other CPU) and attached before init reports Ready,
    // hence before `start` and the container's first instruction. Nothing of the container
    // runs before then, unless hooks run inside it (createContainer, startContainer): then
    // it is attached before the clone (init's own device nodes are allowed either way).
    // A rootfs template brings it loaded (the daemon made it from this config, the
    // fingerprint says): attached now. Its fd is closed once attached, never in init.
    device_program_while_init_works_ = device_program_ && !warm_.device_program &&
                                       plan_.hooks.create_container.empty() && plan_.hooks.start_container.empty();
    if (device_program_ && warm_.device_program)
        FB_TRY(apply_device_program(warm_.device_program.get(), layout_, cgroups_.dirs()));
    else if (device_program_ && !device_program_while_init_works_)
        FB_TRY(apply_device_program(*device_program_, layout_, cgroups_.dirs()));
    warm_.device_program.reset();
    state_.cgroup_dirs = cgroups_.dirs();
    state_.cgroup_dirs_created = removable_cgroups(layout_, cgroups_.created());
    trace::mark("create: cgroups made");
    return {};
}

// On a v1 or hybrid host, the cold path makes the v1 cgroups (a mkdir per hierarchy, ~0.3 ms
// here) while init starts on the other CPU: their mkdirs while the helper clones it (after a
// fork: once it runs), their limits after Go. Init joins them before its cgroup mount binds
// them, and before any hook or process of the container runs. Itself, by writing 0 to their
// `tasks`: the kernel moves the caller without its threadgroup lock, whose write side, taken
// to move another process, can wait for an RCU grace period. Not when the cgroups must
// exist first: a cgroup namespace (rooted where init is when it unshares), a user namespace
// or the intermediate (init joins through fds opened by us), a zygote template, rootless
// (a delegated subtree may refuse some), or the systemd driver.
bool ContainerCreation::v1_cgroups_may_follow_clone() const {
    bool any_v1 = std::any_of(layout_.hierarchies.begin(), layout_.hierarchies.end(),
                              [](const CgroupHierarchy& h) { return !h.unified; });
    return any_v1 && !rootless_mode().any() && plan_.systemd_unit.empty() && warm_.spare_cgroup.empty() &&
           warm_.clone_flags() == 0 && !(plan_.new_namespaces & (CLONE_NEWCGROUP | CLONE_NEWUSER)) &&
           !plan_.needs_intermediate();
}

Result<void> ContainerCreation::make_v1_cgroups() {
    std::vector<bool> made_already;
    for (const auto& h : layout_.hierarchies) made_already.push_back(h.unified);
    FB_ASSIGN(v1_cgroups_, create_cgroups(layout_, plan_.cgroups_path, {}, {}, made_already));
    trace::mark("create: v1 cgroup dirs made");
    return {};
}

Result<void> ContainerCreation::place_v1_cgroups() {
    if (!v1_cgroups_made_) v1_cgroups_made_ = make_v1_cgroups();
    FB_TRY(*v1_cgroups_made_);
    // Opened for init, which then only writes to them; it opens them itself if we could not
    // (and says why). After Go: before it, they would hold up init's start (~15 us each).
    std::vector<unique_fd> task_files;
    if (auto files = open_v1_task_files(layout_, cgroups_.dirs()); files && files->size() <= kSyncMaxFds)
        task_files = std::move(*files);
    FB_TRY(apply_cgroup_writes(v1_cgroup_writes_, layout_, cgroups_.dirs()));
    std::vector<std::string> created = cgroups_.created();
    created.insert(created.end(), v1_cgroups_.created().begin(), v1_cgroups_.created().end());
    state_.cgroup_dirs_created = removable_cgroups(layout_, std::move(created));
    trace::mark("create: v1 cgroups made");
    std::vector<int> fds;
    for (const auto& f : task_files) fds.push_back(f.get());
    // Unsent, init has died or reported an error: drive_init reads which next.
    (void)sync_send(parent_end_.get(), SyncType::CgroupsPlaced, 0, {}, fds);
    return {};
}

// runc's rootless contract: without permission for cgroups, a container that names no
// cgroupsPath and sets no limits runs in the caller's cgroup; one that does fails. Device
// rules are not limits here: a rootless plan has none (PlanOptions::restrict_devices).
Result<void> ContainerCreation::run_without_cgroups(const Error& refused, const std::vector<CgroupWrite>& writes) {
    int e = refused.errnum();
    if ((e != EACCES && e != EPERM && e != EROFS) || !rootless_mode().any()) return std::unexpected(refused);
    if (spec().linux && !spec().linux->cgroups_path.empty())
        return std::unexpected(refused.wrap("unable to apply cgroup configuration"));
    if (!writes.empty())
        return fail(e, "rootless needs no limits + no cgrouppath when no permission is granted for cgroups");
    log::debug("rootless: no permission for cgroups (" + refused.what() + "): the container stays in ours");
    // Its /sys/fs/cgroup shows the cgroups it is in: ours. They are not the container's:
    // state.json names none, so nothing later signals, freezes or removes them.
    FB_ASSIGN(mounted_cgroup_dirs_, own_cgroup_dirs(layout_));
    return {};
}

// The systemd driver, before the clone: everything that can be refused is (the properties,
// the bus), and the unit's cgroup dirs are named: systemd makes them in the hierarchies it
// drives when it starts the unit, forkbox in the others (cpuset, freezer, ...: runc's legacy
// manager's way), which init joins itself as on the cold path. Templates' spare cgroups are
// not asked for (ask_warm_template): the unit's cgroups are systemd's to make.
Result<void> ContainerCreation::prepare_systemd_unit(std::vector<CgroupWrite> writes) {
    if (!warm_.spare_cgroup.empty()) return fail(EPROTO, "zygote: a spare cgroup for a systemd unit");
    bool unified = layout_.mode == CgroupMode::V2;
    // A user's manager is delegated the v2 hierarchy alone: v1 controllers stay root's.
    if (rootless_mode().any() && !unified)
        return fail(ENOTSUP, "--systemd-cgroup as an unprivileged user needs cgroup v2: a user's systemd manager is "
                             "delegated no cgroup v1 controller (use cgroupfs: no --systemd-cgroup)");
    FB_ASSIGN(systemd::Manager manager, systemd::Manager::connect());
    systemd_.emplace(std::move(manager));
    trace::mark("create: systemd connected");
    // Plan::resources: with the device rules a container gets without any (a deny-all).
    int version = systemd::needs_version(plan_.resources) ? systemd_->version() : -1;
    FB_ASSIGN(systemd_properties_, systemd::resource_properties(plan_.resources, unified, version));
    // After the resources, so that an annotation can override what they say.
    FB_ASSIGN(auto annotated, systemd::annotation_properties(spec().annotations));
    systemd_properties_.insert(systemd_properties_.end(), annotated.begin(), annotated.end());
    // Where the manager's slices are: a user's below its own cgroup (user@UID.service), the
    // system's at the root of what this process sees of the hierarchy.
    std::string root;
    if (systemd_->for_user()) {
        FB_ASSIGN(root, systemd_->control_group());
    } else if (auto proc1 = read_file("/proc/1/cgroup")) {
        root = systemd::manager_root(layout_, *proc1);
    }
    std::vector<bool> by_systemd;
    for (const auto& h : layout_.hierarchies) by_systemd.push_back(systemd::manages(h));
    FB_TRY(record_cgroups(planned_cgroups(layout_, root + plan_.cgroups_path, by_systemd)));
    FB_ASSIGN(cgroups_, create_cgroups(layout_, root + plan_.cgroups_path, {}, {}, by_systemd));
    systemd_writes_ = std::move(writes);
    state_.cgroup_dirs = cgroups_.dirs();
    state_.cgroup_dirs_created = cgroups_.created();
    log::debug("systemd: unit " + plan_.systemd_unit + " in " + plan_.systemd_slice + " through " + systemd_->via());
    trace::mark("create: cgroups made");
    return {};
}

// The systemd driver, after the clone and before Go: the unit with init (or the intermediate,
// whose child inherits its cgroups) as its process; then every hierarchy where systemd left
// it elsewhere is joined, and the limits are written through cgroupfs as on the cold path.
//
// systemd puts a unit's process in the unit's cgroup only in the hierarchies it has realized
// the unit in, and elsewhere in the closest realized cgroup up the tree: on systemd 252 with
// v1 controllers, runc's containers were seen in system.slice's devices cgroup (runc sets the
// device policy after the start, and systemd's realization of the slice then moved them up),
// and without the cpuacct cgroup of their scope. forkbox sends the unit's limits and device
// policy with the start and checks where init ended up.
Result<void> ContainerCreation::start_systemd_unit() {
    bool unified = layout_.mode == CgroupMode::V2;
    systemd::Unit unit{plan_.systemd_slice, plan_.systemd_unit, plan_.cgroups_path};
    systemd::Properties props = systemd::unit_properties(unit, child_, unified, "forkbox container " + opt_.id);
    props.insert(props.end(), systemd_properties_.begin(), systemd_properties_.end());
    FB_TRY(systemd_->start_transient_unit(unit.unit, props));
    systemd_unit_.emplace(&*systemd_, unit.unit);
    trace::mark("create: systemd unit started");

    FB_ASSIGN(std::string text, read_file("/proc/" + std::to_string(child_) + "/cgroup"));
    auto now = cgroup_dirs_of_process(layout_, text);
    const auto& dirs = cgroups_.dirs();
    for (size_t i = 0; i < layout_.hierarchies.size(); ++i) {
        const auto& h = layout_.hierarchies[i];
        // Not systemd's: init joined them itself. name=systemd: the unit's by definition.
        if (!systemd::manages(h) || hierarchy_has(h, "name=systemd") || now[i] == dirs[i]) continue;
        log::debug("systemd: init is in " + now[i] + ", not in its unit's " + dirs[i] + ": moved");
        // Made as a path below systemd's own cgroup of the slice, parents first.
        std::string dir = h.mountpoint;
        std::string rest = dirs[i].substr(h.mountpoint.size());
        size_t pos = 1;
        while (pos <= rest.size()) {
            size_t next = rest.find('/', pos);
            if (next == std::string::npos) next = rest.size();
            dir += "/" + rest.substr(pos, next - pos);
            if (::mkdir(dir.c_str(), 0755) == 0)
                cgroups_.add_created(dir);
            else if (errno != EEXIST)
                return sys_error("create cgroup " + dir);
            pos = next + 1;
        }
        FB_TRY(write_file(dirs[i] + "/cgroup.procs", std::to_string(child_)));
    }
    state_.cgroup_dirs_created = cgroups_.created();
    FB_TRY(apply_cgroup_writes(systemd_writes_, layout_, dirs));
    if (device_program_) FB_TRY(apply_device_program(*device_program_, layout_, dirs));
    trace::mark("create: systemd placement done");
    FB_TRY_CTX(sync_send(parent_end_.get(), SyncType::Go, 0, hook_state_json(state_, "created")), "start container init");
    trace::mark("create: go");
    return {};
}

Result<void> ContainerCreation::clone_and_drive_init() {
    FB_ASSIGN(namespaces_, open_namespaces(plan_.joins));
    bool idmapped = std::any_of(plan_.mounts.begin(), plan_.mounts.end(), [](const MountStep& m) { return bool(m.idmap); });
    // Both act on what the host owns: only root of the initial user namespace may.
    bool initial_root = ::geteuid() == 0 && !rootless_mode().any();
    if (!plan_.net_devices.empty() && !initial_root)
        return fail(EPERM, "linux.netDevices: moving the host's network devices needs root of the initial user namespace");
    if (idmapped && !initial_root)
        return fail(EPERM, "idmapped mounts need root of the initial user namespace: only it may idmap a host "
                           "filesystem's mount");
    if (plan_.new_namespaces & CLONE_NEWUSER) {
        FB_ASSIGN(id_maps_, plan_id_map_writer(plan_.uid_mappings, plan_.gid_mappings, ::geteuid(), ::getegid()));
        // Bind sources are reached as we can, not as the container's root could, as runc
        // does: detached copies taken now, attached by init. A user may not clone mounts:
        // init then binds by path, in the user namespace it made.
        if (::geteuid() == 0 && !warm_.mount_namespace) {
            FB_ASSIGN(bind_sources_, open_bind_sources(plan_));
        }
    }
    // An idmapped bind's source is cloned and given its maps here, where we are root of the
    // initial user namespace, as the kernel requires; init attaches it like any source. Those
    // taking the container's maps wait for the user namespace init makes (unless init joins
    // a template's, mapped already), which saves a process making one of their own.
    bool idmap_with_init_userns = false;
    if (idmapped) {
        if (bind_sources_.empty()) {
            FB_ASSIGN(bind_sources_, open_bind_sources(plan_, true));
        }
        idmap_with_init_userns = (plan_.new_namespaces & CLONE_NEWUSER) && !(warm_.clone_flags() & CLONE_NEWUSER);
        FB_TRY(idmap_bind_sources(plan_, bind_sources_, idmap_with_init_userns));
    }
    for (const auto& fd : bind_sources_) args_.bind_source_trees.push_back(fd.get());
    // Taken as late as can be: the thread takes ~0.7 ms, which the cgroups' mkdirs overlap.
    // Entered for the clone, as a template's: by us around a fork, or already by the helper.
    if (clone_helper_) {
        FB_ASSIGN(std::optional<OpenNamespace> net, clone_helper_->take_network_namespace());
        network_in_helper_ = net.has_value();
        if (net) warm_.namespaces.push_back(std::move(*net));
    }
    int warm_flags = warm_.clone_flags();

    int sp[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) return sys_error("socketpair");
    parent_end_.reset(sp[0]);
    child_end_.reset(sp[1]);

    args_.plan = &plan_;
    args_.cgroup_layout = &layout_;
    args_.cgroup_dirs = cgroups_.dirs().empty() ? mounted_cgroup_dirs_ : cgroups_.dirs();
    FB_ASSIGN(std::vector<unique_fd> task_files, cgroups_.open_v1_task_files(layout_));
    for (const auto& fd : task_files) args_.cgroup_task_fds.push_back(fd.get());
    args_.namespaces = &namespaces_;
    args_.sync_fd = child_end_.get();
    args_.state_dir_fd = dir_->fd();
    args_.lock_fd = dir_->lock_fd();
    args_.v1_cgroups_follow = v1_cgroups_follow_;
    args_.no_pivot = opt_.no_pivot;
    args_.unprivileged_parent = ::geteuid() != 0;
    args_.in_user_namespace = rootless_mode().in_user_namespace;
    args_.new_keyring = !opt_.no_new_keyring;
    args_.preserve_fds = preserve_fds_;
    args_.console_fd = console_fd_.get();
    // A template's user namespace cannot be visited for the clone (there is no way back out
    // of one): the intermediate joins it, with the template's other namespaces, and makes
    // the mount and pid namespaces inside it.
    args_.intermediate = plan_.needs_intermediate() || (warm_flags & CLONE_NEWUSER);
    args_.warm_namespaces = warm_flags;
    args_.template_mount_ns = warm_.mount_namespace.get();
    args_.template_v1_cgroups_bound = warm_.v1_cgroups_bound;
    args_.template_v1_cgroups_ours = cgroups_.spare_taken_everywhere();
    // On the intermediate path the template's namespaces are joined with the others.
    if (args_.intermediate)
        for (auto& ns : warm_.namespaces) namespaces_.push_back(std::move(ns));
    if (seccomp_) args_.seccomp = &*seccomp_;
    FB_ASSIGN(unique_fd exec_stub, make_exec_stub());
    args_.exec_stub_fd = exec_stub.get();

    // Namespaces come with the clone itself, except those init unshares later and, on the
    // intermediate path, all of them (joins must happen first).
    uint64_t flags = args_.intermediate ? 0 : (plan_.new_namespaces & ~(CLONE_NEWCGROUP | CLONE_NEWTIME | warm_flags));
    FB_TRY(clone_init(flags));
    // The child's end is the child's now: keeping a copy would hide its exit from recv().
    child_end_.reset();
    console_fd_.reset();
    namespaces_.clear();
    // Init's copies are the same mounts: ours are kept only to idmap them once its maps are in.
    if (!idmap_with_init_userns) bind_sources_.clear();
    // Placement is done: clone3 put the child in the v2 cgroup, and it joins the v1
    // hierarchies itself through these fds (see join_v1_cgroups).
    task_files.clear();
    unified_procs_.reset();
    if (systemd_) FB_TRY(start_systemd_unit());
    if (v1_cgroups_follow_) FB_TRY(place_v1_cgroups());

    std::function<Result<void>()> while_init_works;
    if (device_program_while_init_works_)
        while_init_works = [&] { return apply_device_program(*device_program_, layout_, cgroups_.dirs()); };
    // linux.netDevices: into init's network namespace as soon as it has one, before any hook.
    auto move_net_devices = [&](pid_t pid) -> Result<void> {
        if (plan_.net_devices.empty()) return {};
        std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
        unique_fd netns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!netns) return sys_error("linux.netDevices: open " + path);
        FB_TRY(move_net_devices_in(plan_.net_devices, netns.get()));
        net_devices_.emplace(plan_.net_devices, std::move(netns));
        for (const auto& d : plan_.net_devices) state_.net_devices[d.host_name] = d.container_name;
        return {};
    };
    auto init_pid = drive_init(child_, args_.intermediate, parent_end_.get(), plan_, id_maps_, state_, init_guard_,
                               spec().linux && spec().linux->seccomp ? &*spec().linux->seccomp : nullptr,
                               while_init_works, move_net_devices, [&](pid_t child) -> Result<void> {
                                   if (!idmap_with_init_userns) return {};
                                   FB_TRY(idmap_with_container_namespace(plan_, bind_sources_, child));
                                   trace::mark("create: binds idmapped");
                                   return {};
                               });
    bind_sources_.clear();
    if (!init_pid) {
        // Runtime-spec: a failed create-phase hook stops the container and the lifecycle
        // continues with delete, which runs the poststop hooks.
        child_guard_->kill_now();
        init_guard_.reset();
        run_poststop_hooks(plan_.hooks.poststop, state_);
        return std::unexpected(init_pid.error());
    }
    if (args_.intermediate) {
        // The intermediate exits right after reporting init's pid.
        child_guard_->dismiss();
        (void)wait_child(child_);
    }
    trace::mark("create: init ready");
    state_.pid = *init_pid;
    return {};
}

// Whether init runs on our memory until it has copied what it reads (vfork_helper.hpp):
// a run 1.15x faster on the PVM guest (no fault for each page of our code and heap it
// touches, an exec that tears no copied address space down). Not with a new user or time
// namespace (the kernel refuses either to a process sharing its memory; the intermediate
// unshares a user namespace), nor where init forks (the hooks it runs itself) or waits for
// the systemd driver.
// FORKBOX_INIT_CLONE=fork keeps to fork (tests, A/Bs).
bool ContainerCreation::init_may_share_memory() const {
    if (const char* how = std::getenv("FORKBOX_INIT_CLONE"); how && std::string_view(how) == "fork") return false;
    // createContainer and startContainer hooks are forked by init itself; create runs the others.
    bool init_runs_hooks = !plan_.hooks.create_container.empty() || !plan_.hooks.start_container.empty();
    // The helper thread enters these for the clone (a template's, the network namespace made
    // ahead): setns of a mount or user namespace refuses a thread. Init joins a template's
    // mount namespace itself.
    bool helper_can_enter = std::all_of(warm_.namespaces.begin(), warm_.namespaces.end(), [](const OpenNamespace& ns) {
        return (ns.clone_flag & ~(CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID)) == 0;
    });
    return !args_.intermediate && !(plan_.new_namespaces & (CLONE_NEWUSER | CLONE_NEWTIME)) && plan_.joins.empty() &&
           args_.bind_source_trees.empty() && helper_can_enter && !systemd_ && !init_runs_hooks &&
           !args_.in_user_namespace && !rootless_mode().any();
}

// Clones init (or the intermediate) and sends it Go.
Result<void> ContainerCreation::clone_init(uint64_t flags) {
    std::fflush(nullptr);
    bool shared_memory_init = init_may_share_memory();
    if (shared_memory_init) {
        shared_start_ = SharedInitStart{&args_, parent_end_.get()};
        if (int unified = cgroups_.unified_fd(); unified >= 0) {
            unique_fd procs(::openat(unified, "cgroup.procs", O_WRONLY | O_CLOEXEC));
            if (!procs) return sys_error("open the container's cgroup.procs");
            args_.cgroup_task_fds.insert(args_.cgroup_task_fds.begin(), procs.get());
            shared_start_.unified_procs = procs.get();
            unified_procs_ = std::move(procs);
        }
    }
    // A fork takes the network namespace from us (entered around it): the helper may end.
    if (!shared_memory_init) clone_helper_.reset();
    trace::mark("create: clone");
    Result<void> go;
    {
        // Otherwise init inherits the template's namespaces from us: we enter them for the
        // clone only, so hooks still run in the runtime's own namespaces.
        std::optional<NamespaceVisit> visit;
        if (!shared_memory_init && !args_.intermediate && !warm_.namespaces.empty()) {
            FB_ASSIGN(visit, NamespaceVisit::enter(warm_.namespaces));
        }
        if (shared_memory_init) {
            trace::mark("create: init shares memory");
            if (!clone_helper_) clone_helper_.emplace(CloneHelper::Options{});
            auto pid = clone_helper_->clone(start_init_on_shared_memory, &shared_start_, static_cast<int>(flags),
                                            [this]() -> Result<void> {
                                                for (const auto& ns : warm_.namespaces) {
                                                    // The helper made it, and is in it.
                                                    if (network_in_helper_ && ns.clone_flag == CLONE_NEWNET) continue;
                                                    if (::setns(ns.fd.get(), ns.clone_flag) < 0)
                                                        return sys_error("enter " + ns.path);
                                                }
                                                return {};
                                            },
                                            cgroups_.unified_fd(), [this] {
                                                // On our CPU while init starts on the other:
                                                // the mkdirs touch nothing init reads.
                                                if (v1_cgroups_follow_) v1_cgroups_made_ = make_v1_cgroups();
                                            });
            // The helper thread's error: its errno is not ours. Nothing was cloned, nor entered here.
            if (!pid) return std::unexpected(pid.error().wrap("clone container init"));
            child_ = *pid;
        } else {
            child_ = sys::clone3_fork(flags, cgroups_.unified_fd());
        }
        if (child_ == 0) {  // inside the scope: the visit must end in the parent only
            parent_end_.reset();
            container_init(args_);
        }
        // Go before the way back out of the template's namespaces (a setns each): init
        // starts its work meanwhile.
        // With the systemd driver init waits for Go until systemd has put it in its unit.
        if (child_ > 0) state_.pid = child_;
        if (child_ > 0 && !systemd_) {
            go = sync_send(parent_end_.get(), SyncType::Go, 0, hook_state_json(state_, "created"));
            trace::mark("create: go");
        }
    }
    if (child_ < 0) return sys_error("clone container init");
    trace::mark("create: cloned");
    child_guard_.emplace(child_);
    if (!go) return std::unexpected(go.error().wrap("start container init"));
    return {};
}

Result<pid_t> ContainerCreation::finish() {
    auto st = read_proc_stat(state_.pid);
    if (!st) return fail(ESRCH, "container init exited during setup");
    state_.pid_start_time = st->start_time;
    FB_TRY(dir_->write_state(state_));
    trace::mark("create: state recorded");
    if (!opt_.pid_file.empty()) FB_TRY(write_pid_file(opt_.pid_file, state_.pid));
    if (pidfd_socket_) {
        FB_TRY(send_pidfd(pidfd_socket_.get(), state_.pid, "standard"));
        pidfd_socket_.reset();
    }
    if (pty_master_) {
        FB_ASSIGN(*pty_master_, receive_console_master(console_peer_.get()));
    }
    // Init may outlive us from here: it waited for this, so that a create killed before
    // state.json named it takes it along (init.cpp, die_with_create).
    FB_TRY_CTX(sync_send(parent_end_.get(), SyncType::Recorded), "container init exited during setup");
    parent_end_.reset();
    child_guard_->dismiss();
    if (init_guard_) init_guard_->dismiss();
    if (net_devices_) net_devices_->dismiss();
    cgroups_.commit();
    v1_cgroups_.commit();
    if (systemd_unit_) systemd_unit_->armed = false;
    trace::mark("create: done");
    dir_guard_->armed = false;
    dir_guard_.reset();
    // The lock goes now, not with the rest: `run` starts the container before freeing that.
    dir_.reset();
    log::debug("created container " + opt_.id + " with init pid " + std::to_string(state_.pid));
    return state_.pid;
}

}  // namespace

Result<pid_t> create_container(const StateStore& store, const CreateOptions& opt, unique_fd* pty_master,
                               std::unique_ptr<CreationRemains>* remains) {
    trace::mark("create: verb");
    auto creation = std::make_unique<ContainerCreation>(store, opt, pty_master);
    FB_TRY(creation->load_and_plan());
    FB_TRY(creation->prepare_state());
    FB_TRY(creation->place_cgroups());
    FB_TRY(creation->clone_and_drive_init());
    FB_ASSIGN(pid_t pid, creation->finish());
    if (remains) *remains = std::move(creation);
    return pid;
}

}  // namespace forkbox
