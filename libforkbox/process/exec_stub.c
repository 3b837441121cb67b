/* exec-stub: the program a container process makes its final execve from.
 *
 * forkbox never re-execs itself: a container process is a fork of the forkbox binary. Were
 * it to execve the container's program directly, a program starting "#!/proc/self/exe"
 * would make the kernel run the host's forkbox binary inside the container, and the
 * container could then reopen that file for writing and replace the host binary
 * (CVE-2019-5736). So the fork execs this stub from a sealed memfd first
 * (libforkbox/exec_guard.cpp), and the stub execs the container's program: while the
 * kernel resolves the program's interpreter, /proc/self/exe is this anonymous, sealed
 * copy of a few KB, never a host file.
 *
 * argv: [0] any name  [1] error fd: decimal, or "-" for none  [2] path to exec
 *       [3...] the program's argv (argv[3] is its argv[0])
 * The environment is passed through unchanged.
 * argv[0] "forkbox-start:N": container init's stub, exec'd before `start`. N is an O_PATH fd
 * of the container's exec fifo; the stub opens it for writing through /proc/self/fd/N (which
 * blocks until `start` opens it for reading), writes the byte `start` waits for, closes N and
 * execs the program: the fifo's write end is close-on-exec, so `start` sees its EOF once the
 * program runs. Until then it exits with 128+N on the signals of waiting_init_signals.h. A
 * failure there prints "forkbox: exec fifo: TEXT" to fd 2 and exits 1.
 * On failure: with an error fd, the errno goes there as one native int (the fd is marked
 * close-on-exec first, so a successful exec closes it: EOF means success); without one,
 * "forkbox: exec: \"ARGV0\": TEXT" goes to fd 2 in Go's wording, as init says it. Exit 127.
 * Called any other way (e.g. as the interpreter of a "#!/proc/self/exe" script): exit 127.
 *
 * Freestanding: no libc, raw syscalls, _start in asm for x86_64 and aarch64. Built with
 * -nostdlib -static by the Makefile and embedded into forkbox (exec_stub_blob.S).
 */
#include <asm/signal.h>
#include <asm/unistd.h>
#include <linux/errno.h>
#include <linux/fcntl.h>
#include <linux/prctl.h>

#include "waiting_init_signals.h"

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "exec-stub: only x86_64 and aarch64 are supported"
#endif

typedef unsigned long size_t;

static long sys4(long nr, long a, long b, long c, long d)
{
	long ret;
#if defined(__x86_64__)
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
#else
	register long x8 __asm__("x8") = nr;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	__asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
	ret = x0;
#endif
	return ret;
}

static long sys3(long nr, long a, long b, long c)
{
	return sys4(nr, a, b, c, 0);
}

static size_t length(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

static void put(const char *s)
{
	size_t n = length(s);
	while (n > 0) {
		long w = sys3(__NR_write, 2, (long)s, (long)n);
		if (w == -EINTR)
			continue;
		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

/* Go's text for the errnos execve gives (its syscall.Errno strings). */
static const char *errno_text(int err)
{
	switch (err) {
	case EPERM: return "operation not permitted";
	case ENOENT: return "no such file or directory";
	case EIO: return "input/output error";
	case E2BIG: return "argument list too long";
	case ENOEXEC: return "exec format error";
	case ENOMEM: return "cannot allocate memory";
	case EACCES: return "permission denied";
	case EFAULT: return "bad address";
	case ENOTDIR: return "not a directory";
	case EISDIR: return "is a directory";
	case EINVAL: return "invalid argument";
	case ENFILE: return "too many open files in system";
	case EMFILE: return "too many open files";
	case ETXTBSY: return "text file busy";
	case ENAMETOOLONG: return "file name too long";
	case ELOOP: return "too many levels of symbolic links";
	case ELIBBAD: return "accessing a corrupted shared library";
	default: return 0;
	}
}

static void put_errno(int err)
{
	const char *text = errno_text(err);
	if (text) {
		put(text);
		return;
	}
	char buf[24], *p = buf + sizeof buf;
	*--p = 0;
	unsigned v = (unsigned)err;
	do
		*--p = (char)('0' + v % 10);
	while (v /= 10);
	put("errno ");
	put(p);
}

/* "-" is -1; a decimal fd number is itself; anything else is -2 (not called by forkbox). */
static int parse_fd(const char *s)
{
	if (s[0] == '-' && s[1] == 0)
		return -1;
	int v = 0;
	if (!*s)
		return -2;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > 100000000)
			return -2;
		v = v * 10 + (*s - '0');
	}
	return v;
}

__attribute__((noreturn)) static void leave(int code)
{
	for (;;)
		sys3(__NR_exit_group, code, 0, 0);
}

/* The N of "forkbox-start:N", else -1. */
static int start_fifo_fd(const char *name)
{
	static const char prefix[] = "forkbox-start:";
	for (size_t i = 0; i + 1 < sizeof prefix; i++)
		if (name[i] != prefix[i])
			return -1;
	int fd = parse_fd(name + sizeof prefix - 1);
	return fd >= 0 ? fd : -1;
}

__attribute__((noreturn)) static void fifo_failed(long rc)
{
	put("forkbox: exec fifo: ");
	put_errno((int)-rc);
	put("\n");
	leave(1);
}

/* The kernel's struct sigaction (x86_64 and aarch64 share its layout). */
struct kernel_sigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	unsigned long mask;
};

