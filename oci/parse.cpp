#include "oci/parse.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "libforkbox/base/files.hpp"
#include "oci/parse_internal.hpp"

namespace forkbox::oci {

namespace detail {

std::unexpected<Error> missing(const Value& obj, std::string_view key) {
    return fail(EINVAL, json::child_path(obj.path(), key) + ": required field is missing");
}

Result<std::string> to_string(const Value& v) { return v.as_string(); }

Result<bool> to_bool(const Value& v) { return v.as_bool(); }

Result<std::vector<std::string>> to_strings(const Value& v) {
    if (!v.is_array()) return v.type_error("array of strings");
    std::vector<std::string> out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        FB_ASSIGN(std::string s, v.at(i).as_string());
        out.push_back(std::move(s));
    }
    return out;
}

Result<std::map<std::string, std::string>> to_string_map(const Value& v) {
    if (!v.is_object()) return v.type_error("object of strings");
    std::map<std::string, std::string> out;
    FB_TRY(v.for_each_member([&](std::string_view k, const Value& m) -> Result<void> {
        std::string s;
        if (!m.is_null()) {  // Go stores "" for a null map value
            FB_ASSIGN(s, m.as_string());
        }
        out[std::string(k)] = std::move(s);
        return {};
    }));
    return out;
}

Result<void> opt_string(const Value& obj, std::string_view key, std::string& out) {
    auto v = obj.get(key);
    if (!v) return {};
    FB_ASSIGN(out, v->as_string());
    return {};
}

Result<void> req_string(const Value& obj, std::string_view key, std::string& out) {
    auto v = obj.get(key);
    if (!v) return missing(obj, key);
    FB_ASSIGN(out, v->as_string());
    return {};
}

Result<void> opt_bool(const Value& obj, std::string_view key, bool& out) {
    auto v = obj.get(key);
    if (!v) return {};
    FB_ASSIGN(out, v->as_bool());
    return {};
}

Result<void> opt_bool(const Value& obj, std::string_view key, std::optional<bool>& out) {
    auto v = obj.get(key);
    if (!v) return {};
    FB_ASSIGN(out, v->as_bool());
    return {};
}

Result<void> opt_strings(const Value& obj, std::string_view key, std::vector<std::string>& out) {
    auto v = obj.get(key);
    if (!v) return {};
    FB_ASSIGN(out, to_strings(*v));
    return {};
}

Result<void> opt_string_map(const Value& obj, std::string_view key,
                            std::map<std::string, std::string>& out) {
    auto v = obj.get(key);
    if (!v) return {};
    FB_ASSIGN(out, to_string_map(*v));
    return {};
}

Result<IdMapping> parse_id_mapping(const Value& v) {
    FB_TRY(v.expect_object());
    IdMapping m;
    FB_TRY(req_integer(v, "containerID", m.container_id));
    FB_TRY(req_integer(v, "hostID", m.host_id));
    FB_TRY(req_integer(v, "size", m.size));
    return m;
}

}  // namespace detail

