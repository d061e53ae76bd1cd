/* Spawning fake_worker.py for the tests (see fake_worker.h). */
#include "fake_worker.h"

#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int fake_worker_start(struct fake_worker *w, const char *name, int port, const char *const *extra)
{
    const char *src = getenv("MMGW_SOURCE");
    if (!src) src = ".";
    if (access("/usr/bin/python3", X_OK) != 0 ||
        system("/usr/bin/python3 -c 'import grpc' 2>/dev/null") != 0 ||
        system("command -v protoc >/dev/null && test -x /usr/bin/grpc_python_plugin") != 0) {
        printf("SKIP: /usr/bin/python3 with grpcio, protoc and grpc_python_plugin are needed\n");
        exit(77);
    }
    memset(w, 0, sizeof(*w));
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(w->log, sizeof(w->log), "%s/mmgw-fw-%ld-%s.log", tmp, (long)getpid(), name);
    snprintf(w->port_file, sizeof(w->port_file), "%s/mmgw-fw-%ld-%s.port", tmp, (long)getpid(), name);
    unlink(w->port_file);
    char script[512], proto[512], portstr[16];
    snprintf(script, sizeof(script), "%s/tests/integration/upstream/fake_worker.py", src);
    snprintf(proto, sizeof(proto), "%s/proto", src);
    snprintf(portstr, sizeof(portstr), "%d", port);
    const char *argv[64];
    int n = 0;
    argv[n++] = "/usr/bin/python3";
    argv[n++] = script;
    argv[n++] = "--proto-dir";
    argv[n++] = proto;
    argv[n++] = "--port";
    argv[n++] = portstr;
    argv[n++] = "--port-file";
    argv[n++] = w->port_file;
    argv[n++] = "--log";
    argv[n++] = w->log;
    for (int i = 0; extra && extra[i] && n < 62; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    return fake_worker_start_cmd(w, name, argv, NULL);
}

static int wait_listening(struct fake_worker *w, const char *name);

int fake_worker_start_cmd(struct fake_worker *w, const char *name, const char *const *argv,
                          const char *const *env_extra)
{
    if (!w->log[0]) {
        memset(w, 0, sizeof(*w));
        const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(w->log, sizeof(w->log), "%s/mmgw-fw-%ld-%s.log", tmp, (long)getpid(), name);
        snprintf(w->port_file, sizeof(w->port_file), "%s/mmgw-fw-%ld-%s.port", tmp, (long)getpid(), name);
    }
    unlink(w->port_file);
    const char *args[80];
    int n = 0;
    for (int i = 0; argv[i] && n < 76; i++) args[n++] = argv[i];
    int has_port_file = 0;
    for (int i = 0; i < n; i++) has_port_file |= strcmp(args[i], "--port-file") == 0;
    if (!has_port_file) {
        args[n++] = "--port-file";
        args[n++] = w->port_file;
    }
    args[n] = NULL;
    char *envp[256];
    int ne = 0;
    for (char **e = environ; *e && ne < 200; e++) envp[ne++] = *e;
    for (int i = 0; env_extra && env_extra[i] && ne < 255; i++) envp[ne++] = (char *)env_extra[i];
    envp[ne] = NULL;
    if (posix_spawn(&w->pid, args[0], NULL, NULL, (char *const *)args, envp) != 0) {
        fprintf(stderr, "cannot start %s\n", args[0]);
        return -1;
    }
    return wait_listening(w, name);
}

static int wait_listening(struct fake_worker *w, const char *name)
{
    for (int waited = 0; waited < 15000; waited += 20) {
        FILE *f = fopen(w->port_file, "r");
        if (f) {
            int ok = fscanf(f, "%d", &w->port) == 1;
            fclose(f);
            if (ok) {
                snprintf(w->target, sizeof(w->target), "127.0.0.1:%d", w->port);
                return 0;
            }
        }
        int status;
        if (waitpid(w->pid, &status, WNOHANG) == w->pid) {
            fprintf(stderr, "fake worker %s exited during start-up\n", name);
            w->pid = 0;
            return -1;
        }
        sleep_ms(20);
    }
    fprintf(stderr, "fake worker %s did not start listening\n", name);
    fake_worker_kill(w);
    return -1;
}

void fake_worker_kill(struct fake_worker *w)
{
    if (w->pid <= 0) return;
    kill(w->pid, SIGKILL);
    waitpid(w->pid, NULL, 0);
    w->pid = 0;
}

int fake_worker_log_count(const struct fake_worker *w, const char *needle, ...)
{
    const char *needles[16];
    int n = 0;
    va_list ap;
    va_start(ap, needle);
    for (const char *s = needle; s && n < 16; s = va_arg(ap, const char *)) needles[n++] = s;
    va_end(ap);
    FILE *f = fopen(w->log, "r");
    if (!f) return 0;
    char line[65536];
    int count = 0;
    while (fgets(line, sizeof(line), f)) {
        int all = 1;
        for (int i = 0; i < n && all; i++) all = strstr(line, needles[i]) != NULL;
        count += all;
    }
    fclose(f);
    return count;
}

int fake_worker_log_seen(void *logwait)
{
    const struct fake_worker_logwait *l = logwait;
    return fake_worker_log_count(l->w, l->a, l->b, NULL) > 0;
}

void fake_worker_cleanup(struct fake_worker *w)
{
    unlink(w->log);
    unlink(w->port_file);
}
