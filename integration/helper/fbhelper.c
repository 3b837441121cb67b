/* fbhelper: the payload of forkbox's integration tests.
 *
 * Build (the Makefile does this as build/fbhelper):
 *   cc -static -O2 -Wall -Wextra -o build/fbhelper integration/helper/fbhelper.c
 *
 * The tests copy it to /bin/fbhelper inside a busybox rootfs, so no image is needed.
 * Each sub-command (argv[1]) prints one observable fact about the process the runtime
 * built, in a fixed format the bats tests match on. Output goes to stdout; errors go
 * to stderr as "fbhelper: <what>: <strerror>" with exit 1; a bad sub-command or bad
 * arguments print the usage and exit 2.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char usage_text[] =
	"usage: fbhelper COMMAND [ARGS...]\n"
	"  true | false | exit N          exit 0 / 1 / N\n"
	"  echo ARGS...                   print ARGS separated by spaces\n"
	"  cat                            copy stdin to stdout\n"
	"  env                            print the environment, one VAR=value a line\n"
	"  pwd | cwd                      getcwd() | readlink(/proc/self/cwd)\n"
	"  id                             uid=U gid=G groups=G1,G2 (supplementary groups)\n"
	"  caps                           CapInh/CapPrm/CapEff/CapBnd/CapAmb of /proc/self/status\n"
	"  status-field NAME              value of NAME in /proc/self/status\n"
	"  sleep SECONDS                  sleep (fractional seconds allowed)\n"
	"  traceme-signal                 PTRACE_TRACEME, then raise SIGUSR1 and report it\n"
	"  hostname | domainname          uname() nodename / domainname\n"
	"  fds                            open fds: \"N TARGET\" a line\n"
	"  readlink PATH                  print the symlink target\n"
	"  write FILE TEXT                write TEXT (no newline added) to FILE, truncating it\n"
	"  read FILE                      copy FILE to stdout\n"
	"  ls DIR                         sorted entries of DIR without . and .., one a line\n"
	"  stat PATH                      TYPE MODE UID GID of PATH (lstat), MODE in octal\n"
	"  mountinfo                      print /proc/self/mountinfo\n"
	"  rlimit NAME                    SOFT HARD of RLIMIT_NAME (NOFILE, NPROC, CORE, ...)\n"
	"  umask                          the umask in octal, e.g. 0022\n"
	"  pid                            PID PPID\n"
	"  sigwait                        wait for SIGTERM/SIGINT/SIGUSR1, print its name, exit 0\n"
	"  ignore-term-sleep SECONDS      ignore SIGTERM, print \"ready\", then sleep\n"
	"  oom-score-adj                  print /proc/self/oom_score_adj\n"
	"  sysctl NAME                    print /proc/sys/NAME (dots become slashes)\n"
	"  kill-self SIGNUM               raise SIGNUM with its default action\n"
	"  syscall NAME...                make each raw syscall with harmless arguments, print\n"
	"                                 \"NAME errno=N\" (0: it succeeded). NAME: getpid mount\n"
	"                                 umount2 unshare-user setns pivot_root ptrace bpf\n"
	"                                 perf_event_open kexec_load init_module finit_module\n"
	"                                 delete_module reboot swapon keyctl userfaultfd clone\n"
	"                                 clone-newuser clone3\n"
	"  exe-hunt SECONDS NEEDLE        CVE-2019-5736 attacker: see do_exe_hunt\n";

static int usage(void)
{
	fputs(usage_text, stderr);
	return 2;
}

static int fail(const char *what, const char *arg)
{
	int saved = errno;
	if (arg)
		fprintf(stderr, "fbhelper: %s %s: %s\n", what, arg, strerror(saved));
	else
		fprintf(stderr, "fbhelper: %s: %s\n", what, strerror(saved));
	return 1;
}

static int copy_fd(int in, int out)
{
	char buf[65536];
	for (;;) {
		ssize_t n = read(in, buf, sizeof buf);
		if (n == 0)
			return 0;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(out, buf + off, (size_t)(n - off));
			if (w < 0) {
				if (errno == EINTR)
					continue;
				return -1;
			}
			off += w;
		}
	}
}

static int cat_file(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("read", path);
	fflush(stdout);
	int rc = copy_fd(fd, STDOUT_FILENO);
	int saved = errno;
	close(fd);
	errno = saved;
	return rc < 0 ? fail("read", path) : 0;
}

/* Parses a non-negative decimal integer; returns -1 on garbage. */
static long parse_long(const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0)
		return -1;
	return v;
}

