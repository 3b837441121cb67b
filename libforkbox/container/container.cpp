// start, kill, pause, resume, delete, state, list: the verbs that act on an existing container.
#include "libforkbox/container/container.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "libforkbox/base/files.hpp"
#include "libforkbox/base/json.hpp"
#include "libforkbox/base/log.hpp"
#include "libforkbox/base/syscalls.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/cgroup/cgroups.hpp"
#include "libforkbox/cgroup/devices_v1.hpp"
#include "libforkbox/cgroup/freezer.hpp"
#include "libforkbox/cgroup/resources.hpp"
#include "libforkbox/cgroup/systemd_manager.hpp"
#include "libforkbox/container/net_devices.hpp"
#include "libforkbox/process/hooks.hpp"
#include "libforkbox/process/pidfd.hpp"
#include "oci/parse.hpp"

namespace forkbox {

const char* status_name(Status s) {
    switch (s) {
    case Status::Creating: return "creating";
    case Status::Created: return "created";
    case Status::Running: return "running";
    case Status::Paused: return "paused";
    case Status::Stopped: return "stopped";
    }
    return "unknown";
}

Status derive_status(const ContainerState& s, bool fifo_exists) {
    if (s.pid <= 0) return Status::Stopped;
    if (!process_alive(s.pid, s.pid_start_time)) return Status::Stopped;
    // A created container cannot be paused (pause refuses it): skip the freezer lookup,
    // which reads mountinfo, on the start path.
    if (fifo_exists) return Status::Created;
    if (!s.cgroup_dirs.empty()) {
        auto freezer = container_freezer(s.cgroup_dirs);
        if (freezer) {
            auto frozen = cgroup_frozen(*freezer);
            if (frozen && *frozen) return Status::Paused;
        }
    }
    return Status::Running;
}

// The state document hooks get on stdin (runtime.md "State").
std::string hook_state_json(const ContainerState& s, const char* status) {
    json::Writer w;
    w.begin_object();
    w.key("ociVersion").value(s.oci_version);
    w.key("id").value(s.id);
    w.key("status").value(status);
    if (s.pid > 0) w.key("pid").value(static_cast<int64_t>(s.pid));
    w.key("bundle").value(s.bundle);
    if (!s.annotations.empty()) {
        w.key("annotations").begin_object();
        for (const auto& [k, v] : s.annotations) w.key(k).value(v);
        w.end_object();
    }
    w.end_object();
    return w.take();
}

void run_poststop_hooks(const std::vector<oci::Hook>& hooks, const ContainerState& s) {
    if (hooks.empty()) return;
    ContainerState stopped = s;
    stopped.pid = 0;
    std::string hs = hook_state_json(stopped, "stopped");
    for (size_t i = 0; i < hooks.size(); ++i) {
        if (auto r = run_hook(hooks[i], hs, s.bundle); !r)
            log::warn("poststop hook #" + std::to_string(i) + ": " + r.error().what());
    }
}

std::string state_document(const ContainerInfo& info, bool pretty) {
    const auto& s = info.state;
    json::Writer w(pretty);
    w.begin_object();
    w.key("ociVersion").value(s.oci_version);
    w.key("id").value(s.id);
    w.key("pid").value(static_cast<int64_t>(info.status == Status::Stopped ? 0 : s.pid));
    w.key("status").value(status_name(info.status));
    w.key("bundle").value(s.bundle);
    w.key("rootfs").value(s.rootfs);
    w.key("created").value(s.created);
    if (!s.annotations.empty()) {
        w.key("annotations").begin_object();
        for (const auto& [k, v] : s.annotations) w.key(k).value(v);
        w.end_object();
    }
    w.key("owner").value(s.owner);
    w.end_object();
    return w.take();
}

namespace {

// The name of the state directory's owner from /etc/passwd (read directly: the binary is
// static, and glibc's NSS modules cannot be loaded into it).
std::string owner_of(const ContainerDir& dir) {
    struct stat st;
    if (::fstat(dir.fd(), &st) < 0) return "";
    std::string uid = std::to_string(st.st_uid);
    auto passwd = read_file("/etc/passwd");
    if (!passwd) return uid;
    size_t pos = 0;
    while (pos < passwd->size()) {
        size_t end = passwd->find('\n', pos);
        if (end == std::string::npos) end = passwd->size();
        std::string_view line(passwd->data() + pos, end - pos);
        size_t c1 = line.find(':'), c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
        size_t c3 = c2 == std::string_view::npos ? c2 : line.find(':', c2 + 1);
        if (c3 != std::string_view::npos && line.substr(c2 + 1, c3 - c2 - 1) == uid)
            return std::string(line.substr(0, c1));
        pos = end + 1;
    }
    return uid;
}

// The owner is only shown (state, list): the verbs on the critical path skip /etc/passwd.
enum class WithOwner { No, Yes };

Result<ContainerInfo> load_info(const ContainerDir& dir, WithOwner with_owner = WithOwner::No) {
    ContainerInfo info;
    auto state = dir.read_state();
    auto id = [&] { return dir.path().substr(dir.path().find_last_of('/') + 1); };
    // A create that has made the directory but not yet its first state.json holds the
    // lock: readers that take none (state, ps, list) see a container being created.
    if (!state && state.error().errnum() == ENOENT && dir.locked_elsewhere()) {
        info.state.id = id();
        info.status = Status::Creating;
        return info;
    }
    // Readers take no lock either way: one may open the directory a delete is emptying.
    if (!state && state.error().errnum() == ENOENT && dir.being_removed())
        return fail(ENOENT, "container " + id() + " does not exist");
    if (!state) return std::unexpected(state.error());
    info.state = std::move(*state);
    if (with_owner == WithOwner::Yes) info.state.owner = owner_of(dir);
    info.status = derive_status(info.state, dir.fifo_exists());
    // No pid yet: a create still holding the lock, or one that crashed (stopped).
    if (info.state.pid <= 0 && dir.locked_elsewhere()) info.status = Status::Creating;
    return info;
}

Result<ContainerDir> open_existing(const StateStore& store, const std::string& id,
                                   StateStore::Lock lock = StateStore::Lock::Exclusive) {
    auto dir = store.open(id, lock);
    if (!dir && dir.error().errnum() == ENOENT) return fail(ENOENT, "container " + id + " does not exist");
    return dir;
}

// Signals every process of the container: the cgroup lists them all.
void signal_all(const ContainerState& s, int sig) {
    // One hierarchy lists every process.
    if (std::string d = first_cgroup_dir(s.cgroup_dirs); !d.empty())
        for (pid_t p : cgroup_tree_pids(d)) ::kill(p, sig);
}

// A SIGKILL sent to a paused container is only acted on once it is thawed: the v1 freezer
// keeps the killed tasks stopped (runc thaws after SIGKILL too). A cgroup still FREEZING
// counts: a task that joined it frozen (an exec racing a pause) is stopping there, and it
// reads FROZEN a moment later. Call after signalling.
void thaw_killed(const ContainerState& s) {
    if (s.cgroup_dirs.empty()) return;
    auto freezer = container_freezer(s.cgroup_dirs);
    if (!freezer) return;
    auto thawed = cgroup_thawed(*freezer);
    if (!thawed || *thawed) return;
    if (auto r = thaw_cgroup(*freezer); !r) log::warn("thaw killed container: " + r.error().what());
}

// Kills init and, without a pid namespace of its own, everything in its cgroup; thaws a
// paused container so the killed tasks can die; waits, thawing again meanwhile. An init
// still there after 10 s is an error: the caller keeps the state, so a later delete tries
// again rather than forget a live container.
Result<void> kill_and_wait(const ContainerState& s) {
    auto pidfd = open_pidfd(s.pid, s.pid_start_time);
    // Init reaped, in a pid namespace of its own: so is every process of the container,
    // frozen or not (the kernel lets a namespace's init go last). Nothing to kill or thaw.
    if (!pidfd && pidfd.error().errnum() == ESRCH && s.own_pid_namespace) return {};
    if (pidfd) sys::pidfd_send_signal(pidfd->get(), SIGKILL);
    if (!s.own_pid_namespace) signal_all(s, SIGKILL);
    thaw_killed(s);
    if (!pidfd) return {};
    for (int waited_ms = 0; waited_ms < 10000; waited_ms += 100) {
        if (wait_pidfd_exit(pidfd->get(), 100)) return {};
        thaw_killed(s);
    }
    return fail(ETIMEDOUT, "container " + s.id + ": init (pid " + std::to_string(s.pid) +
                               ") did not exit within 10 s of SIGKILL");
}

void run_poststop_hooks_of(const ContainerDir& dir, const ContainerState& s) {
    auto text = read_file_at(dir.fd(), kConfigFile);
    if (!text || !config_may_have_hooks(*text, "poststop")) return;
    auto spec = oci::parse_config(*text);
    if (spec && spec->hooks) run_poststop_hooks(spec->hooks->poststop, s);
}

// The systemd driver's unit: stopped (its job waited for) and reset. Not reaching systemd
// is a warning: the cgroups forkbox made go all the same, and systemd forgets an empty scope.
void stop_systemd_unit(const ContainerState& s) {
    auto manager = systemd::Manager::connect();
    auto stopped = manager ? manager->stop_unit(s.systemd_unit) : Result<void>(std::unexpected(manager.error()));
    if (!stopped) log::warn("delete " + s.id + ": " + stopped.error().what());
}

// A create killed before it recorded init's pid: whatever runs in the cgroups it named
// (init, an intermediate, a hook's process) is killed in every hierarchy, since a process
// that was placed in some and not yet in others may show in any one of them only.
void kill_half_made(const ContainerState& s) {
    for (const auto& d : s.cgroup_dirs)
        if (!d.empty())
            for (pid_t p : cgroup_tree_pids(d)) ::kill(p, SIGKILL);
    thaw_killed(s);
}

// linux.netDevices back to the host while the container's network namespace lives (init
// alive). Once it is gone the kernel has already returned a physical device (under its
// name in the container) and destroyed a virtual one, as it does for every runtime.
void return_net_devices(const ContainerState& s) {
    if (s.net_devices.empty() || s.pid <= 0) return;
    // Init still alive (same start time) after the open: the namespace opened is its own.
    unique_fd netns(::open(("/proc/" + std::to_string(s.pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
    if (!netns || !process_alive(s.pid, s.pid_start_time)) return;
    std::vector<NetDeviceMove> devices;
    for (const auto& [host, inside] : s.net_devices) devices.push_back(NetDeviceMove{host, inside});
    if (auto back = move_net_devices_out(devices, netns.get()); !back)
        log::warn("delete " + s.id + ": " + back.error().what());
}

Result<void> destroy(ContainerDir& dir, const ContainerState& s, bool poststop_hooks = true) {
    return_net_devices(s);
    if (s.pid > 0) FB_TRY(kill_and_wait(s));
    if (s.pid <= 0) kill_half_made(s);
    else if (!s.own_pid_namespace) signal_all(s, SIGKILL);
    if (!s.systemd_unit.empty()) stop_systemd_unit(s);
    auto cg = remove_cgroups(s.cgroup_dirs_created);
    if (poststop_hooks) run_poststop_hooks_of(dir, s);
    FB_TRY(dir.remove());
    return cg;
}

// update with the systemd driver: the unit's properties first (so systemd does not put back
// the old limits the next time it applies them), then cgroupfs as with the cgroupfs driver.
// systemd applies a device policy by denying everything and allowing the list again: a
// running container is frozen meanwhile, as runc does, so it never sees EPERM from /dev/null.
Result<void> update_systemd_unit(const ContainerInfo& info, const CgroupLayout& layout, const oci::Resources& resources) {
    FB_ASSIGN(systemd::Manager manager, systemd::Manager::connect());
    bool unified = layout.mode == CgroupMode::V2;
    int version = systemd::needs_version(resources) ? manager.version() : -1;
    FB_ASSIGN(systemd::Properties props, systemd::resource_properties(resources, unified, version));
    if (props.empty()) return {};
    std::optional<Freezer> frozen;
    if (!resources.devices.empty() && !unified && info.status == Status::Running) {
        auto freezer = container_freezer(info.state.cgroup_dirs);
        if (freezer && freezer->kind != Freezer::Kind::None && freeze_cgroup(*freezer)) frozen = *freezer;
    }
    auto set = manager.set_unit_properties(info.state.systemd_unit, props);
    if (frozen)
        if (auto r = thaw_cgroup(*frozen); !r) log::warn("thaw after setting the unit's properties: " + r.error().what());
    return set;
}

}  // namespace

Result<ContainerInfo> container_info(const StateStore& store, const std::string& id) {
    FB_ASSIGN(ContainerDir dir, open_existing(store, id, StateStore::Lock::None));
    return load_info(dir, WithOwner::Yes);
}

Result<std::vector<ContainerInfo>> list_containers(const StateStore& store) {
    std::vector<ContainerInfo> out;
    FB_ASSIGN(auto ids, store.list());
    for (const auto& id : ids) {
        auto dir = store.open(id, StateStore::Lock::None);
        if (!dir) continue;  // deleted meanwhile
        auto info = load_info(*dir, WithOwner::Yes);
        if (info) out.push_back(std::move(*info));
    }
    return out;
}

Result<void> start_container(const StateStore& store, const std::string& id) {
    FB_ASSIGN(ContainerDir dir, open_existing(store, id));
    FB_ASSIGN(ContainerInfo info, load_info(dir));
    if (info.status == Status::Stopped) return fail(EINVAL, "cannot start a container that has stopped");
    if (info.status != Status::Created) return fail(EINVAL, "cannot start an already running container");

    FB_ASSIGN(unique_fd pidfd, open_pidfd(info.state.pid, info.state.pid_start_time));
    auto open_fifo = [&dir] { return unique_fd(::openat(dir.fd(), kExecFifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC)); };
    unique_fd fifo = open_fifo();
    if (!fifo) return sys_error("open exec fifo");
    // Wait for init's byte, or for init to die (then report it rather than hang). A hang-up
    // is read too: poll reads the pipe's contents before its writers without a lock, so a
    // stub that writes and execs at once can show a hang-up without the byte that is there.
    // Only the pidfd says init died: an end of file says a writer came and went without
    // writing (the fifo is 0622, as runc's), and a reader opened anew forgets it.
    for (;;) {
        struct pollfd fds[2] = {{fifo.get(), POLLIN, 0}, {pidfd.get(), POLLIN, 0}};
        int r = ::poll(fds, 2, -1);
        if (r < 0) {
            if (errno == EINTR) continue;
            return sys_error("poll exec fifo");
        }
        if (fds[0].revents & (POLLIN | POLLHUP)) {
            char c;
            ssize_t n = ::read(fifo.get(), &c, 1);
            if (n == 1) break;
            if (n < 0 && errno != EAGAIN && errno != EINTR) return sys_error("read exec fifo");
            if (n == 0 && !(fifo = open_fifo())) return sys_error("open exec fifo");
        }
        if (fds[1].revents) return fail(ESRCH, "container init exited before start");
    }
    trace::mark("start: released");
    ::unlinkat(dir.fd(), kExecFifo, 0);

    auto text = read_file_at(dir.fd(), kConfigFile);
    if (text && config_may_have_hooks(*text, "poststart")) {
        auto spec = oci::parse_config(*text);
        if (spec && spec->hooks && !spec->hooks->poststart.empty()) {
            // After the user's process is executed (runtime-spec "poststart"), not just
            // released: init holds the fifo's write end until its execve closes it.
            for (;;) {
                struct pollfd fds[2] = {{fifo.get(), POLLIN, 0}, {pidfd.get(), POLLIN, 0}};
                int r = ::poll(fds, 2, -1);
                if (r < 0 && errno == EINTR) continue;
                if (r < 0 || fds[1].revents || (fds[0].revents & (POLLHUP | POLLERR))) break;
                char c;
                if (::read(fifo.get(), &c, 1) == 0) break;
            }
            auto r = run_hooks(spec->hooks->poststart, hook_state_json(info.state, "running"), "poststart",
                               info.state.bundle);
            if (!r) {
                // Runtime-spec 1.3: a failed poststart hook is an error and stops the container.
                if (auto killed = kill_and_wait(info.state); !killed) log::warn(killed.error().what());
                return r;
            }
        }
    }
    return {};
}

Result<void> update_container(const StateStore& store, const std::string& id, const oci::Resources& resources) {
    FB_ASSIGN(ContainerDir dir, open_existing(store, id));
    FB_ASSIGN(ContainerInfo info, load_info(dir));
    if (info.status == Status::Stopped) return fail(EINVAL, "container not running");
    FB_ASSIGN(CgroupLayout layout, detect_cgroup_layout());
    FB_TRY(load_v2_controllers(layout));
    if (layout.hierarchies.size() != info.state.cgroup_dirs.size())
        return fail(EINVAL, "the host's cgroup layout changed since the container was created");
    // New device rules replace the old ones, on v1 by the minimal transition from what the
    // devices cgroup holds now (its processes keep using /dev/null meanwhile); without any,
    // the device rules stay as they are.
    std::optional<DeviceCgroup> devices_now;
    if (!resources.devices.empty()) {
        FB_ASSIGN(devices_now, read_device_cgroup(layout, info.state.cgroup_dirs));
    }
    FB_ASSIGN(auto writes, plan_cgroup_writes(resources, layout, devices_now));
    FB_ASSIGN(auto device_program, plan_device_program(resources, layout));
    // checkBeforeUpdate: v2's memory only (a v1 memory cgroup refuses such a limit itself).
    if (resources.memory && resources.memory->check_before_update.value_or(false) && resources.memory->limit)
        for (size_t i = 0; i < layout.hierarchies.size(); ++i)
            if (layout.hierarchies[i].unified) {
                auto current = read_file(info.state.cgroup_dirs[i] + "/memory.current");
                if (!current) continue;  // no memory controller in this v2 hierarchy
                FB_TRY(check_memory_limit_above_usage(*resources.memory->limit, std::strtoull(current->c_str(), nullptr, 10)));
            }
    if (!info.state.systemd_unit.empty()) FB_TRY(update_systemd_unit(info, layout, resources));
    FB_TRY(apply_cgroup_writes(writes, layout, info.state.cgroup_dirs));
    if (device_program) FB_TRY(apply_device_program(*device_program, layout, info.state.cgroup_dirs));
    return {};
}

Result<void> kill_container(const StateStore& store, const std::string& id, int sig, bool all) {
    FB_ASSIGN(ContainerDir dir, open_existing(store, id));
    FB_ASSIGN(ContainerInfo info, load_info(dir));
    if (info.status == Status::Stopped) {
        if (all) return {};  // nothing left to signal (runc accepts this too)
        return fail(ESRCH, "container not running");
    }
    // Other signals to a paused container stay pending until resume, as with runc.
    bool thaw = sig == SIGKILL && info.status == Status::Paused;
    if (all) {
        // Without a cgroup, the container's processes are known only through its pid
        // namespace; without that too, only init can be reached (runc warns the same).
        if (info.state.cgroup_dirs.empty() && !info.state.own_pid_namespace)
            log::warn("kill --all: the container has neither a cgroup nor a pid namespace of its own: "
                      "only its init is signalled (possibly due to lack of cgroup: a delegated cgroup helps)");
        signal_all(info.state, sig);
        if (!info.state.cgroup_dirs.empty()) {
            if (thaw) thaw_killed(info.state);
            return {};
        }
    }
    FB_ASSIGN(unique_fd pidfd, open_pidfd(info.state.pid, info.state.pid_start_time));
    if (sys::pidfd_send_signal(pidfd.get(), sig) < 0) return sys_error("kill container " + id);
    if (thaw) thaw_killed(info.state);
    return {};
}

Result<void> pause_container(const StateStore& store, const std::string& id) {
    FB_ASSIGN(ContainerDir dir, open_existing(store, id));
    FB_ASSIGN(ContainerInfo info, load_info(dir));
    if (info.status != Status::Running) return fail(EINVAL, "container not running");
    FB_ASSIGN(Freezer freezer, container_freezer(info.state.cgroup_dirs));
    if (freezer.kind == Freezer::Kind::None)
        return fail(ENOTSUP, "container " + id + " has no cgroup freezer");
    FB_TRY_CTX(freeze_cgroup(freezer), "pause " + id);
    return {};
}

Result<void> resume_container(const StateStore& store, const std::string& id) {
    FB_ASSIGN(ContainerDir dir, open_existing(store, id));
    FB_ASSIGN(ContainerInfo info, load_info(dir));
    if (info.status != Status::Paused) return fail(EINVAL, "container not paused");
    FB_ASSIGN(Freezer freezer, container_freezer(info.state.cgroup_dirs));
    FB_TRY_CTX(thaw_cgroup(freezer), "resume " + id);
    return {};
}

Result<std::vector<pid_t>> container_pids(const StateStore& store, const std::string& id) {
    FB_ASSIGN(ContainerDir dir, open_existing(store, id, StateStore::Lock::None));
    FB_ASSIGN(ContainerInfo info, load_info(dir));
    // runc lists none (ps then prints its header alone).
    if (info.status == Status::Stopped) return std::vector<pid_t>{};
    // One hierarchy lists every process; without a cgroup, init is all we know of.
    if (info.state.cgroup_dirs.empty()) return std::vector<pid_t>{info.state.pid};
    return cgroup_tree_pids(first_cgroup_dir(info.state.cgroup_dirs));
}

Result<void> delete_container(const StateStore& store, const std::string& id, bool force, const KnownToRun& known) {
    if (force && !known.staging_swept) store.remove_stale_staging();
    auto opened = open_existing(store, id, force ? StateStore::Lock::Force : StateStore::Lock::Exclusive);
    if (!opened) {
        if (force && opened.error().errnum() == ENOENT) return {};
        return std::unexpected(opened.error());
    }
    ContainerDir dir = std::move(*opened);
    auto info = load_info(dir);
    if (!info) {
        // Unreadable state (a crashed create): only --force may clean it up.
        if (!force) return std::unexpected(info.error());
        return dir.remove();
    }
    switch (info->status) {
    case Status::Stopped:
    case Status::Created:  // init waits on the fifo: runc deletes it, containerd relies on that
        break;
    default:
        if (!force)
            return fail(EINVAL, "cannot delete container " + id + " that is not stopped: " +
                                    status_name(info->status));
    }
    return destroy(dir, info->state, known.poststop_hooks);
}

}  // namespace forkbox