#define KERNEL_SA_RESTORER 0x04000000UL

/* rt_sigreturn, which x86_64 wants named for every handler (asm below). Never reached: the
 * handler exits. */
void stub_signal_return(void);

static void ended_by_signal(int sig)
{
	leave(128 + sig);
}

/* Init blocked these across its execve of us: caught now, and unblocked, so one sent
 * before ends us here (waiting_init_signals.h says why). */
static void exit_on_termination_signals(void)
{
	struct kernel_sigaction act = {ended_by_signal, KERNEL_SA_RESTORER, stub_signal_return, ~0UL};
	for (int sig = 1; sig <= FORKBOX_LAST_WAITING_INIT_SIGNAL; sig++)
		if (forkbox_signal_ends_waiting_init(sig))
			sys4(__NR_rt_sigaction, sig, (long)&act, 0, sizeof act.mask);
	unsigned long none = 0;
	sys4(__NR_rt_sigprocmask, SIG_SETMASK, (long)&none, 0, sizeof none);
}

/* Opens the exec fifo (O_PATH fd `fd`) for writing, which waits for `start`, and writes
 * its byte. The write end stays open, close-on-exec, until the program's execve. */
static void wait_for_start(int fd)
{
	char path[32] = "/proc/self/fd/";
	char digits[12], *p = digits + sizeof digits;
	*--p = 0;
	unsigned v = (unsigned)fd;
	do
		*--p = (char)('0' + v % 10);
	while (v /= 10);
	size_t at = length(path);
	while (*p)
		path[at++] = *p++;
	path[at] = 0;
	long w;
	do
		w = sys3(__NR_openat, AT_FDCWD, (long)path, O_WRONLY | O_CLOEXEC);
	while (w == -EINTR);
	if (w < 0)
		fifo_failed(w);
	long n;
	do
		n = sys3(__NR_write, w, (long)"0", 1);
	while (n == -EINTR);
	if (n != 1)
		fifo_failed(n < 0 ? n : -EIO);
	sys3(__NR_close, fd, 0, 0);
}

__attribute__((noreturn, used)) void stub_main(long *sp)
{
	int argc = (int)sp[0];
	char **argv = (char **)(sp + 1);
	char **envp = argv + argc + 1;
	int err_fd = argc >= 4 ? parse_fd(argv[1]) : -2;
	if (err_fd == -2) {
		put("forkbox-exec: not to be run directly\n");
		leave(127);
	}
	int fifo_fd = start_fifo_fd(argv[0]);
	if (fifo_fd >= 0) {
		/* As init was until its exec: nothing in the container may open our /proc files
		 * or ptrace us while we wait. (Exec'd by a user who may not read the stub, which
		 * is mode 0111, the kernel made us so already.) */
		sys3(__NR_prctl, PR_SET_DUMPABLE, 0, 0);
		exit_on_termination_signals();
		wait_for_start(fifo_fd);
	}
	if (err_fd >= 0)
		sys3(__NR_fcntl, err_fd, F_SETFD, FD_CLOEXEC);
	long rc = sys3(__NR_execve, (long)argv[2], (long)(argv + 3), (long)envp);
	int err = (int)-rc;
	if (err_fd >= 0) {
		long w;
		do
			w = sys3(__NR_write, err_fd, (long)&err, sizeof err);
		while (w == -EINTR);
	} else {
		put("forkbox: exec: \"");
		put(argv[3]);
		put("\": ");
		put_errno(err);
		put("\n");
	}
	leave(127);
}

/* The kernel starts us with sp at argc; stub_main wants it as its first argument, with the
 * stack aligned as the ABI expects at a call. */
#if defined(__x86_64__)
__asm__(".text\n"
	".global _start\n"
	".type _start,@function\n"
	"_start:\n"
	"	xor %ebp, %ebp\n"
	"	mov %rsp, %rdi\n"
	"	and $-16, %rsp\n"
	"	call stub_main\n"
	"	hlt\n"
	".global stub_signal_return\n"
	".type stub_signal_return,@function\n"
	"stub_signal_return:\n"
	"	mov $15, %eax\n"
	"	syscall\n");
#else
__asm__(".text\n"
	".global _start\n"
	".type _start,%function\n"
	"_start:\n"
	"	mov x29, #0\n"
	"	mov x30, #0\n"
	"	mov x0, sp\n"
	"	and sp, x0, #-16\n"
	"	bl stub_main\n"
	"	brk #0\n"
	".global stub_signal_return\n"
	".type stub_signal_return,%function\n"
	"stub_signal_return:\n"
	"	mov x8, #139\n"
	"	svc #0\n");
#endif