static int do_sleep(const char *arg)
{
	char *end;
	double secs = strtod(arg, &end);
	if (end == arg || *end || secs < 0)
		return usage();
	struct timespec ts;
	ts.tv_sec = (time_t)secs;
	ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
	/* nanosleep writes the remainder back on EINTR, so a handled signal does not cut it short. */
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	return 0;
}

static int do_echo(int argc, char **argv)
{
	for (int i = 2; i < argc; i++)
		printf("%s%s", i > 2 ? " " : "", argv[i]);
	putchar('\n');
	return 0;
}

static int do_env(void)
{
	for (char **e = environ; *e; e++)
		puts(*e);
	return 0;
}

static int do_pwd(void)
{
	char buf[PATH_MAX];
	if (!getcwd(buf, sizeof buf))
		return fail("getcwd", NULL);
	puts(buf);
	return 0;
}

static int do_readlink(const char *path)
{
	char buf[PATH_MAX];
	ssize_t n = readlink(path, buf, sizeof buf - 1);
	if (n < 0)
		return fail("readlink", path);
	buf[n] = '\0';
	puts(buf);
	return 0;
}

static int do_id(void)
{
	gid_t groups[NGROUPS_MAX];
	int n = getgroups(NGROUPS_MAX, groups);
	if (n < 0)
		return fail("getgroups", NULL);
	printf("uid=%u gid=%u groups=", (unsigned)getuid(), (unsigned)getgid());
	for (int i = 0; i < n; i++)
		printf("%s%u", i ? "," : "", (unsigned)groups[i]);
	putchar('\n');
	return 0;
}

/* Prints the lines of /proc/self/status whose key is in keys (NULL-terminated); with
 * value_only, prints only the value (after the colon and the whitespace). Returns the
 * number of lines printed, or -1 when the file cannot be read. */
static int print_status(const char *const *keys, int value_only)
{
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return -1;
	char line[4096];
	int found = 0;
	while (fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':');
		if (!colon)
			continue;
		for (const char *const *k = keys; *k; k++) {
			size_t len = strlen(*k);
			if ((size_t)(colon - line) != len || strncmp(line, *k, len) != 0)
				continue;
			if (value_only) {
				char *v = colon + 1;
				while (*v == ' ' || *v == '\t')
					v++;
				fputs(v, stdout);
			} else {
				fputs(line, stdout);
			}
			found++;
		}
	}
	fclose(f);
	return found;
}

static int do_caps(void)
{
	static const char *const keys[] = { "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", NULL };
	if (print_status(keys, 0) < 0)
		return fail("read", "/proc/self/status");
	return 0;
}

static int do_status_field(const char *name)
{
	const char *keys[] = { name, NULL };
	int n = print_status(keys, 1);
	if (n < 0)
		return fail("read", "/proc/self/status");
	if (n == 0) {
		fprintf(stderr, "fbhelper: status-field %s: no such field\n", name);
		return 1;
	}
	return 0;
}

static int do_uname(int domain)
{
	struct utsname u;
	if (uname(&u) < 0)
		return fail("uname", NULL);
	puts(domain ? u.domainname : u.nodename);
	return 0;
}

static int do_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return fail("opendir", "/proc/self/fd");
	int self = dirfd(d);
	int fds[1024];
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL && n < (int)(sizeof fds / sizeof fds[0])) {
		if (e->d_name[0] == '.')
			continue;
		int fd = atoi(e->d_name);
		if (fd != self)
			fds[n++] = fd;
	}
	/* readdir order of /proc/self/fd is numeric already; sort anyway to pin the format. */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && fds[j - 1] > fds[j]; j--) {
			int t = fds[j];
			fds[j] = fds[j - 1];
			fds[j - 1] = t;
		}
	for (int i = 0; i < n; i++) {
		char path[64], target[PATH_MAX];
		snprintf(path, sizeof path, "/proc/self/fd/%d", fds[i]);
		ssize_t len = readlink(path, target, sizeof target - 1);
		if (len < 0)
			len = 0;
		target[len] = '\0';
		printf("%d %s\n", fds[i], target);
	}
	closedir(d);
	return 0;
}

