#include "libforkbox/zygote/zygote.hpp"

#include <linux/nsfs.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "libforkbox/base/hash.hpp"
#include "libforkbox/base/log.hpp"
#include "libforkbox/base/unix_socket.hpp"
#include "libforkbox/process/rootless.hpp"
#include "libforkbox/cgroup/bpf.hpp"
#include "oci/linux_names.hpp"

namespace forkbox::zygote {

namespace {

// A slow or wedged daemon must not cost a create more than this before the cold path.
constexpr int kReplyTimeoutMs = 200;

Result<unique_fd> connect_daemon(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof addr.sun_path) return fail(ENAMETOOLONG, "socket path " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    unique_fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!fd) return sys_error("socket");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0)
        return sys_error("connect to " + path);
    return fd;
}

// One message with up to max_fds fds attached, within the reply timeout.
Result<std::string> receive(int fd, std::vector<unique_fd>& fds, size_t max_fds) {
    pollfd p{fd, POLLIN, 0};
    int r;
    do r = ::poll(&p, 1, kReplyTimeoutMs);
    while (r < 0 && errno == EINTR);
    if (r == 0) return fail(ETIMEDOUT, "no reply from the zygote daemon");
    FB_ASSIGN(std::string reply, receive_with_fds(fd, fds, "receive from the zygote daemon"));
    if (fds.size() > max_fds) {
        fds.clear();
        return fail(EPROTO, "too many fds from the zygote daemon");
    }
    return reply;
}

Result<int> parse_int(std::string_view s) {
    int v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return fail(EPROTO, "bad number " + std::string(s));
    return v;
}

}  // namespace

std::string default_socket_path() {
    if (const char* s = std::getenv("FORKBOX_SOCKET"); s && *s) return s;
    // A user without $XDG_RUNTIME_DIR (a cron job, su): the directory a login gives them,
    // where the SDK looks too, not root's /run/forkbox.
    const char* xdg = std::getenv("XDG_RUNTIME_DIR");
    if (::geteuid() != 0 && !(xdg && *xdg)) return "/run/user/" + std::to_string(::geteuid()) + "/forkbox/forkbox.sock";
    // Beside the default state: a user's daemon serves that user, under $XDG_RUNTIME_DIR.
    return default_state_root() + "/forkbox.sock";
}

int template_key(const Plan& plan) {
    for (const auto& j : plan.joins)
        if (j.clone_flag == CLONE_NEWUSER) return 0;
    if (!(plan.new_namespaces & CLONE_NEWUSER)) return plan.new_namespaces & kTemplateNamespaces;
    // Without both maps the cold path's rules (and errors) apply.
    if (plan.uid_mappings.empty() || plan.gid_mappings.empty()) return 0;
    return CLONE_NEWUSER | (plan.new_namespaces & kTemplateNamespaces);
}

std::string encode_id_maps(const std::vector<oci::IdMapping>& uids, const std::vector<oci::IdMapping>& gids) {
    std::string out;
    auto add = [&](char kind, const oci::IdMapping& m) {
        if (!out.empty()) out += ',';
        out += kind + std::to_string(m.container_id) + ":" + std::to_string(m.host_id) + ":" + std::to_string(m.size);
    };
    for (const auto& m : uids) add('u', m);
    for (const auto& m : gids) add('g', m);
    return out;
}

