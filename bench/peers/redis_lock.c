/*
 * sqlock-peer-redis: the Redis lock as users write it, the peer sqlock's lock cycles are compared with.
 *
 *   acquire  SET key owner NX PX 30000                    (OK = acquired, nil = busy: tried again at once)
 *   release  EVALSHA <compare-and-delete> 1 key owner      (must return 1, else an error), the script
 *            if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end
 *            loaded once per connection with SCRIPT LOAD
 *
 * Each client is a thread with its own hiredis connection. --names distinct: client c cycles over its
 * own 64 keys redis:<pid>:<c>:<i>; shared: all clients use redis:<pid>:shared. After a 1 s warm-up
 * (--warmup) it measures for --seconds: cycles, attempts, busy answers, the latency of each successful
 * cycle (start of the SET that succeeded to the return of the EVALSHA: p50/p99), the process's CPU
 * (getrusage) per cycle, errors. Prints one JSON line (bench/results-format.md, suite "cycle", engine
 * and impl "redis") on stdout. Exit 0; 1 if any error was counted; 2 on bad input or no server.
 *
 *   redis-server --port 6390 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes
 *   sqlock-peer-redis --url redis://127.0.0.1:6390 --clients 4 --names distinct --seconds 10
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_cycle.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <unistd.h>

enum { NAMES = 64, MAX_CLIENTS = 1024 };
static const char release_script[] =
    "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

static struct {
    const char *url, *names;
    int clients;
    double seconds, warmup;
    struct bench_url u;
} opt = {.names = "distinct", .clients = 1, .seconds = 5, .warmup = 1};

struct client {
    int id, nnames, failures_in_a_row;
    bool dead;
    char owner[64], names[NAMES][64], sha[41];
    redisContext *redis;
    struct bench_counts c;
};

static redisReply *command(struct client *cl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(cl->redis, fmt, ap);
    va_end(ap);
    if (!r) {
        bench_count(&cl->c.errors);
        bench_warn("client %d: connection failed: %s", cl->id, cl->redis->errstr);
        cl->dead = true;
    } else if (r->type == REDIS_REPLY_ERROR) {
        bench_count(&cl->c.errors);
        bench_warn("client %d: %s", cl->id, r->str);
        freeReplyObject(r);
        r = NULL;
    }
    return r;
}

/* 1 acquired, 0 busy, -1 error */
static int acquire(struct client *cl, const char *key) {
    redisReply *r = command(cl, "SET %s %s NX PX 30000", key, cl->owner);
    if (!r) return -1;
    int got = r->type == REDIS_REPLY_STATUS ? 1 : r->type == REDIS_REPLY_NIL ? 0 : -1;
    freeReplyObject(r);
    return got;
}

static int release(struct client *cl, const char *key) {
    redisReply *r = command(cl, "EVALSHA %s 1 %s %s", cl->sha, key, cl->owner);
    if (!r) return -1;
    bool ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (!ok) bench_count(&cl->c.errors), bench_warn("client %d: release of %s deleted nothing", cl->id, key);
    freeReplyObject(r);
    return ok ? 0 : -1;
}

static void *client_main(void *arg) {
    struct client *cl = arg;
    for (unsigned i = 0; !bench_stopping() && !cl->dead; i++) {
        const char *key = cl->names[i % (unsigned)cl->nnames];
        double start = bench_now_us();
        bench_count(&cl->c.attempts);
        int got = acquire(cl, key);
        if (got == 0) bench_count(&cl->c.busy);
        if (got == 1 && release(cl, key) == 0) {
            bench_cycle_done(&cl->c, start);
            cl->failures_in_a_row = 0;
        } else if (got != 0 && ++cl->failures_in_a_row >= 100) {
            bench_warn("client %d: 100 failures in a row, stopping it", cl->id);
            cl->dead = true;
        }
    }
    if (cl->dead) bench_warn("client %d stopped early: see the errors above", cl->id);
    return NULL;
}