static int write_all(int fd, const char *s, size_t len)
{
	while (len > 0) {
		ssize_t w = write(fd, s, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		s += w;
		len -= (size_t)w;
	}
	return 0;
}

static int do_write(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return fail("write", path);
	if (write_all(fd, text, strlen(text)) < 0) {
		int saved = errno;
		close(fd);
		errno = saved;
		return fail("write", path);
	}
	if (close(fd) < 0)
		return fail("write", path);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int do_ls(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return fail("ls", path);
	size_t n = 0, cap = 64;
	char **names = malloc(cap * sizeof *names);
	struct dirent *e;
	while (names && (e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (n == cap) {
			char **grown = realloc(names, (cap *= 2) * sizeof *names);
			if (!grown) {
				free(names);
				names = NULL;
				break;
			}
			names = grown;
		}
		names[n++] = strdup(e->d_name);
	}
	closedir(d);
	if (!names) {
		errno = ENOMEM;
		return fail("ls", path);
	}
	qsort(names, n, sizeof *names, cmp_str);
	for (size_t i = 0; i < n; i++) {
		puts(names[i]);
		free(names[i]);
	}
	free(names);
	return 0;
}

static const char *file_type(mode_t m)
{
	switch (m & S_IFMT) {
	case S_IFREG: return "file";
	case S_IFDIR: return "directory";
	case S_IFLNK: return "symlink";
	case S_IFCHR: return "char";
	case S_IFBLK: return "block";
	case S_IFIFO: return "fifo";
	case S_IFSOCK: return "socket";
	default: return "unknown";
	}
}

static int do_stat(const char *path)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return fail("stat", path);
	printf("%s %04o %u %u\n", file_type(st.st_mode), (unsigned)(st.st_mode & 07777),
	       (unsigned)st.st_uid, (unsigned)st.st_gid);
	return 0;
}

static const struct {
	const char *name;
	int resource;
} rlimits[] = {
	{ "CPU", RLIMIT_CPU },           { "FSIZE", RLIMIT_FSIZE },
	{ "DATA", RLIMIT_DATA },         { "STACK", RLIMIT_STACK },
	{ "CORE", RLIMIT_CORE },         { "RSS", RLIMIT_RSS },
	{ "NPROC", RLIMIT_NPROC },       { "NOFILE", RLIMIT_NOFILE },
	{ "MEMLOCK", RLIMIT_MEMLOCK },   { "AS", RLIMIT_AS },
	{ "LOCKS", RLIMIT_LOCKS },       { "SIGPENDING", RLIMIT_SIGPENDING },
	{ "MSGQUEUE", RLIMIT_MSGQUEUE }, { "NICE", RLIMIT_NICE },
	{ "RTPRIO", RLIMIT_RTPRIO },     { "RTTIME", RLIMIT_RTTIME },
};

static void print_limit(rlim_t v)
{
	if (v == RLIM_INFINITY)
		fputs("unlimited", stdout);
	else
		printf("%llu", (unsigned long long)v);
}

static int do_rlimit(const char *name)
{
	if (!strncasecmp(name, "RLIMIT_", 7))
		name += 7;
	for (size_t i = 0; i < sizeof rlimits / sizeof rlimits[0]; i++) {
		if (strcasecmp(name, rlimits[i].name) != 0)
			continue;
		struct rlimit rl;
		if (getrlimit(rlimits[i].resource, &rl) < 0)
			return fail("getrlimit", name);
		print_limit(rl.rlim_cur);
		putchar(' ');
		print_limit(rl.rlim_max);
		putchar('\n');
		return 0;
	}
	fprintf(stderr, "fbhelper: rlimit: unknown resource %s\n", name);
	return 2;
}

static int do_umask(void)
{
	mode_t m = umask(0);
	umask(m);
	printf("%04o\n", (unsigned)m);
	return 0;
}

static const char *signal_name(int sig)
{
	switch (sig) {
	case SIGTERM: return "SIGTERM";
	case SIGINT: return "SIGINT";
	case SIGUSR1: return "SIGUSR1";
	default: return "UNKNOWN";
	}
}

static void on_signal(int sig)
{
	(void)sig;
}

static int do_sigwait(void)
{
	static const int sigs[] = { SIGTERM, SIGINT, SIGUSR1 };
	sigset_t set;
	sigemptyset(&set);
	/* A handler (not SIG_DFL) also matters: the kernel drops SIG_DFL signals sent to pid 1
	 * of a pid namespace from inside it; blocked signals are never dropped, but a handler
	 * keeps that true should something unblock them. */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		sigaddset(&set, sigs[i]);
		sigaction(sigs[i], &sa, NULL);
	}
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		return fail("sigprocmask", NULL);
	puts("ready");
	fflush(stdout);
	int sig;
	int err = sigwait(&set, &sig);
	if (err) {
		errno = err;
		return fail("sigwait", NULL);
	}
	puts(signal_name(sig));
	return 0;
}

static int do_ignore_term_sleep(const char *secs)
{
	signal(SIGTERM, SIG_IGN);
	puts("ready");
	fflush(stdout);
	return do_sleep(secs);
}

static int do_sysctl(const char *name)
{
	char path[PATH_MAX];
	int n = snprintf(path, sizeof path, "/proc/sys/%s", name);
	if (n < 0 || (size_t)n >= sizeof path)
		return usage();
	for (char *p = path + strlen("/proc/sys/"); *p; p++)
		if (*p == '.')
			*p = '/';
	return cat_file(path);
}

static int do_kill_self(const char *arg)
{
	long sig = parse_long(arg);
	if (sig <= 0 || sig >= NSIG)
		return usage();
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, (int)sig);
	signal((int)sig, SIG_DFL);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	fflush(stdout);
	kill(getpid(), (int)sig);
	/* Still here: pid 1 of a pid namespace ignores its own SIG_DFL signals (the kernel
	 * only forces SIGKILL/SIGSTOP sent from an ancestor namespace). */
	fprintf(stderr, "fbhelper: kill-self %ld: still alive (pid %d)\n", sig, (int)getpid());
	return 3;
}