Result<IdMaps> decode_id_maps(std::string_view text) {
    IdMaps maps;
    auto number = [](std::string_view s) -> Result<uint32_t> {
        uint32_t v = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return fail(EPROTO, "bad id map number");
        return v;
    };
    if (text.ends_with(',')) return fail(EPROTO, "bad id map entry");
    while (!text.empty()) {
        size_t comma = text.find(',');
        std::string_view entry = text.substr(0, comma);
        text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
        if (entry.size() < 6 || (entry[0] != 'u' && entry[0] != 'g')) return fail(EPROTO, "bad id map entry");
        size_t c1 = entry.find(':'), c2 = entry.find(':', c1 + 1);
        if (c1 == std::string_view::npos || c2 == std::string_view::npos) return fail(EPROTO, "bad id map entry");
        oci::IdMapping m;
        FB_ASSIGN(m.container_id, number(entry.substr(1, c1 - 1)));
        FB_ASSIGN(m.host_id, number(entry.substr(c1 + 1, c2 - c1 - 1)));
        FB_ASSIGN(m.size, number(entry.substr(c2 + 1)));
        if (m.size == 0) return fail(EPROTO, "empty id map range");
        auto& list = entry[0] == 'u' ? maps.uids : maps.gids;
        if (entry[0] == 'u' && !maps.gids.empty()) return fail(EPROTO, "uid maps come first");
        if (list.size() == 340) return fail(EPROTO, "too many id map entries");
        list.push_back(m);
    }
    if (maps.uids.empty() || maps.gids.empty()) return fail(EPROTO, "a uid and a gid map are needed");
    return maps;
}

int namespace_count(int key) {
    int n = 0;
    for (int flag : kTemplateOrder) n += (key & flag) ? 1 : 0;
    return n;
}

std::string cgroup_parent(const std::string& cgroups_path) {
    size_t slash = cgroups_path.find_last_of('/');
    if (slash == std::string::npos || slash == 0) return "/";
    return cgroups_path.substr(0, slash);
}

namespace {
constexpr std::string_view kSparePrefix = ".zygote-";

// What a request may name as a cgroup parent: absolute, no "." or ".." components, no
// spaces (the protocol's separator) or control characters.
bool valid_cgroup_parent(std::string_view p) {
    if (p.empty() || p[0] != '/' || p.size() > 1024) return false;
    for (char c : p)
        if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return false;
    size_t i = 0;
    while (i < p.size()) {
        size_t j = p.find('/', i + 1);
        if (j == std::string_view::npos) j = p.size();
        std::string_view part = p.substr(i + 1, j - i - 1);
        if (part == "." || part == ".." || (part.empty() && p.size() > 1)) return false;
        i = j;
    }
    return true;
}
}  // namespace

bool valid_spare_name(std::string_view name) {
    if (!name.starts_with(kSparePrefix) || name.size() == kSparePrefix.size() || name.size() > 64) return false;
    for (char c : name.substr(kSparePrefix.size()))
        if (!(c >= '0' && c <= '9') && c != '-') return false;
    return true;
}

std::string spare_name(pid_t daemon_pid, long sequence) {
    return std::string(kSparePrefix) + std::to_string(daemon_pid) + "-" + std::to_string(sequence);
}

pid_t spare_owner(std::string_view name) {
    if (!valid_spare_name(name)) return 0;
    std::string_view rest = name.substr(kSparePrefix.size());
    auto pid = parse_int(rest.substr(0, rest.find('-')));
    return pid && *pid > 0 ? *pid : 0;
}

bool rootfs_template_fits(const Plan& plan) {
    if (template_key(plan) == 0 || !plan.joins.empty() || !plan.has_mount_namespace) return false;
    int needed = CLONE_NEWNS | CLONE_NEWPID;
    if ((plan.new_namespaces & needed) != needed) return false;
    if (plan.new_namespaces & (CLONE_NEWUSER | CLONE_NEWTIME)) return false;
    if (!plan.hooks.prestart.empty() || !plan.hooks.create_runtime.empty() || !plan.hooks.create_container.empty())
        return false;
    int cgroup_mounts = 0;
    for (const auto& m : plan.mounts) {
        cgroup_mounts += m.kind == MountKind::Cgroup;
        if (m.idmap) return false;  // its source is idmapped by `create`, not by a daemon ahead
    }
    return cgroup_mounts <= 1;
}

std::string config_fingerprint(std::string_view config_text) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(content_hash(config_text)));
    return buf;
}

