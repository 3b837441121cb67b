// `run`: create + start + wait, forwarding signals to init (and driving its terminal when
// process.terminal asks for one), then delete unless --keep.
#include "libforkbox/base/log.hpp"
#include "libforkbox/base/trace.hpp"
#include "libforkbox/container/container.hpp"
#include "libforkbox/process/foreground.hpp"
#include "libforkbox/process/terminal.hpp"

namespace forkbox {

Result<int> run_container(const StateStore& store, const RunOptions& opt) {
    const std::string& id = opt.create.id;
    if (opt.detach) {
        FB_TRY(create_container(store, opt.create));
        auto r = start_container(store, id);
        if (!r) {
            (void)delete_container(store, id, true);
            return std::unexpected(r.error());
        }
        return 0;
    }
    if (!opt.create.console_socket.empty())
        return fail(EINVAL, "cannot use console socket if forkbox will not detach or allocate tty");
    FB_ASSIGN(ForwardedSignals signals, ForwardedSignals::block());
    unique_fd pty_master;
    FB_ASSIGN(pid_t init, create_container(store, opt.create, &pty_master));
    auto started = start_container(store, id);
    if (!started) {
        (void)delete_container(store, id, true);
        return std::unexpected(started.error());
    }
    trace::mark("run: started");
    auto code = supervise_foreground(init, signals, pty_master.get());
    trace::mark("run: exited");
    if (!opt.keep) {
        if (auto r = delete_container(store, id, true); !r) log::warn("delete " + id + ": " + r.error().what());
    }
    trace::mark("run: deleted");
    return code;
}

}  // namespace forkbox