/* ---- syscall: raw syscalls for seccomp tests ----
 * Each call uses arguments that are harmless even when the call is allowed: it fails on a
 * bad argument after the permission checks, or only changes this process (a new user
 * namespace, being traced by its parent). A seccomp filter that refuses it answers first. */
#include <linux/sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/* A clone(2) child that exits at once; the parent reaps it. */
static long clone_and_reap(unsigned long flags)
{
	long pid = syscall(SYS_clone, flags | SIGCHLD, 0, NULL, NULL, 0);
	if (pid == 0)
		_exit(0);
	if (pid > 0)
		waitpid((pid_t)pid, NULL, 0);
	return pid;
}

static long raw_syscall(const char *name, int *known)
{
	*known = 1;
	if (!strcmp(name, "getpid"))
		return syscall(SYS_getpid);
	if (!strcmp(name, "mount"))
		return syscall(SYS_mount, "none", "/tmp", "tmpfs", 0UL, "");
	if (!strcmp(name, "umount2"))
		return syscall(SYS_umount2, "/fbhelper-no-such-mount", 0);
	if (!strcmp(name, "unshare-user")) /* needs no capability: only seccomp stops it */
		return syscall(SYS_unshare, CLONE_NEWUSER);
	if (!strcmp(name, "setns"))
		return syscall(SYS_setns, -1, 0);
	if (!strcmp(name, "pivot_root"))
		return syscall(SYS_pivot_root, "/fbhelper-none", "/fbhelper-none");
	if (!strcmp(name, "ptrace")) /* PTRACE_TRACEME: no capability needed either */
		return syscall(SYS_ptrace, 0L /* PTRACE_TRACEME */, 0, NULL, NULL);
	if (!strcmp(name, "bpf"))
		return syscall(SYS_bpf, 1000, NULL, 0); /* no such command */
	if (!strcmp(name, "perf_event_open"))
		return syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0UL);
	if (!strcmp(name, "kexec_load")) /* unknown flags: never loads or unloads an image */
		return syscall(SYS_kexec_load, 0UL, 0UL, NULL, 0xffff0000UL);
	if (!strcmp(name, "init_module"))
		return syscall(SYS_init_module, NULL, 0UL, "");
	if (!strcmp(name, "finit_module"))
		return syscall(SYS_finit_module, -1, "", 0);
	if (!strcmp(name, "delete_module"))
		return syscall(SYS_delete_module, "fbhelper_no_such_module", 0);
	if (!strcmp(name, "reboot")) /* wrong magic: EINVAL even when allowed */
		return syscall(SYS_reboot, 0, 0, 0, NULL);
	if (!strcmp(name, "swapon"))
		return syscall(SYS_swapon, "/fbhelper-none", 0);
	if (!strcmp(name, "keyctl")) /* KEYCTL_GET_KEYRING_ID of the session keyring */
		return syscall(SYS_keyctl, 0, -3, 0);
	if (!strcmp(name, "userfaultfd")) {
		long fd = syscall(SYS_userfaultfd, 0);
		if (fd >= 0)
			close((int)fd);
		return fd;
	}
	if (!strcmp(name, "clone")) /* fork through clone(2), no namespace flags */
		return clone_and_reap(0);
	if (!strcmp(name, "clone-newuser"))
		return clone_and_reap(CLONE_NEWUSER);
	if (!strcmp(name, "tiocsti")) { /* types "#" into the terminal on stdin (a comment) */
		char c = '#';
		return ioctl(STDIN_FILENO, TIOCSTI, &c);
	}
