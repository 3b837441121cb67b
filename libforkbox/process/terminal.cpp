#include "libforkbox/process/terminal.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "libforkbox/base/unix_socket.hpp"

namespace forkbox {

Result<void> check_console_options(bool terminal, bool detach, const std::string& console_socket) {
    if (detach && terminal && console_socket.empty())
        return fail(EINVAL, "cannot allocate tty if forkbox will detach without setting console socket");
    if ((!detach || !terminal) && !console_socket.empty())
        return fail(EINVAL, "cannot use console socket if forkbox will not detach or allocate tty");
    return {};
}

Result<unique_fd> connect_unix_socket(const std::string& path, const std::string& what) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof addr.sun_path)
        return fail(ENAMETOOLONG, what + " path " + path + " is empty or too long");
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    unique_fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return sys_error(what);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0)
        return sys_error("connect to " + what + " " + path);
    return fd;
}

Result<void> setup_console(int socket_fd, const std::optional<oci::ConsoleSize>& size, uid_t uid) {
    // The container's own devpts instance (/dev/ptmx -> pts/ptmx in its rootfs).
    unique_fd master(::open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!master) return sys_error("open /dev/ptmx");
    int unlock = 0;
    if (::ioctl(master.get(), TIOCSPTLCK, &unlock) < 0) return sys_error("unlock pty");
    unsigned index = 0;
    if (::ioctl(master.get(), TIOCGPTN, &index) < 0) return sys_error("pty number");
    // TIOCGPTPEER opens the slave from the master, not by a path the image controls.
    unique_fd slave(::ioctl(master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!slave) return sys_error("open pty slave");
    if (size && (size->width || size->height)) {
        winsize ws{};
        ws.ws_row = static_cast<unsigned short>(size->height);
        ws.ws_col = static_cast<unsigned short>(size->width);
        if (::ioctl(master.get(), TIOCSWINSZ, &ws) < 0) return sys_error("set console size");
    }
    // The process owns its terminal (it may not be root), as a login terminal: the group
    // and mode stay the devpts instance's (gid=5 tty, mode=0620 in runc's template).
    // EPERM in odd user namespaces is fine.
    if (::fchown(slave.get(), uid, static_cast<gid_t>(-1)) < 0 && errno != EPERM && errno != EINVAL)
        return sys_error("chown pty slave");

    char name[32];
    int name_len = std::snprintf(name, sizeof name, "/dev/pts/%u", index);
    int fds[] = {master.get()};
    FB_TRY(send_with_fds(socket_fd, std::string_view(name, static_cast<size_t>(name_len)), fds,
                         "send pty master to console socket"));
    master.reset();

    for (int target = 0; target <= 2; ++target)
        if (::dup3(slave.get(), target, 0) < 0) return sys_error("dup pty slave to stdio");
    if (::ioctl(0, TIOCSCTTY, 0) < 0) return sys_error("make the pty the controlling terminal");
    return {};
}

Result<unique_fd> receive_console_master(int socket_fd) {
    std::vector<unique_fd> fds;
    FB_TRY(receive_with_fds(socket_fd, fds, "receive pty master"));
    if (fds.size() != 1) return fail(EPROTO, "console: no pty master received");
    return std::move(fds[0]);
}

RawTerminal::RawTerminal(int fd) {
    if (!::isatty(fd) || ::tcgetattr(fd, &saved_) < 0) return;
    struct termios raw = saved_;
    ::cfmakeraw(&raw);
    if (::tcsetattr(fd, TCSANOW, &raw) == 0) {
        fd_ = fd;
        active_ = true;
    }
}

RawTerminal::~RawTerminal() {
    if (active_) ::tcsetattr(fd_, TCSANOW, &saved_);
}

void copy_window_size(int from, int to) {
    winsize ws{};
    if (::ioctl(from, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) ::ioctl(to, TIOCSWINSZ, &ws);
}

}  // namespace forkbox