namespace {

using namespace detail;

Result<Root> parse_root(const Value& v) {
    FB_TRY(v.expect_object());
    Root r;
    FB_TRY(req_string(v, "path", r.path));
    FB_TRY(opt_bool(v, "readonly", r.readonly));
    return r;
}

Result<Mount> parse_mount(const Value& v) {
    FB_TRY(v.expect_object());
    Mount m;
    FB_TRY(req_string(v, "destination", m.destination));
    FB_TRY(opt_string(v, "type", m.type));
    FB_TRY(opt_string(v, "source", m.source));
    FB_TRY(opt_strings(v, "options", m.options));
    FB_TRY(opt_array(v, "uidMappings", m.uid_mappings, parse_id_mapping));
    FB_TRY(opt_array(v, "gidMappings", m.gid_mappings, parse_id_mapping));
    return m;
}

Result<User> parse_user(const Value& v) {
    FB_TRY(v.expect_object());
    User u;
    // uid and gid are REQUIRED in config.md for POSIX, but neither the JSON schema nor runc
    // demand them: absent means 0.
    FB_TRY(opt_integer(v, "uid", u.uid));
    FB_TRY(opt_integer(v, "gid", u.gid));
    FB_TRY(opt_integer(v, "umask", u.umask));
    if (auto g = v.get("additionalGids")) {
        FB_TRY(g->expect_array());
        for (size_t i = 0; i < g->size(); ++i) {
            FB_ASSIGN(uint32_t gid, to_integer<uint32_t>(g->at(i)));
            u.additional_gids.push_back(gid);
        }
    }
    FB_TRY(opt_string(v, "username", u.username));
    return u;
}

Result<ConsoleSize> parse_console_size(const Value& v) {
    FB_TRY(v.expect_object());
    ConsoleSize c;
    FB_TRY(req_integer(v, "height", c.height));
    FB_TRY(req_integer(v, "width", c.width));
    return c;
}

Result<Capabilities> parse_capabilities(const Value& v) {
    FB_TRY(v.expect_object());
    Capabilities c;
    FB_TRY(opt_strings(v, "bounding", c.bounding));
    FB_TRY(opt_strings(v, "effective", c.effective));
    FB_TRY(opt_strings(v, "inheritable", c.inheritable));
    FB_TRY(opt_strings(v, "permitted", c.permitted));
    FB_TRY(opt_strings(v, "ambient", c.ambient));
    return c;
}

Result<Rlimit> parse_rlimit(const Value& v) {
    FB_TRY(v.expect_object());
    Rlimit r;
    FB_TRY(req_string(v, "type", r.type));
    FB_TRY(req_integer(v, "hard", r.hard));
    FB_TRY(req_integer(v, "soft", r.soft));
    return r;
}

Result<Scheduler> parse_scheduler(const Value& v) {
    FB_TRY(v.expect_object());
    Scheduler s;
    FB_TRY(req_string(v, "policy", s.policy));
    FB_TRY(opt_integer(v, "nice", s.nice));
    FB_TRY(opt_integer(v, "priority", s.priority));
    FB_TRY(opt_strings(v, "flags", s.flags));
    FB_TRY(opt_integer(v, "runtime", s.runtime));
    FB_TRY(opt_integer(v, "deadline", s.deadline));
    FB_TRY(opt_integer(v, "period", s.period));
    return s;
}

Result<IoPriority> parse_io_priority(const Value& v) {
    FB_TRY(v.expect_object());
    IoPriority p;
    FB_TRY(req_string(v, "class", p.klass));
    FB_TRY(opt_integer(v, "priority", p.priority));
    return p;
}

Result<ExecCPUAffinity> parse_exec_cpu_affinity(const Value& v) {
    FB_TRY(v.expect_object());
    ExecCPUAffinity a;
    FB_TRY(opt_string(v, "initial", a.initial));
    FB_TRY(opt_string(v, "final", a.final));
    return a;
}

Result<Hook> parse_hook(const Value& v) {
    FB_TRY(v.expect_object());
    Hook h;
    FB_TRY(req_string(v, "path", h.path));
    FB_TRY(opt_strings(v, "args", h.args));
    FB_TRY(opt_strings(v, "env", h.env));
    FB_TRY(opt_integer(v, "timeout", h.timeout));
    return h;
}

Result<Hooks> parse_hooks(const Value& v) {
    FB_TRY(v.expect_object());
    Hooks h;
    FB_TRY(opt_array(v, "prestart", h.prestart, parse_hook));
    FB_TRY(opt_array(v, "createRuntime", h.create_runtime, parse_hook));
    FB_TRY(opt_array(v, "createContainer", h.create_container, parse_hook));
    FB_TRY(opt_array(v, "startContainer", h.start_container, parse_hook));
    FB_TRY(opt_array(v, "poststart", h.poststart, parse_hook));
    FB_TRY(opt_array(v, "poststop", h.poststop, parse_hook));
    return h;
}

// ociVersion must be SemVer with major 1: "1.0.2-dev", "1.3.0". A later major may change
// meanings this parser does not know, so it is refused rather than half-understood.
Result<void> check_oci_version(const Value& root, std::string& out) {
    auto v = root.get("ociVersion");
    if (!v) return missing(root, "ociVersion");
    FB_ASSIGN(out, v->as_string());
    if (!out.starts_with("1.") || out.size() < 3 || out[2] < '0' || out[2] > '9')
        return v->error("unsupported version \"" + out +
                        "\": forkbox supports runtime-spec 1.x (up to " + kSpecVersion + ")");
    return {};
}

}  // namespace