#ifdef SYS_clone3
	if (!strcmp(name, "clone3")) /* a NULL clone_args: EFAULT or EINVAL when allowed */
		return syscall(SYS_clone3, NULL, 0UL);
#endif
	*known = 0;
	return -1;
}

static int do_syscall(int argc, char **argv)
{
	if (argc < 3)
		return usage();
	for (int i = 2; i < argc; i++) {
		int known;
		errno = 0;
		long rc = raw_syscall(argv[i], &known);
		if (!known) {
			fprintf(stderr, "fbhelper: syscall: unknown name %s\n", argv[i]);
			return 2;
		}
		printf("%s errno=%d\n", argv[i], rc < 0 ? errno : 0);
	}
	return 0;
}
/* ---- end of syscall ---- */

/* ---- exe-hunt: the CVE-2019-5736 attacker (integration/security.bats) ----
 * For SECONDS, scans /proc/PID/exe of every other process it can see; each one whose
 * link target contains NEEDLE is opened read-only at once (print "open TARGET", or
 * "open-failed TARGET: ERR") and held. Then, for each held file, retries for a second
 * to reopen it for writing through /proc/self/fd/N (ETXTBSY while it still runs) and to
 * write a marker: "wrote TARGET" when that worked, "write-refused TARGET: ERR" when not.
 * Ends with "hunt done". Exit 0 either way: the test judges the lines and the file. */
#define EXE_HUNT_MAX 64