std::string encode_request(const Request& r) {
    if (r.op == Request::Op::Stats) return "stats";
    std::string out = "take " + std::to_string(r.key);
    // "-": no spares (the systemd driver's requests), when a user namespace or a rootfs follows.
    if (!r.cgroup_parent.empty() || !r.id_maps.empty() || !r.rootfs_fingerprint.empty())
        out += " " + (r.cgroup_parent.empty() ? "-" : r.cgroup_parent);
    if (!r.id_maps.empty()) out += " userns " + r.id_maps;
    if (!r.rootfs_fingerprint.empty()) out += " rootfs " + r.rootfs_fingerprint + " " + r.rootfs_bundle;
    return out;
}

Result<Request> decode_request(std::string_view text) {
    Request r;
    if (text == "stats") {
        r.op = Request::Op::Stats;
        return r;
    }
    if (!text.starts_with("take ")) return fail(EPROTO, "unknown request");
    std::string_view rest = text.substr(5);
    size_t space = rest.find(' ');
    FB_ASSIGN(r.key, parse_int(rest.substr(0, space)));
    if (r.key == 0 || (r.key & ~kTemplateKeyFlags)) return fail(EPROTO, "bad template key");
    if (space != std::string_view::npos) {
        std::string_view parent = rest.substr(space + 1);
        size_t end = parent.find(' ');
        std::string_view tail = end == std::string_view::npos ? std::string_view{} : parent.substr(end + 1);
        parent = parent.substr(0, end);
        if (parent != "-" && !valid_cgroup_parent(parent)) return fail(EPROTO, "bad cgroup parent");
        r.cgroup_parent = parent == "-" ? std::string() : std::string(parent);
        if (tail.starts_with("userns ")) {
            std::string_view maps = tail.substr(7);
            size_t maps_end = maps.find(' ');
            tail = maps_end == std::string_view::npos ? std::string_view{} : maps.substr(maps_end + 1);
            maps = maps.substr(0, maps_end);
            FB_TRY(decode_id_maps(maps));
            r.id_maps = std::string(maps);
            end = maps_end;  // npos: nothing after the maps
        }
        if (end != std::string_view::npos) {
            // "rootfs <16 hex digits> <absolute bundle path, to the end>"
            if (!tail.starts_with("rootfs ") || tail.size() < 7 + 16 + 2 || tail[7 + 16] != ' ')
                return fail(EPROTO, "bad rootfs request");
            std::string_view fp = tail.substr(7, 16), bundle = tail.substr(7 + 17);
            for (char c : fp)
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return fail(EPROTO, "bad config fingerprint");
            if (bundle.empty() || bundle[0] != '/' || bundle.find_first_of(std::string_view("\0\n", 2)) != std::string_view::npos)
                return fail(EPROTO, "bad bundle path");
            r.rootfs_fingerprint = std::string(fp);
            r.rootfs_bundle = std::string(bundle);
        }
    }
    if (((r.key & CLONE_NEWUSER) != 0) != !r.id_maps.empty()) return fail(EPROTO, "a user namespace key needs id maps");
    return r;
}

std::string encode_reply(const Reply& r) {
    std::string out = "ok " + std::to_string(r.key);
    if (!r.spare.empty()) out += " " + r.spare;
    if (r.rootfs) out += " rootfs";
    if (r.rootfs && r.v1_cgroups_bound) out += " cgroups";
    if (r.rootfs && r.device_program) out += " devices";
    return out;
}

Result<Reply> decode_reply(std::string_view text) {
    if (!text.starts_with("ok ")) return fail(EPROTO, "unexpected reply from the zygote daemon: " + std::string(text));
    std::string_view rest = text.substr(3);
    size_t space = rest.find(' ');
    Reply r;
    FB_ASSIGN(r.key, parse_int(rest.substr(0, space)));
    while (space != std::string_view::npos) {
        rest = rest.substr(space + 1);
        space = rest.find(' ');
        std::string_view word = rest.substr(0, space);
        if (word == "rootfs" && !r.rootfs) {
            r.rootfs = true;
        } else if (word == "cgroups" && r.rootfs && !r.v1_cgroups_bound && !r.device_program && !r.spare.empty()) {
            r.v1_cgroups_bound = true;
        } else if (word == "devices" && r.rootfs && !r.device_program) {
            r.device_program = true;
        } else if (valid_spare_name(word) && r.spare.empty() && !r.rootfs) {
            r.spare = std::string(word);
        } else {
            return fail(EPROTO, "bad reply from the zygote daemon: " + std::string(text));
        }
    }
    return r;
}

