/*
 * bench_cycle.h: the measuring part shared by the small C cycle clients (sqlock-floor,
 * sqlock-peer-redis). Header-only: every function is static, each program includes it once.
 *
 * Clients are threads that loop until bench_stopping(). Main starts them, then calls
 * bench_window(): a warm-up, then the measured window, in which the clients count their
 * attempts, busy answers, errors and retries (bench_count) and the latency of each successful
 * cycle (bench_cycle_done). bench_print() writes the one JSON line of bench/results-format.md
 * (suite "cycle").
 */
#ifndef SQLOCK_BENCH_CYCLE_H
#define SQLOCK_BENCH_CYCLE_H

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

enum { BENCH_WARMUP, BENCH_MEASURE, BENCH_STOP };
static atomic_int bench_phase = BENCH_WARMUP;
static const char *bench_prog = "bench";

/* Bad input or an unusable server: say what failed and what to do, exit 2. */
static void bench_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: error: ", bench_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* A failure during the run: the first few go to stderr, all of them are counted by the caller. */
static void bench_warn(const char *fmt, ...) {
    static atomic_int shown;
    if (atomic_fetch_add(&shown, 1) >= 10) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", bench_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static double bench_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void bench_sleep(double seconds) {
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static bool bench_stopping(void) { return atomic_load_explicit(&bench_phase, memory_order_relaxed) == BENCH_STOP; }
static bool bench_measuring(void) { return atomic_load_explicit(&bench_phase, memory_order_relaxed) == BENCH_MEASURE; }

/* One client's counts; only events inside the measured window count. */
struct bench_counts {
    uint64_t cycles, attempts, busy, errors, retries;
    float *lat_us; /* every measured cycle's latency */
    size_t n, cap;
};

static void bench_count(uint64_t *counter) {
    if (bench_measuring()) ++*counter;
}

/* A successful cycle that started (its acquire call) at start_us has just ended (its release returned). */
static void bench_cycle_done(struct bench_counts *c, double start_us) {
    double lat = bench_now_us() - start_us;
    if (!bench_measuring()) return;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 65536;
        c->lat_us = realloc(c->lat_us, c->cap * sizeof *c->lat_us);
        if (!c->lat_us) bench_die("out of memory for latency samples");
    }
    c->lat_us[c->n++] = (float)lat;
    c->cycles++;
}

static void bench_merge(struct bench_counts *into, const struct bench_counts *c) {
    into->cycles += c->cycles, into->attempts += c->attempts, into->busy += c->busy;
    into->errors += c->errors, into->retries += c->retries;
    if (!c->n) return;
    into->lat_us = realloc(into->lat_us, (into->n + c->n) * sizeof *into->lat_us);
    if (!into->lat_us) bench_die("out of memory for latency samples");
    memcpy(into->lat_us + into->n, c->lat_us, c->n * sizeof *c->lat_us);
    into->n += c->n, into->cap = into->n;
}