static void connect_client(struct client *cl) {
    cl->redis = redisConnect(opt.u.host, opt.u.port ? (int)opt.u.port : 6379);
    if (!cl->redis || cl->redis->err)
        bench_die(
            "cannot connect to Redis at %s: %s (is redis-server running there? e.g. redis-server --port P "
            "--bind 127.0.0.1 --save '' --appendonly no --daemonize yes)",
            bench_redact(opt.url), cl->redis ? cl->redis->errstr : "out of memory");
    redisReply *r = NULL;
    if (opt.u.password[0]) {
        r = opt.u.user[0] ? redisCommand(cl->redis, "AUTH %s %s", opt.u.user, opt.u.password)
                          : redisCommand(cl->redis, "AUTH %s", opt.u.password);
        if (!r || r->type == REDIS_REPLY_ERROR) bench_die("Redis AUTH failed: %s", r ? r->str : cl->redis->errstr);
        freeReplyObject(r);
    }
    if (opt.u.path[0]) {
        r = redisCommand(cl->redis, "SELECT %s", opt.u.path);
        if (!r || r->type == REDIS_REPLY_ERROR) bench_die("Redis SELECT %s failed", opt.u.path);
        freeReplyObject(r);
    }
    r = redisCommand(cl->redis, "SCRIPT LOAD %s", release_script);
    if (!r || r->type != REDIS_REPLY_STRING || r->len != 40)
        bench_die("Redis SCRIPT LOAD failed: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    memcpy(cl->sha, r->str, 40);
    freeReplyObject(r);
}

static void usage(void) {
    fprintf(stderr,
            "usage: sqlock-peer-redis --url redis://[[user]:password@]host:port[/db] [--clients N]\n"
            "                         [--names distinct|shared] [--seconds S] [--warmup S]\n"
            "  Prints one JSON line (bench/results-format.md) on stdout.\n");
}

int main(int argc, char **argv) {
    bench_prog = "sqlock-peer-redis";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) usage(), exit(0);
        if (strcmp(a, "--url") && strcmp(a, "--clients") && strcmp(a, "--names") && strcmp(a, "--seconds") &&
            strcmp(a, "--warmup"))
            usage(), bench_die("unknown option '%s'", a);
        if (i + 1 == argc) bench_die("%s needs a value (see --help)", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--url")) opt.url = v;
        else if (!strcmp(a, "--clients")) opt.clients = (int)bench_arg_long(a, v, 1, MAX_CLIENTS);
        else if (!strcmp(a, "--names")) opt.names = v;
        else if (!strcmp(a, "--seconds")) opt.seconds = bench_arg_double(a, v, 0.1, 86400);
        else opt.warmup = bench_arg_double(a, v, 0, 3600);
    }
    if (!opt.url) usage(), bench_die("--url is required");
    if (!bench_parse_url(opt.url, "redis", &opt.u))
        bench_die("bad Redis URL '%s': use redis://host:port (or redis://:password@host:port/db)",
                  bench_redact(opt.url));
    bool shared = !strcmp(opt.names, "shared");
    if (!shared && strcmp(opt.names, "distinct")) bench_die("--names must be distinct or shared (got '%s')", opt.names);

    struct client *cls = calloc((size_t)opt.clients, sizeof *cls);
    pthread_t *th = calloc((size_t)opt.clients, sizeof *th);
    if (!cls || !th) bench_die("out of memory");
    int pid = (int)getpid();
    for (int c = 0; c < opt.clients; c++) {
        struct client *cl = &cls[c];
        cl->id = c;
        snprintf(cl->owner, sizeof cl->owner, "redis:%d:owner%d", pid, c);
        cl->nnames = shared ? 1 : NAMES;
        for (int i = 0; i < cl->nnames; i++)
            if (shared) snprintf(cl->names[i], sizeof cl->names[i], "redis:%d:shared", pid);
            else snprintf(cl->names[i], sizeof cl->names[i], "redis:%d:%d:%d", pid, c, i);
        connect_client(cl);
    }
    for (int c = 0; c < opt.clients; c++)
        if (pthread_create(&th[c], NULL, client_main, &cls[c])) bench_die("cannot start client thread %d", c);
    struct bench_line line = {
        .engine = "redis", .impl = "redis", .variant = "", .names = opt.names, .clients = opt.clients};
    line.seconds = bench_window(opt.warmup, opt.seconds, &line.cpu_us);
    for (int c = 0; c < opt.clients; c++) {
        pthread_join(th[c], NULL);
        bench_merge(&line.all, &cls[c].c);
        redisFree(cls[c].redis);
        free(cls[c].c.lat_us);
    }
    bench_print(&line);
    free(line.all.lat_us), free(cls), free(th);
    if (line.all.errors)
        fprintf(stderr, "sqlock-peer-redis: %llu errors (see above)\n", (unsigned long long)line.all.errors);
    return line.all.errors ? 1 : 0;
}