std::optional<PendingTemplate> PendingTemplate::ask(const std::string& socket_path, const Request& request) {
    auto sent = [&]() -> Result<unique_fd> {
        FB_ASSIGN(unique_fd sock, connect_daemon(socket_path));
        std::string req = encode_request(request);
        if (::send(sock.get(), req.data(), req.size(), MSG_NOSIGNAL) < 0) return sys_error("send to the zygote daemon");
        return sock;
    }();
    if (!sent) {
        log::debug("zygote: cold path: " + std::string(sent.error().what()));
        return std::nullopt;
    }
    return PendingTemplate(std::move(*sent), request);
}

std::optional<Template> PendingTemplate::take() {
    if (!sock_) return std::nullopt;
    unique_fd sock = std::move(sock_);
    int key = key_;
    auto attempt = [&]() -> Result<Template> {
        std::vector<unique_fd> fds;
        FB_ASSIGN(std::string reply, receive(sock.get(), fds, static_cast<size_t>(namespace_count(key)) + 3));
        if (reply == "none") return fail(ENOENT, "no warm template for this container");
        FB_ASSIGN(Reply decoded, decode_reply(reply));
        size_t want = static_cast<size_t>(namespace_count(key)) + (decoded.rootfs ? 2 : 0) + decoded.device_program;
        if (decoded.key != key || fds.size() != want || (decoded.rootfs && !rootfs_asked_))
            return fail(EPROTO, "unexpected reply from the zygote daemon: " + reply);
        Template out;
        out.spare_cgroup = decoded.spare;
        out.v1_cgroups_bound = decoded.v1_cgroups_bound;
        size_t next = 0;
        for (int flag : kTemplateOrder) {
            if (!(key & flag)) continue;
            // Trust, but check: each fd must be a namespace of the type it stands for.
            if (::ioctl(fds[next].get(), NS_GET_NSTYPE) != flag)
                return fail(EPROTO, "the zygote daemon sent a wrong namespace fd");
            OpenNamespace ns;
            ns.clone_flag = flag;
            ns.path = "zygote template";
            ns.fd = std::move(fds[next++]);
            out.namespaces.push_back(std::move(ns));
        }
        if (decoded.rootfs) {
            if (::ioctl(fds[next].get(), NS_GET_NSTYPE) != CLONE_NEWNS ||
                ::ioctl(fds[next + 1].get(), NS_GET_NSTYPE) != CLONE_NEWPID)
                return fail(EPROTO, "the zygote daemon sent a wrong namespace fd");
            out.mount_namespace = std::move(fds[next]);
            out.pid_namespace = std::move(fds[next + 1]);
            next += 2;
        }
        if (decoded.device_program) {
            auto type = bpf_prog_type_of(fds[next].get());
            if (!type || *type != BPF_PROG_TYPE_CGROUP_DEVICE)
                return fail(EPROTO, "the zygote daemon sent a wrong device program fd");
            out.device_program = std::move(fds[next]);
        }
        return out;
    };
    auto r = attempt();
    if (!r) {
        log::debug("zygote: cold path: " + std::string(r.error().what()));
        return std::nullopt;
    }
    return std::move(*r);
}

Result<std::string> daemon_stats(const std::string& socket_path) {
    FB_ASSIGN(unique_fd sock, connect_daemon(socket_path));
    std::string req = encode_request(Request{Request::Op::Stats, 0, {}, {}, {}, {}});
    if (::send(sock.get(), req.data(), req.size(), MSG_NOSIGNAL) < 0) return sys_error("send to the zygote daemon");
    std::vector<unique_fd> fds;
    return receive(sock.get(), fds, 0);
}

}  // namespace forkbox::zygote