static double exe_hunt_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int exe_hunt_write(int fd, const char *target)
{
	static const char marker[] = "overwritten by fbhelper exe-hunt\n";
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	int err = 0;
	for (int i = 0; i < 100; i++) {
		int w = open(path, O_WRONLY | O_CLOEXEC);
		if (w >= 0) {
			int ok = write_all(w, marker, sizeof marker - 1) == 0;
			err = errno;
			close(w);
			if (ok) {
				printf("wrote %s\n", target);
				return 1;
			}
			break;
		}
		err = errno;
		if (err != ETXTBSY)
			break;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	printf("write-refused %s: %s\n", target, strerror(err));
	return 0;
}

static int do_exe_hunt(const char *secs_arg, const char *needle)
{
	char *end;
	double secs = strtod(secs_arg, &end);
	if (end == secs_arg || *end || secs < 0)
		return usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	int held[EXE_HUNT_MAX];
	pid_t held_pid[EXE_HUNT_MAX];
	char held_target[EXE_HUNT_MAX][PATH_MAX];
	int nheld = 0;
	pid_t self = getpid();
	printf("hunting\n");
	for (double deadline = exe_hunt_now() + secs; exe_hunt_now() < deadline;) {
		DIR *d = opendir("/proc");
		if (!d)
			return fail("opendir", "/proc");
		struct dirent *e;
		while ((e = readdir(d)) && nheld < EXE_HUNT_MAX) {
			char *pend;
			long pid = strtol(e->d_name, &pend, 10);
			if (*pend || pid <= 0 || pid == self)
				continue;
			int known = 0;
			for (int i = 0; i < nheld; i++)
				known |= held_pid[i] == pid;
			if (known)
				continue;
			char link[64], target[PATH_MAX];
			snprintf(link, sizeof link, "/proc/%ld/exe", pid);
			ssize_t n = readlink(link, target, sizeof target - 1);
			if (n < 0)
				continue; /* gone, a kernel thread, or not dumpable */
			target[n] = 0;
			if (!strstr(target, needle))
				continue;
			int fd = open(link, O_RDONLY | O_CLOEXEC);
			if (fd < 0) {
				if (errno != ENOENT && errno != ESRCH)
					printf("open-failed %s: %s\n", target, strerror(errno));
				continue;
			}
			printf("open %s\n", target);
			held[nheld] = fd;
			held_pid[nheld] = (pid_t)pid;
			memcpy(held_target[nheld], target, (size_t)n + 1);
			nheld++;
		}
		closedir(d);
	}
	for (int i = 0; i < nheld; i++) {
		exe_hunt_write(held[i], held_target[i]);
		close(held[i]);
	}
	printf("hunt done\n");
	return 0;
}
/* ---- end of exe-hunt ---- */

/* traceme-signal: PTRACE_TRACEME (the runtime, our parent, becomes the tracer), then a
 * signal to ourselves: a tracer that never resumes us would leave us stopped. */
static volatile sig_atomic_t got_usr1;
static void on_usr1(int sig)
{
	(void)sig;
	got_usr1 = 1;
}

static int cmd_traceme_signal(void)
{
	signal(SIGUSR1, on_usr1);
	if (syscall(SYS_ptrace, 0L /* PTRACE_TRACEME */, 0, NULL, NULL) < 0)
		return fail("ptrace", "TRACEME");
	raise(SIGUSR1);
	printf("%s\n", got_usr1 ? "got USR1" : "no USR1");
	return got_usr1 ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	const char *cmd = argv[1];
	int nargs = argc - 2;

#define IS(name, n) (!strcmp(cmd, name) && nargs == (n))
	if (IS("traceme-signal", 0))
		return cmd_traceme_signal();
	if (IS("true", 0))
		return 0;
	if (IS("false", 0))
		return 1;
	if (IS("exit", 1)) {
		long code = parse_long(argv[2]);
		return code < 0 || code > 255 ? usage() : (int)code;
	}
	if (!strcmp(cmd, "echo"))
		return do_echo(argc, argv);
	if (IS("cat", 0))
		return copy_fd(STDIN_FILENO, STDOUT_FILENO) < 0 ? fail("cat", NULL) : 0;
	if (IS("env", 0))
		return do_env();
	if (IS("pwd", 0))
		return do_pwd();
	if (IS("cwd", 0))
		return do_readlink("/proc/self/cwd");
	if (IS("id", 0))
		return do_id();
	if (IS("caps", 0))
		return do_caps();
	if (IS("status-field", 1))
		return do_status_field(argv[2]);
	if (IS("sleep", 1))
		return do_sleep(argv[2]);
	if (IS("hostname", 0))
		return do_uname(0);
	if (IS("domainname", 0))
		return do_uname(1);
	if (IS("fds", 0))
		return do_fds();
	if (IS("readlink", 1))
		return do_readlink(argv[2]);
	if (IS("write", 2))
		return do_write(argv[2], argv[3]);
	if (IS("read", 1))
		return cat_file(argv[2]);
	if (IS("ls", 1))
		return do_ls(argv[2]);
	if (IS("stat", 1))
		return do_stat(argv[2]);
	if (IS("mountinfo", 0))
		return cat_file("/proc/self/mountinfo");
	if (IS("rlimit", 1))
		return do_rlimit(argv[2]);
	if (IS("umask", 0))
		return do_umask();
	if (IS("pid", 0)) {
		printf("%d %d\n", (int)getpid(), (int)getppid());
		return 0;
	}
	if (IS("sigwait", 0))
		return do_sigwait();
	if (IS("ignore-term-sleep", 1))
		return do_ignore_term_sleep(argv[2]);
	if (IS("oom-score-adj", 0))
		return cat_file("/proc/self/oom_score_adj");
	if (IS("sysctl", 1))
		return do_sysctl(argv[2]);
	if (IS("kill-self", 1))
		return do_kill_self(argv[2]);
	if (!strcmp(cmd, "syscall"))
		return do_syscall(argc, argv);
	if (IS("exe-hunt", 2))
		return do_exe_hunt(argv[2], argv[3]);
#undef IS
	fprintf(stderr, "fbhelper: unknown command or wrong arguments: %s\n", cmd);
	return usage();
}