Result<Process> parse_process(const json::Value& v) {
    FB_TRY(v.expect_object());
    Process p;
    FB_TRY(opt_bool(v, "terminal", p.terminal));
    FB_TRY(opt_object(v, "consoleSize", p.console_size, parse_console_size));
    if (auto u = v.get("user")) {
        FB_ASSIGN(p.user, parse_user(*u));
    }
    // args may be absent here: runc only demands them when the container is created
    // (validate.cpp), and a Windows config uses commandLine instead.
    FB_TRY(opt_strings(v, "args", p.args));
    FB_TRY(opt_string(v, "commandLine", p.command_line));
    FB_TRY(opt_strings(v, "env", p.env));
    FB_TRY(req_string(v, "cwd", p.cwd));
    FB_TRY(opt_object(v, "capabilities", p.capabilities, parse_capabilities));
    FB_TRY(opt_array(v, "rlimits", p.rlimits, parse_rlimit));
    FB_TRY(opt_bool(v, "noNewPrivileges", p.no_new_privileges));
    FB_TRY(opt_string(v, "apparmorProfile", p.apparmor_profile));
    FB_TRY(opt_integer(v, "oomScoreAdj", p.oom_score_adj));
    FB_TRY(opt_object(v, "scheduler", p.scheduler, parse_scheduler));
    FB_TRY(opt_string(v, "selinuxLabel", p.selinux_label));
    FB_TRY(opt_object(v, "ioPriority", p.io_priority, parse_io_priority));
    FB_TRY(opt_object(v, "execCPUAffinity", p.exec_cpu_affinity, parse_exec_cpu_affinity));
    return p;
}

Result<Process> parse_process_json(std::string_view json_text) {
    FB_ASSIGN(json::Document doc, json::Document::parse(json_text));
    return parse_process(doc.root());
}

Result<Resources> parse_resources_json(std::string_view json_text) {
    FB_ASSIGN(json::Document doc, json::Document::parse(json_text));
    return detail::parse_resources(doc.root());
}

Result<Spec> parse_config(std::string_view json_text) {
    FB_ASSIGN(json::Document doc, json::Document::parse(json_text));
    const Value root = doc.root();
    FB_TRY(root.expect_object());
    Spec s;
    FB_TRY(check_oci_version(root, s.oci_version));
    FB_TRY(opt_object(root, "root", s.root, parse_root));
    FB_TRY(opt_array(root, "mounts", s.mounts, parse_mount));
    FB_TRY(opt_object(root, "process", s.process, parse_process));
    FB_TRY(opt_string(root, "hostname", s.hostname));
    FB_TRY(opt_string(root, "domainname", s.domainname));
    FB_TRY(opt_object(root, "hooks", s.hooks, parse_hooks));
    FB_TRY(opt_string_map(root, "annotations", s.annotations));
    FB_TRY(opt_object(root, "linux", s.linux, parse_linux));
    return s;
}

Result<Spec> load_config(const std::string& path) {
    FB_ASSIGN(std::string text, read_file(path));  // EISDIR for a directory
    auto spec = parse_config(text);
    if (!spec) return std::unexpected(std::move(spec.error()).wrap(path));
    return spec;
}

}  // namespace forkbox::oci
