/* Start and stop fake_worker.py (a scriptable Python gRPC worker on 127.0.0.1) from C tests, and read
 * the events it logged. Skips the test (exit 77) when python3-grpcio or protoc are missing. */
#ifndef FAKE_WORKER_H
#define FAKE_WORKER_H

#include <sys/types.h>

struct fake_worker {
    pid_t pid;
    int port;
    char target[64]; /* "127.0.0.1:<port>" */
    char log[256];
    char port_file[256];
};

/** Start a worker with extra arguments (NULL-terminated list, e.g. "--tokens", "8", NULL); port 0 =
 * any. Waits until it listens. Returns 0, or -1 (the message went to stderr). */
int fake_worker_start(struct fake_worker *w, const char *name, int port, const char *const *extra);
/** Start any worker command (argv NULL-terminated; "--port-file PATH" is appended) with extra
 * environment entries (NULL-terminated "K=V", may be NULL). Same contract as fake_worker_start. */
int fake_worker_start_cmd(struct fake_worker *w, const char *name, const char *const *argv,
                          const char *const *env_extra);
/** Kill it (SIGKILL) and reap it; the log stays for inspection. */
void fake_worker_kill(struct fake_worker *w);
/** Lines in its log containing every one of the needles (NULL-terminated). */
int fake_worker_log_count(const struct fake_worker *w, const char *needle, ...);
/** For test_loop_run: true once a line of w's log has both a and b. */
struct fake_worker_logwait {
    const struct fake_worker *w;
    const char *a, *b;
};
int fake_worker_log_seen(void *logwait);
/** Remove its log and port file. */
void fake_worker_cleanup(struct fake_worker *w);

#endif
