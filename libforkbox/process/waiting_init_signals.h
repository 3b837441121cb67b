/* The signals that end a container's init while it waits for `start`.
 *
 * Until its program runs, init is forkbox's code as pid 1 of the container's pid namespace,
 * where a signal left at its default action is ignored (the kernel protects a namespace's
 * init): `kill ID TERM` of a created container would do nothing. runc's init (Go) dies of
 * it, and managers count on that (containerd kills a task that never started). So init and
 * the exec stub that waits in its place catch these and exit with 128+N, as a shell reports
 * a death by signal N: the asynchronous signals whose default action ends a process. Not
 * SIGPIPE (our own write to the fifo when `start` died: the errno reports it), SIGSYS and
 * the faults (synchronous), nor SIGKILL and SIGSTOP (which nothing catches). execve resets
 * the handlers, so the program starts with every signal at its default, as under runc.
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