static double bench_cpu_us(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* With the clients running: warm up, then measure. Returns the measured wall seconds, *cpu_us the
 * process's user + system CPU over them. The clients stop when it returns; join them. */
static double bench_window(double warmup_s, double seconds, double *cpu_us) {
    bench_sleep(warmup_s);
    double cpu0 = bench_cpu_us(), t0 = bench_now_us();
    atomic_store(&bench_phase, BENCH_MEASURE);
    bench_sleep(seconds);
    atomic_store(&bench_phase, BENCH_STOP);
    double t1 = bench_now_us();
    *cpu_us = bench_cpu_us() - cpu0;
    return (t1 - t0) / 1e6;
}

static int bench_cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted samples. */
static double bench_pct(const float *sorted, size_t n, double p) {
    size_t rank = (size_t)(p * (double)n + 0.999999);
    return sorted[rank ? rank - 1 : 0];
}

struct bench_line {
    const char *engine, *impl, *variant, *names;
    int clients;
    double seconds, cpu_us;
    struct bench_counts all; /* the clients' counts, merged */
};

static void bench_print(struct bench_line *l) {
    struct bench_counts *c = &l->all;
    char p50[32] = "null", p99[32] = "null", cpu[32] = "null";
    if (c->n) {
        qsort(c->lat_us, c->n, sizeof *c->lat_us, bench_cmp_float);
        snprintf(p50, sizeof p50, "%.1f", bench_pct(c->lat_us, c->n, 0.50));
        snprintf(p99, sizeof p99, "%.1f", bench_pct(c->lat_us, c->n, 0.99));
    }
    if (c->cycles) snprintf(cpu, sizeof cpu, "%.1f", l->cpu_us / (double)c->cycles);
    printf(
        "{\"suite\": \"cycle\", \"engine\": \"%s\", \"impl\": \"%s\", \"variant\": \"%s\", \"clients\": %d, "
        "\"names\": \"%s\", \"seconds\": %.3f, \"cycles\": %llu, \"cycles_per_s\": %.1f, \"attempts\": %llu, "
        "\"busy\": %llu, \"p50_us\": %s, \"p99_us\": %s, \"cpu_us_per_cycle\": %s, \"errors\": %llu, "
        "\"retries\": %llu}\n",
        l->engine, l->impl, l->variant, l->clients, l->names, l->seconds, (unsigned long long)c->cycles,
        (double)c->cycles / l->seconds, (unsigned long long)c->attempts, (unsigned long long)c->busy, p50, p99, cpu,
        (unsigned long long)c->errors, (unsigned long long)c->retries);
    fflush(stdout);
}

/* ---- command line ---- */

static long bench_arg_long(const char *opt, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || end == v || x < lo || x > hi)
        bench_die("%s needs a whole number in %ld..%ld (got '%s')", opt, lo, hi, v ? v : "");
    return x;
}

static double bench_arg_double(const char *opt, const char *v, double lo, double hi) {
    char *end;
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || errno || *end || end == v || !(x >= lo && x <= hi))
        bench_die("%s needs a number in %g..%g (got '%s')", opt, lo, hi, v ? v : "");
    return x;
}

/* scheme://[user[:password]@]host[:port][/path], percent-decoded. Returns false if it is not of that form. */
struct bench_url {
    char user[256], password[256], host[256], path[256];
    unsigned port;
};

static bool bench_decode(char *out, size_t cap, const char *s, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (o + 1 >= cap) return false;
        if (s[i] == '%' && i + 2 < len && isxdigit((unsigned char)s[i + 1]) && isxdigit((unsigned char)s[i + 2])) {
            char hex[3] = {s[i + 1], s[i + 2], 0};
            out[o++] = (char)strtol(hex, NULL, 16), i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = 0;
    return true;
}

static bool bench_parse_url(const char *url, const char *scheme, struct bench_url *u) {
    memset(u, 0, sizeof *u);
    size_t sl = strlen(scheme);
    if (strncmp(url, scheme, sl) != 0 || strncmp(url + sl, "://", 3) != 0) return false;
    const char *a = url + sl + 3, *end = a + strcspn(a, "/?");
    const char *at = NULL;
    for (const char *p = a; p < end; p++)
        if (*p == '@') at = p;
    if (at) {
        const char *colon = memchr(a, ':', (size_t)(at - a));
        if (!bench_decode(u->user, sizeof u->user, a, (size_t)((colon ? colon : at) - a))) return false;
        if (colon && !bench_decode(u->password, sizeof u->password, colon + 1, (size_t)(at - colon - 1))) return false;
        a = at + 1;
    }
    const char *colon = memchr(a, ':', (size_t)(end - a));
    if (colon) {
        char *pe;
        unsigned long port = strtoul(colon + 1, &pe, 10);
        if (pe != end || port == 0 || port > 65535) return false;
        u->port = (unsigned)port;
    }
    if (!bench_decode(u->host, sizeof u->host, a, (size_t)((colon ? colon : end) - a)) || !u->host[0]) return false;
    if (*end == '/') return bench_decode(u->path, sizeof u->path, end + 1, strcspn(end + 1, "?"));
    return true;
}

/* The URL with its password masked, for messages. */
static const char *bench_redact(const char *url) {
    static char out[1024];
    const char *a = strstr(url, "://"), *at, *colon;
    if (a && (at = strchr(a + 3, '@')) && (colon = memchr(a + 3, ':', (size_t)(at - a - 3))))
        snprintf(out, sizeof out, "%.*s:***%s", (int)(colon - url), url, at);
    else snprintf(out, sizeof out, "%s", url);
    return out;
}

#endif
