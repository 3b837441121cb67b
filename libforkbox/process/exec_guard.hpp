// CVE-2019-5736 defence: a container process never execs its program straight from the
// forkbox binary.
//
// forkbox does not re-exec itself, so until the last execve a container process is a fork
// of the host's forkbox binary, and /proc/self/exe names that file. A container program
// starting "#!/proc/self/exe" would make the kernel load the host binary as its
// interpreter, inside the container; the container could then reopen it for writing and
// replace it. So the process first execs a tiny freestanding stub (libforkbox/exec_stub.c,
// a few KB, embedded in forkbox) from a sealed memfd, and the stub execs the program: when
// the kernel resolves the program's interpreter, /proc/self/exe is that anonymous, sealed,
// per-container copy. Copying the 30 MB forkbox binary instead would cost milliseconds.
//
// The stub's exec costs ~0.5 ms on PVM guests (a whole address space more). Container init
// execs it before `start` and lets it wait for `start` (start_fifo_fd below), so that the
// cost is paid while create exits and the caller gets to `start`. It is left out
// when nothing can write the binary through /proc/self/exe anyway: forkbox was exec'd from
// a read-only mount or filesystem (exe_write_protected), where every open for writing
// fails with EROFS whoever asks, the container's root included (it cannot remount a mount
// of the host's namespace). Then "#!/proc/self/exe" runs the host binary inside the
// container, which can read it but never change it.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "libforkbox/base/error.hpp"
#include "libforkbox/base/fd.hpp"
#include "libforkbox/seccomp/seccomp.hpp"

namespace forkbox {

// The stub's ELF image, as embedded (exec_stub_blob.S).
std::span<const unsigned char> exec_stub_image();

// Parent side, before clone: a memfd holding the stub, sealed against any change
// (F_SEAL_SEAL|SHRINK|GROW|WRITE), close-on-exec (hooks the parent runs do not get it, and
// the child's exec of it does not pass it on). About 8 us: memfd_create, one write, fcntl.
// None (an empty fd) when exe_write_protected(): the child execs its program directly.
Result<unique_fd> make_exec_stub();

// Whether this binary was exec'd from a read-only mount or filesystem (statvfs of
// /proc/self/exe: ST_RDONLY), as on systems with an immutable /usr, NixOS's store, or after
// `mount --bind -o ro` of the binary. Asked once, by make_exec_stub in the parent before
// any clone: a child's /proc may be the container's, so the child only reads the answer.
bool exe_write_protected();

// Child side, the very last step: execs `exe` with argv/envp through the stub in stub_fd.
// Returns only when the stub itself could not be exec'd (or, on the direct path, the
// program), with that errno; a failed exec of the program happens in the stub (see error_fd).
// stub_fd < 0: the program directly, only when the parent's make_exec_stub found the binary
// write-protected (else EBADF); a failure then behaves as the stub's would.
//
//  * filter: the seccomp program this process runs under (null: none of ours). Were its
//    answer for execveat anything but ALLOW or LOG, the stub is exec'd through
//    /proc/self/fd/N with plain execve instead, which the program's own exec needs anyway;
//    and when the container has no procfs at /proc (ENOENT), the program is exec'd
//    directly: then "#!/proc/self/exe" cannot resolve either, and /proc/PID/exe is out of
//    reach, so the attack this guards against needs what the container lacks.
//  * error_fd >= 0: the stub writes the errno of a failed exec of the program into it
//    (one native int) and exits 127; the fd is close-on-exec for the program, so the
//    reader sees EOF when the exec succeeded. error_fd < 0: the stub prints
//    `forkbox: exec: "ARGV0": TEXT` (Go's errno text, init's wording) to fd 2, exits 127.
//  * start_fifo_fd >= 0 (container init, before `start`): an O_PATH fd of the exec fifo,
//    not close-on-exec. The stub waits for `start` on it (reopened through /proc/self/fd)
//    before it execs the program, so that its own exec is done before `start` comes. Only
//    the stub may do that wait: without one (stub_fd < 0), or when it cannot be exec'd, this
//    returns the error and execs nothing.
Result<void> exec_through_stub(int stub_fd, const std::string& exe, char* const argv[],
                               char* const envp[], const SeccompProgram* filter = nullptr,
                               int error_fd = -1, int start_fifo_fd = -1);

}  // namespace forkbox
