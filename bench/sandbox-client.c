// sandbox-client - a minimal C client of the sandbox protocol (docs/sandbox-protocol.md), for
// bench/sandbox.sh: what a client costs when it is not Python.
//
// usage: sandbox-client [-t TIMEOUT_MS] [-s SECONDS] SOCKET N ARGV...
//   Runs N requests of ARGV one after another, each on its own connection (connect, send the
//   run request, receive until the final message), and prints each one's latency in
//   microseconds (CLOCK_MONOTONIC, connect to final message), one per line, on stdout.
//   -t MS       "timeout_ms" of every request
//   -s SECONDS  stop after SECONDS (N is then a maximum; 0: no maximum)
// Output messages are received and discarded. The exit status is 0 when every command
// exited 0, else the last command's nonzero exit code (a shell client's `sandbox-client S 1
// CMD` exits as CMD), 255 when a request failed (an error message, a closed connection).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum { RECV_BUFFER = 65537 + 64, MAX_REQUEST = 128 * 1024 };

static char request[MAX_REQUEST];
static char reply[RECV_BUFFER + 1];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

// Appends s as a JSON string; returns the new length, or 0 when it does not fit.
static size_t put_string(size_t len, const char* s) {
    if (len + 1 >= sizeof request) return 0;
    request[len++] = '"';
    for (; *s; ++s) {
        unsigned char c = (unsigned char)*s;
        if (len + 8 >= sizeof request) return 0;
        if (c == '"' || c == '\\') {
            request[len++] = '\\';
            request[len++] = (char)c;
        } else if (c < 0x20) {
            len += (size_t)snprintf(request + len, 7, "\\u%04x", c);
        } else {
            request[len++] = (char)c;
        }
    }
    if (len + 1 >= sizeof request) return 0;
    request[len++] = '"';
    return len;
}

static size_t build_request(char** argv, long timeout_ms) {
    size_t len = (size_t)snprintf(request, sizeof request, "sandbox/1 run\n{\"argv\":[");
    for (int i = 0; argv[i]; ++i) {
        if (i) request[len++] = ',';
        if (!(len = put_string(len, argv[i]))) return 0;
    }
    int n = timeout_ms >= 0 ? snprintf(request + len, sizeof request - len, "],\"timeout_ms\":%ld}", timeout_ms)
                            : snprintf(request + len, sizeof request - len, "]}");
    if (n < 0 || (size_t)n >= sizeof request - len) return 0;
    return len + (size_t)n;
}

// One request: the command's exit code (>= 0), or -1 on failure (reported on stderr).
static int run_once(const struct sockaddr_un* addr, size_t req_len) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        perror("sandbox-client: socket");
        return -1;
    }
    if (connect(fd, (const struct sockaddr*)addr, sizeof *addr) < 0) {
        fprintf(stderr, "sandbox-client: connect %s: %s\n", addr->sun_path, strerror(errno));
        close(fd);
        return -1;
    }
    if (send(fd, request, req_len, MSG_NOSIGNAL) != (ssize_t)req_len) {
        perror("sandbox-client: send");
        close(fd);
        return -1;
    }
    for (;;) {
        ssize_t n = recv(fd, reply, RECV_BUFFER, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            fprintf(stderr, "sandbox-client: %s before the final message\n", n < 0 ? strerror(errno) : "connection closed");
            close(fd);
            return -1;
        }
        if (reply[0] == '1' || reply[0] == '2') continue;  // output: discarded
        reply[n] = '\0';
        close(fd);
        if (reply[0] == 'X') {
            const char* p = strstr(reply, "\"exit_code\":");
            if (!p) {
                fprintf(stderr, "sandbox-client: no exit_code in %s\n", reply + 1);
                return -1;
            }
            return (int)strtol(p + strlen("\"exit_code\":"), NULL, 10);
        }
        fprintf(stderr, "sandbox-client: %s\n", reply[0] == '!' ? reply + 1 : "unknown message");
        return -1;
    }
}

static void usage(void) {
    fprintf(stderr, "usage: sandbox-client [-t TIMEOUT_MS] [-s SECONDS] SOCKET N ARGV...\n");
    exit(2);
}

int main(int argc, char** argv) {
    long timeout_ms = -1;
    double seconds = 0;
    int opt;
    while ((opt = getopt(argc, argv, "+t:s:")) != -1) {
        switch (opt) {
        case 't': timeout_ms = strtol(optarg, NULL, 10); break;
        case 's': seconds = strtod(optarg, NULL); break;
        default: usage();
        }
    }
    if (argc - optind < 3) usage();
    const char* path = argv[optind];
    long n = strtol(argv[optind + 1], NULL, 10);
    char** cmd = argv + optind + 2;

    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) {
        fprintf(stderr, "sandbox-client: socket path too long\n");
        return 2;
    }
    strcpy(addr.sun_path, path);
    size_t req_len = build_request(cmd, timeout_ms);
    if (!req_len) {
        fprintf(stderr, "sandbox-client: request too large\n");
        return 2;
    }
    // Latencies are kept and printed at the end, so printing never sits between requests.
    size_t cap = 1024, count = 0;
    long* lat = malloc(cap * sizeof *lat);
    if (!lat) return 255;
    int status = 0;
    double start = now_s(), end = seconds > 0 ? start + seconds : 0;
    for (long i = 0; n <= 0 || i < n; ++i) {
        if (end && now_s() >= end) break;
        if (n <= 0 && !end) break;
        double t0 = now_s();
        int rc = run_once(&addr, req_len);
        double t1 = now_s();
        if (rc < 0) {
            status = 255;
            break;
        }
        if (rc != 0) status = rc;
        if (count == cap) {
            long* more = realloc(lat, 2 * cap * sizeof *lat);
            if (!more) return 255;
            lat = more;
            cap *= 2;
        }
        lat[count++] = (long)((t1 - t0) * 1e6 + 0.5);
    }
    for (size_t i = 0; i < count; ++i) printf("%ld\n", lat[i]);
    free(lat);
    return status;
}
