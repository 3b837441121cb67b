// `create`: Spec -> validate -> Plan -> clone init and drive it through the sync protocol.
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>

#include "libforkbox/cgroup_resources.hpp"
#include "libforkbox/cgroups.hpp"
#include "libforkbox/container.hpp"
#include "libforkbox/exec_guard.hpp"
#include "libforkbox/hooks.hpp"
#include "libforkbox/init.hpp"
#include "libforkbox/log.hpp"
#include "libforkbox/namespaces.hpp"
#include "libforkbox/pidfd.hpp"
#include "libforkbox/plan.hpp"
#include "libforkbox/seccomp.hpp"
#include "libforkbox/seccomp_agent.hpp"
#include "libforkbox/seccomp_cache.hpp"
#include "libforkbox/sync.hpp"
#include "libforkbox/syscalls.hpp"
#include "libforkbox/terminal.hpp"
#include "libforkbox/trace.hpp"
#include "libforkbox/zygote.hpp"
#include "oci/config_text.hpp"
#include "oci/json.hpp"
#include "oci/parse.hpp"
#include "oci/validate.hpp"

namespace forkbox {

namespace {

// Removes a half-made container directory unless dismissed.
struct ContainerDirGuard {
    ContainerDir* dir;
    bool armed = true;
    ~ContainerDirGuard() {
        if (armed) (void)dir->remove();
    }
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

struct LoadedConfig {
    oci::Spec spec;
    std::string text;
    std::string seccomp_json;  // linux.seccomp's text when a scan found it (the cache key)
    // The compiled program, found in the cache without parsing the profile: then
    // spec.linux->seccomp stays empty (a profile with notify rules is always parsed).
    std::optional<SeccompProgram> cached_seccomp;
};

Result<LoadedConfig> load_bundle_config(const std::string& bundle, const std::string& root) {
    LoadedConfig c;
    std::string path = bundle + "/config.json";
    auto text = read_file(path);
    if (!text) {
        if (text.error().errnum() == ENOENT) return fail(ENOENT, "JSON specification file " + path + " not found");
        return std::unexpected(text.error());
    }
    c.text = std::move(*text);
    trace::mark("create: config read");
    if (auto member = oci::split_seccomp_member(c.text)) {
        c.seccomp_json = std::string(member->profile);
        // Validation of a profile depends on the profile alone, and the cache holds only
        // profiles that passed it: the rest of the config is parsed and validated as usual.
        auto program = find_cached_seccomp(member->profile, root);
        if (program && !program->wants_listener()) {
            auto spec = oci::parse_config(member->rest);
            if (spec && !(spec->linux && spec->linux->seccomp) && oci::validate(*spec)) {
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
    FB_TRY_CTX(oci::validate(c.spec), "config.json");
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
    request.cgroup_parent = zygote::cgroup_parent(plan.cgroups_path);
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
Result<pid_t> drive_init(pid_t child, bool intermediate, int sync_fd, const Plan& plan, ContainerState& state,
                         std::optional<ChildGuard>& init_guard, const oci::Seccomp* seccomp,
                         const std::function<Result<void>()>& while_init_works) {
    if (while_init_works) FB_TRY(while_init_works());
    pid_t init_pid = intermediate ? 0 : child;
    for (;;) {
        auto msg = sync_recv(sync_fd);
        if (!msg) {
            if (msg.error().errnum() == EPIPE) return fail(EPIPE, "container init exited during setup");
            return std::unexpected(msg.error());
        }
        switch (msg->type) {
        case SyncType::UsernsReady:
            FB_TRY(write_id_mappings(child, plan.uid_mappings, plan.gid_mappings));
            FB_TRY(sync_send(sync_fd, SyncType::UsernsDone));
            break;
        case SyncType::InitPid:
            init_pid = msg->value;
            init_guard.emplace(init_pid);
            state.pid = init_pid;
            break;
        case SyncType::RuntimeHooks: {
            std::string hs = hook_state_json(state, "created");
            FB_TRY(run_hooks(plan.hooks.prestart, hs, "prestart", state.bundle));
            FB_TRY(run_hooks(plan.hooks.create_runtime, hs, "createRuntime", state.bundle));
            FB_TRY(sync_send(sync_fd, SyncType::RuntimeHooksDone));
            break;
        }
        case SyncType::SeccompListener: {
            if (!seccomp || !msg->fd) return fail(EPROTO, "sync: unexpected seccomp listener");
            std::string doc = container_process_state(state, "creating", init_pid > 0 ? init_pid : child,
                                                      seccomp->listener_metadata);
            FB_TRY(hand_listener_to_agent(seccomp->listener_path, msg->fd.get(), doc));
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

}  // namespace

Result<pid_t> create_container(const StateStore& store, const CreateOptions& opt, unique_fd* pty_master) {
    trace::mark("create: verb");
    FB_TRY(validate_container_id(opt.id));
    FB_ASSIGN(std::string bundle, absolute_bundle(opt.bundle));
    FB_ASSIGN(LoadedConfig cfg, load_bundle_config(bundle, store.root()));
    const oci::Spec& spec = cfg.spec;
    bool terminal = spec.process && spec.process->terminal;
    // Without a pty_master to fill, the container detaches from us: runc's rules apply.
    if (!pty_master || !opt.console_socket.empty())
        FB_TRY(check_console_options(terminal, true, opt.console_socket));
    if (!terminal) pty_master = nullptr;
    FB_ASSIGN(Plan plan, make_plan(spec, PlanOptions{opt.id, bundle}));
    trace::mark("create: planned");
    // Zygote mode: asked now, taken before the cgroups; the daemon answers meanwhile.
    WarmTemplateRequest warm_request(ask_warm_template(opt, spec, plan, cfg.text),
                                     zygote::cgroup_parent(plan.cgroups_path));
    trace::mark("create: zygote asked");
    if (!spec.process || plan.process.args.empty()) return fail(EINVAL, "config.json: process.args must not be empty");
    int preserve_fds = opt.preserve_fds;
    // Socket activation of forkbox itself passes the sockets on, as runc does.
    if (int listen = activation_fds(); listen > 0) {
        preserve_fds += listen;
        plan.process.env.push_back("LISTEN_FDS=" + std::to_string(listen));
        plan.process.env.push_back("LISTEN_PID=1");
    }
    // The pty master goes to the manager's console socket, or to us for a foreground run.
    unique_fd console_fd, console_peer;
    if (terminal && pty_master) {
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return sys_error("console socketpair");
        console_fd.reset(sv[0]);
        console_peer.reset(sv[1]);
    } else if (terminal) {
        FB_ASSIGN(console_fd, connect_console_socket(opt.console_socket));
    }
    // Compiled here, before clone: the child only hands the finished program to the kernel.
    // Through the cache in the state root: compiling the default profile takes milliseconds.
    // The root is made first, so even the first container of a new root fills the cache.
    std::optional<SeccompProgram> seccomp = std::move(cfg.cached_seccomp);
    if (!seccomp && spec.linux && spec.linux->seccomp) {
        FB_TRY(store.ensure_root());
        auto program = compile_seccomp_cached(*spec.linux->seccomp, store.root(), cfg.seccomp_json);
        if (!program) return std::unexpected(program.error().wrap("seccomp"));
        seccomp = std::move(*program);
    }

    trace::mark("create: seccomp ready");
    FB_ASSIGN(ContainerDir dir, store.create(opt.id));
    ContainerDirGuard dir_guard{&dir};
    FB_TRY(write_file_atomic(dir.fd(), kConfigFile, cfg.text, 0600));
    if (::mknodat(dir.fd(), kExecFifo, S_IFIFO | 0600, 0) < 0) return sys_error("create exec fifo");
    // Any container user must be able to open the write end (runc uses 0622 too).
    if (::fchmodat(dir.fd(), kExecFifo, 0622, 0) < 0) return sys_error("chmod exec fifo");

    ContainerState state;
    state.oci_version = spec.oci_version;
    state.id = opt.id;
    state.bundle = bundle;
    state.rootfs = plan.rootfs;
    state.created = rfc3339_now();
    state.annotations = spec.annotations;
    state.own_pid_namespace = plan.own_pid_namespace();
    // A state file from the start, so `delete --force` can clean up after a crashed create.
    FB_TRY(dir.write_state(state));

    trace::mark("create: state written");
    FB_ASSIGN(CgroupLayout layout, detect_cgroup_layout());
    trace::mark("create: cgroup layout");
    // Planned before any cgroup exists, so a limit this host cannot hold fails create cleanly.
    std::vector<CgroupWrite> cgroup_writes;
    std::optional<std::vector<bpf_insn>> device_program;
    if (spec.linux && spec.linux->resources) {
        if (layout.unified()) FB_TRY_CTX(load_v2_controllers(layout), "cgroup");
        FB_ASSIGN(cgroup_writes, plan_cgroup_writes(*spec.linux->resources, layout, spec.linux->devices));
        FB_ASSIGN(device_program, plan_device_program(*spec.linux->resources, layout, spec.linux->devices));
    }
    // Zygote mode: fresh namespaces and spare cgroups from a warm template instead of
    // making them now. Taken right before the cgroups, which consume the spares.
    std::optional<zygote::Template> warm_template = warm_request.take();
    trace::mark("create: zygote answered");
    std::vector<OpenNamespace> warm;
    std::string spare_cgroup;
    unique_fd template_mount_ns;
    unique_fd warm_device_program;  // loaded by the daemon from this very config
    if (warm_template) {
        warm = std::move(warm_template->namespaces);
        spare_cgroup = warm_template->spare_cgroup;
        warm_device_program = std::move(warm_template->device_program);
        if (warm_template->mount_namespace) {
            // init joins the mount namespace itself; we enter the pid namespace for the clone.
            template_mount_ns = std::move(warm_template->mount_namespace);
            OpenNamespace pid;
            pid.clone_flag = CLONE_NEWPID;
            pid.path = "zygote template";
            pid.fd = std::move(warm_template->pid_namespace);
            warm.push_back(std::move(pid));
        }
    }
    FB_ASSIGN(CgroupPlacement cgroups, create_cgroups(layout, plan.cgroups_path, spare_cgroup));
    trace::mark("create: cgroups placed");
    // Before clone, so the limits hold from the container's first instruction; on failure
    // the placement guard removes the cgroups again.
    FB_TRY(apply_cgroup_writes(cgroup_writes, layout, cgroups.dirs()));
    // cgroup v2's device program: the kernel takes ~0.45 ms to verify and JIT it, so it is
    // loaded while init sets up (on the other CPU) and attached before init reports Ready,
    // hence before `start` and the container's first instruction. Nothing of the container
    // runs before then, unless hooks run inside it (createContainer, startContainer): then
    // it is attached before the clone (init's own device nodes are allowed either way).
    // A rootfs template brings it loaded (the daemon made it from this config, the
    // fingerprint says): attached now. Its fd is closed once attached, never in init.
    bool device_program_while_init_works = device_program && !warm_device_program &&
                                           plan.hooks.create_container.empty() && plan.hooks.start_container.empty();
    if (device_program && warm_device_program)
        FB_TRY(apply_device_program(warm_device_program.get(), layout, cgroups.dirs()));
    else if (device_program && !device_program_while_init_works)
        FB_TRY(apply_device_program(*device_program, layout, cgroups.dirs()));
    warm_device_program.reset();
    state.cgroup_dirs = cgroups.dirs();
    state.cgroup_dirs_created = cgroups.created();
    trace::mark("create: cgroups made");
    FB_ASSIGN(auto namespaces, open_namespaces(plan.joins));
    int warm_flags = 0;
    for (const auto& ns : warm) warm_flags |= ns.clone_flag;
    if (template_mount_ns) warm_flags |= CLONE_NEWNS;

    int sp[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) return sys_error("socketpair");
    unique_fd parent_end(sp[0]), child_end(sp[1]);

    InitArgs args;
    args.plan = &plan;
    args.cgroup_layout = &layout;
    args.cgroup_dirs = cgroups.dirs();
    FB_ASSIGN(std::vector<unique_fd> task_files, cgroups.open_v1_task_files(layout));
    for (const auto& fd : task_files) args.cgroup_task_fds.push_back(fd.get());
    args.namespaces = &namespaces;
    args.sync_fd = child_end.get();
    args.state_dir_fd = dir.fd();
    args.lock_fd = dir.lock_fd();
    args.no_pivot = opt.no_pivot;
    args.new_keyring = !opt.no_new_keyring;
    args.preserve_fds = preserve_fds;
    args.console_fd = console_fd.get();
    // A template's user namespace cannot be visited for the clone (there is no way back out
    // of one): the intermediate joins it, with the template's other namespaces, and makes
    // the mount and pid namespaces inside it.
    args.intermediate = plan.needs_intermediate() || (warm_flags & CLONE_NEWUSER);
    args.warm_namespaces = warm_flags;
    args.template_mount_ns = template_mount_ns.get();
    args.template_v1_cgroups_bound = warm_template && warm_template->v1_cgroups_bound;
    args.template_v1_cgroups_ours = cgroups.spare_taken_everywhere();
    // On the intermediate path the template's namespaces are joined with the others.
    if (args.intermediate)
        for (auto& ns : warm) namespaces.push_back(std::move(ns));
    if (seccomp) args.seccomp = &*seccomp;
    FB_ASSIGN(unique_fd exec_stub, make_exec_stub());
    args.exec_stub_fd = exec_stub.get();

    // Namespaces come with the clone itself, except those init unshares later and, on the
    // intermediate path, all of them (joins must happen first).
    uint64_t flags = args.intermediate ? 0 : (plan.new_namespaces & ~(CLONE_NEWCGROUP | CLONE_NEWTIME | warm_flags));
    std::fflush(nullptr);
    trace::mark("create: clone");
    pid_t child;
    Result<void> go;
    {
        // Otherwise init inherits the template's namespaces from us: we enter them for the
        // clone only, so hooks still run in the runtime's own namespaces.
        std::optional<NamespaceVisit> visit;
        if (!args.intermediate && !warm.empty()) {
            FB_ASSIGN(visit, NamespaceVisit::enter(warm));
        }
        child = sys::clone3_fork(flags, cgroups.unified_fd());
        if (child == 0) {  // inside the scope: the visit must end in the parent only
            parent_end.reset();
            container_init(args);
        }
        // Go before the way back out of the template's namespaces (a setns each): init
        // starts its work meanwhile.
        if (child > 0) {
            state.pid = child;
            go = sync_send(parent_end.get(), SyncType::Go, 0, hook_state_json(state, "created"));
            trace::mark("create: go");
        }
    }
    if (child < 0) return sys_error("clone container init");
    trace::mark("create: cloned");
    ChildGuard child_guard(child);
    if (!go) return std::unexpected(go.error().wrap("start container init"));
    std::optional<ChildGuard> init_guard;
    // The child's end is the child's now: keeping a copy would hide its exit from recv().
    child_end.reset();
    console_fd.reset();
    namespaces.clear();

    // Placement is done: clone3 put the child in the v2 cgroup, and it joins the v1
    // hierarchies itself through these fds (see join_v1_cgroups).
    task_files.clear();
    std::function<Result<void>()> while_init_works;
    if (device_program_while_init_works)
        while_init_works = [&] { return apply_device_program(*device_program, layout, cgroups.dirs()); };
    auto init_pid = drive_init(child, args.intermediate, parent_end.get(), plan, state, init_guard,
                               spec.linux && spec.linux->seccomp ? &*spec.linux->seccomp : nullptr, while_init_works);
    if (!init_pid) {
        // Runtime-spec: a failed create-phase hook stops the container and the lifecycle
        // continues with delete, which runs the poststop hooks.
        child_guard.kill_now();
        init_guard.reset();
        run_poststop_hooks(plan.hooks.poststop, state);
        return std::unexpected(init_pid.error());
    }
    if (args.intermediate) {
        // The intermediate exits right after reporting init's pid.
        child_guard.dismiss();
        (void)wait_child(child);
    }
    trace::mark("create: init ready");
    state.pid = *init_pid;
    auto st = read_proc_stat(state.pid);
    if (!st) return fail(ESRCH, "container init exited during setup");
    state.pid_start_time = st->start_time;
    FB_TRY(dir.write_state(state));
    if (!opt.pid_file.empty()) FB_TRY(write_pid_file(opt.pid_file, state.pid));
    if (pty_master) {
        FB_ASSIGN(*pty_master, receive_console_master(console_peer.get()));
    }
    child_guard.dismiss();
    if (init_guard) init_guard->dismiss();
    cgroups.commit();
    trace::mark("create: done");
    dir_guard.armed = false;
    log::debug("created container " + opt.id + " with init pid " + std::to_string(state.pid));
    return state.pid;
}

}  // namespace forkbox
