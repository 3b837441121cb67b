/* The signals that end a container's init while it waits for `start`.
 *
 * Until its program runs, init is forkbox's code as pid 1 of the container's pid namespace,
 * where a signal left at its default action is ignored (the kernel protects a namespace's
 * init): `kill ID TERM` of a created container would do nothing. runc's init (a Go program)
 * dies of it, and managers count on that (containerd kills a task that never started). So
 * init and the exec stub that waits in its place catch the signals that end runc's init,
 * SIGHUP, SIGINT, SIGQUIT, SIGABRT, SIGTERM and SIGSTKFLT, and exit with 128+N, as a shell
 * reports a death by signal N. The rest do nothing, as under runc (Go drops SIGUSR1, SIGALRM
 * or a real-time signal nobody asked for); SIGKILL works as ever. execve resets the
 * handlers, so the program starts with every signal at its default, as under runc.
 *
 * Shared by C++ (include <signal.h> first) and the freestanding stub (<asm/signal.h>).
 */
#ifndef FORKBOX_WAITING_INIT_SIGNALS_H
#define FORKBOX_WAITING_INIT_SIGNALS_H

#define FORKBOX_LAST_WAITING_INIT_SIGNAL SIGSTKFLT

static inline int forkbox_signal_ends_waiting_init(int sig)
{
	switch (sig) {
	case SIGHUP: case SIGINT: case SIGQUIT: case SIGABRT: case SIGTERM: case SIGSTKFLT:
		return 1;
	default:
		return 0;
	}
}

#endif
