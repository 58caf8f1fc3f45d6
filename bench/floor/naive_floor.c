/*
 * sqlock-floor: the naive floor that sqlock's lock cycles are compared against.
 *
 * The plain statements a user would write to lock a name in a SQL table, sent by a small C
 * client: prepared once per connection, autocommit, the engines' durable defaults.
 *
 *   --mode insert (impl "floor"): table <prefix>_floor_locks(name, owner, expires_at)
 *     acquire  PostgreSQL INSERT ... VALUES ($1, $2, now() + interval '30 seconds') ON CONFLICT DO NOTHING
 *              MariaDB    INSERT IGNORE ... VALUES (?, ?, NOW(6) + INTERVAL 30 SECOND)  (READ COMMITTED)
 *              SQLite     INSERT OR IGNORE ... VALUES (?, ?, julianday('now') + 30.0 / 86400)  (WAL)
 *              one row inserted = acquired, none = busy (tried again at once)
 *     release  DELETE FROM ... WHERE name = ? AND owner = ?  (exactly one row, else an error)
 *   --mode rowlock (impl "floor-rowlock"): table <prefix>_floor_rows(name), rows inserted first
 *     BEGIN; SELECT name FROM ... WHERE name = ? FOR UPDATE; COMMIT  (PostgreSQL, MariaDB; a lock
 *     held by another client is waited for in the engine's queue, so busy stays 0)
 *
 * Each client is a thread with its own connection. --names distinct: client c cycles over its own
 * 64 names floor:<pid>:<c>:<i>; shared: all clients use floor:<pid>:shared. After a 1 s warm-up
 * (--warmup) it measures for --seconds: cycles, attempts, busy answers, the latency of each
 * successful cycle (start of the acquire attempt that succeeded to the return of its release:
 * p50/p99), the process's CPU (getrusage) per cycle, errors, and retries (MariaDB deadlocks,
 * errno 1213, and SQLITE_BUSY: the statement is sent again, not counted as an error). Prints one
 * JSON line (bench/results-format.md, suite "cycle") on stdout, then deletes its rows (--drop:
 * drops the tables). Exit 0; 1 if any error was counted; 2 on bad input or an unusable server.
 *
 *   sqlock-floor --engine postgresql --url postgresql://sqlock:sqlock@127.0.0.1:5432/sqlock \
 *                --clients 4 --names distinct --seconds 10 --mode insert
 *   sqlock-floor --engine mysql --url mysql://sqlock:sqlock@127.0.0.1:3306/sqlock --mode rowlock ...
 *   sqlock-floor --engine sqlite --url sqlite:/tmp/floor.db --sync normal ...
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_cycle.h"

#include <libpq-fe.h>
#include <mysql.h>
#include <pthread.h>
#include <sqlite3.h>
#include <unistd.h>

enum engine { PG, MY, SQ };
enum { NAMES = 64, MAX_CLIENTS = 1024, MY_DEADLOCK = 1213, MY_SERVER_GONE = 2006, MY_SERVER_LOST = 2013 };

static struct {
    enum engine engine;
    const char *engine_name, *url, *names, *sync, *prefix;
    bool rowlock, drop;
    int clients;
    double seconds, warmup;
    char table[128];
} opt = {.names = "distinct", .prefix = "bench", .clients = 1, .seconds = 5, .warmup = 1};

struct client {
    int id;
    char owner[64], names[NAMES][64];
    int nnames, failures_in_a_row;
    bool dead; /* connection lost, or nothing but failures: this client stops */
    PGconn *pg;
    MYSQL *my;
    MYSQL_STMT *my_acq, *my_rel;
    MYSQL_BIND my_bind[2];
    char my_name[64];
    unsigned long my_name_len, my_owner_len;
    sqlite3 *sq;
    sqlite3_stmt *sq_acq, *sq_rel;
    struct bench_counts c;
};

static void failed(struct client *cl, const char *what, const char *msg) {
    bench_count(&cl->c.errors);
    bench_warn("client %d: %s failed: %s", cl->id, what, msg);
}

/* ---- PostgreSQL (libpq) ---- */

/* A prepared statement (stmt) or plain SQL: rows affected or returned, -1 on error. */
static long pg_run(struct client *cl, const char *stmt, const char *sql, int n, const char *const *params) {
    PGresult *r = stmt ? PQexecPrepared(cl->pg, stmt, n, params, NULL, NULL, 0) : PQexec(cl->pg, sql);
    long rows = -1;
    if (PQresultStatus(r) == PGRES_COMMAND_OK) rows = atol(PQcmdTuples(r));
    else if (PQresultStatus(r) == PGRES_TUPLES_OK) rows = PQntuples(r);
    else failed(cl, stmt ? stmt : sql, PQresultErrorMessage(r));
    PQclear(r);
    if (PQstatus(cl->pg) == CONNECTION_BAD) cl->dead = true;
    return rows;
}

static int pg_acquire(struct client *cl, const char *name) {
    const char *p[2] = {name, cl->owner};
    long rows = pg_run(cl, "acquire", NULL, 2, p);
    return rows < 0 ? -1 : rows == 1;
}

static int pg_release(struct client *cl, const char *name) {
    const char *p[2] = {name, cl->owner};
    long rows = pg_run(cl, "release", NULL, 2, p);
    if (rows == 0) failed(cl, "release", "DELETE matched no row");
    return rows == 1 ? 0 : -1;
}

static int pg_row_acquire(struct client *cl, const char *name) {
    if (pg_run(cl, NULL, "BEGIN", 0, NULL) < 0) return -1;
    long rows = pg_run(cl, "lock_row", NULL, 1, &name);
    if (rows == 1) return 1;
    if (rows == 0) failed(cl, "SELECT ... FOR UPDATE", "no such row");
    pg_run(cl, NULL, "ROLLBACK", 0, NULL);
    return -1;
}

static int pg_row_release(struct client *cl, const char *name) {
    (void)name;
    return pg_run(cl, NULL, "COMMIT", 0, NULL) < 0 ? -1 : 0;
}

static void pg_exec_or_die(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) bench_die("PostgreSQL: %s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

static PGconn *pg_connect(void) {
    PGconn *c = PQconnectdb(opt.url);
    if (PQstatus(c) != CONNECTION_OK)
        bench_die(
            "cannot connect to PostgreSQL at %s: %s(is the server running, and the URL "
            "postgresql://user:password@host:port/db right? scripts/test-servers.sh start gives one)",
            bench_redact(opt.url), PQerrorMessage(c));
    pg_exec_or_die(c, "SET client_min_messages = warning");
    return c;
}

static void pg_prepare(struct client *cl, const char *stmt, const char *fmt) {
    char sql[512];
    snprintf(sql, sizeof sql, fmt, opt.table);
    PGresult *r = PQprepare(cl->pg, stmt, sql, 0, NULL);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) bench_die("PostgreSQL: preparing %s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

static void pg_prepare_all(struct client *cl) {
    if (opt.rowlock) {
        pg_prepare(cl, "lock_row", "SELECT name FROM %s WHERE name = $1 FOR UPDATE");
    } else {
        pg_prepare(cl, "acquire",
                   "INSERT INTO %s (name, owner, expires_at) "
                   "VALUES ($1, $2, now() + interval '30 seconds') ON CONFLICT DO NOTHING");
        pg_prepare(cl, "release", "DELETE FROM %s WHERE name = $1 AND owner = $2");
    }
}

/* ---- MariaDB (Connector/C, server-side prepared statements) ---- */

static void my_failed(struct client *cl, const char *what, unsigned err, const char *msg) {
    failed(cl, what, msg);
    if (err == MY_SERVER_GONE || err == MY_SERVER_LOST) cl->dead = true;
}

/* Execute st with name (and owner): rows affected or returned, -1 on error. A deadlock is retried
 * when the statement is its own transaction (autocommit). */
static long my_run(struct client *cl, MYSQL_STMT *st, const char *what, const char *name, bool autocommit) {
    snprintf(cl->my_name, sizeof cl->my_name, "%s", name);
    cl->my_name_len = strlen(cl->my_name);
    for (;;) {
        if (mysql_stmt_execute(st) == 0) {
            if (!mysql_stmt_field_count(st)) return (long)mysql_stmt_affected_rows(st);
            long rows = mysql_stmt_store_result(st) == 0 ? (long)mysql_stmt_num_rows(st) : -1;
            mysql_stmt_free_result(st);
            if (rows >= 0) return rows;
        } else if (mysql_stmt_errno(st) == MY_DEADLOCK && autocommit) {
            bench_count(&cl->c.retries);
            continue;
        }
        if (mysql_stmt_errno(st) != MY_DEADLOCK) my_failed(cl, what, mysql_stmt_errno(st), mysql_stmt_error(st));
        return -1;
    }
}

static int my_acquire(struct client *cl, const char *name) {
    long rows = my_run(cl, cl->my_acq, "INSERT IGNORE", name, true);
    return rows < 0 ? -1 : rows == 1;
}

static int my_release(struct client *cl, const char *name) {
    long rows = my_run(cl, cl->my_rel, "DELETE", name, true);
    if (rows == 0) failed(cl, "release", "DELETE matched no row");
    return rows == 1 ? 0 : -1;
}

static int my_row_acquire(struct client *cl, const char *name) {
    for (;;) {
        if (mysql_query(cl->my, "START TRANSACTION")) {
            my_failed(cl, "START TRANSACTION", mysql_errno(cl->my), mysql_error(cl->my));
            return -1;
        }
        long rows = my_run(cl, cl->my_acq, "SELECT ... FOR UPDATE", name, false);
        if (rows == 1) return 1;
        bool deadlock = rows < 0 && mysql_stmt_errno(cl->my_acq) == MY_DEADLOCK;
        if (rows == 0) failed(cl, "SELECT ... FOR UPDATE", "no such row");
        mysql_rollback(cl->my);
        if (!deadlock) return -1;
        bench_count(&cl->c.retries); /* the server rolled the transaction back: start it again */
    }
}

static int my_row_release(struct client *cl, const char *name) {
    (void)name;
    if (mysql_commit(cl->my) == 0) return 0;
    my_failed(cl, "COMMIT", mysql_errno(cl->my), mysql_error(cl->my));
    return -1;
}

static void my_exec_or_die(MYSQL *c, const char *sql) {
    if (mysql_query(c, sql)) bench_die("MariaDB: %s: %s", sql, mysql_error(c));
}

static MYSQL *my_connect(void) {
    struct bench_url u;
    if (!bench_parse_url(opt.url, "mysql", &u) || !u.path[0])
        bench_die("bad MariaDB URL '%s': use mysql://user:password@host:port/db", bench_redact(opt.url));
    MYSQL *c = mysql_init(NULL);
    if (!c || !mysql_real_connect(c, u.host, u.user, u.password, u.path, u.port ? u.port : 3306, NULL, 0))
        bench_die(
            "cannot connect to MariaDB at %s: %s (is the server running, and the URL "
            "mysql://user:password@host:port/db right? scripts/test-servers.sh start gives one)",
            bench_redact(opt.url), c ? mysql_error(c) : "out of memory");
    my_exec_or_die(c, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"); /* as sqlock's sessions */
    return c;
}

static MYSQL_STMT *my_prepare(struct client *cl, const char *fmt) {
    char sql[512];
    snprintf(sql, sizeof sql, fmt, opt.table);
    MYSQL_STMT *st = mysql_stmt_init(cl->my);
    if (!st || mysql_stmt_prepare(st, sql, strlen(sql)) || mysql_stmt_bind_param(st, cl->my_bind))
        bench_die("MariaDB: preparing %s: %s", sql, st ? mysql_stmt_error(st) : "out of memory");
    return st;
}

static void my_prepare_all(struct client *cl) {
    /* Parameters ? read the client's name and owner buffers. */
    cl->my_owner_len = strlen(cl->owner);
    cl->my_bind[0] = (MYSQL_BIND){.buffer_type = MYSQL_TYPE_STRING, .buffer = cl->my_name, .length = &cl->my_name_len};
    cl->my_bind[1] = (MYSQL_BIND){.buffer_type = MYSQL_TYPE_STRING, .buffer = cl->owner, .length = &cl->my_owner_len};
    if (opt.rowlock) {
        cl->my_acq = my_prepare(cl, "SELECT name FROM %s WHERE name = ? FOR UPDATE");
    } else {
        cl->my_acq =
            my_prepare(cl,
                       "INSERT IGNORE INTO %s (name, owner, expires_at) VALUES (?, ?, NOW(6) + INTERVAL 30 SECOND)");
        cl->my_rel = my_prepare(cl, "DELETE FROM %s WHERE name = ? AND owner = ?");
    }
}

/* ---- SQLite ---- */

/* Step st with name bound (owner is bound once): rows changed, -1 on error. SQLITE_BUSY (which
 * busy_timeout does not always absorb) is retried. */
static long sq_run(struct client *cl, sqlite3_stmt *st, const char *name) {
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    for (;;) {
        int rc = sqlite3_step(st);
        long rows = sqlite3_changes(cl->sq);
        if (rc != SQLITE_DONE && rc != SQLITE_BUSY) failed(cl, sqlite3_sql(st), sqlite3_errmsg(cl->sq));
        sqlite3_reset(st);
        if (rc == SQLITE_DONE) return rows;
        if (rc != SQLITE_BUSY) return -1;
        bench_count(&cl->c.retries);
    }
}

static int sq_acquire(struct client *cl, const char *name) {
    long rows = sq_run(cl, cl->sq_acq, name);
    return rows < 0 ? -1 : rows == 1;
}

static int sq_release(struct client *cl, const char *name) {
    long rows = sq_run(cl, cl->sq_rel, name);
    if (rows == 0) failed(cl, "release", "DELETE matched no row");
    return rows == 1 ? 0 : -1;
}

static void sq_exec_or_die(sqlite3 *c, const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(c, sql, NULL, NULL, &err) != SQLITE_OK) bench_die("SQLite: %s: %s", sql, err);
}

static sqlite3 *sq_connect(void) {
    const char *path = opt.url + strlen("sqlite:");
    if (strncmp(opt.url, "sqlite:", 7) != 0 || !*path)
        bench_die("bad SQLite URL '%s': use sqlite:/path/file.db (or sqlite:///path/file.db)", opt.url);
    if (strncmp(path, "//", 2) == 0) path += 2;
    sqlite3 *c = NULL;
    if (sqlite3_open_v2(path, &c, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK)
        bench_die("cannot open the SQLite file %s: %s (does its directory exist and is it writable?)", path,
                  c ? sqlite3_errmsg(c) : "out of memory");
    sqlite3_busy_timeout(c, 5000);
    sq_exec_or_die(c, "PRAGMA journal_mode = WAL");
    sq_exec_or_die(c, strcmp(opt.sync, "normal") ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL");
    return c;
}

static sqlite3_stmt *sq_prepare(struct client *cl, const char *fmt) {
    char sql[512];
    snprintf(sql, sizeof sql, fmt, opt.table);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(cl->sq, sql, -1, &st, NULL) != SQLITE_OK)
        bench_die("SQLite: preparing %s: %s", sql, sqlite3_errmsg(cl->sq));
    sqlite3_bind_text(st, 2, cl->owner, -1, SQLITE_STATIC);
    return st;
}

/* ---- setup, the clients, clean-up ---- */

struct ops {
    int (*acquire)(struct client *, const char *); /* 1 acquired, 0 busy, -1 error */
    int (*release)(struct client *, const char *); /* 0 released, -1 error */
};
static struct ops ops;

static void *client_main(void *arg) {
    struct client *cl = arg;
    if (opt.engine == MY) mysql_thread_init();
    for (unsigned i = 0; !bench_stopping() && !cl->dead; i++) {
        const char *name = cl->names[i % (unsigned)cl->nnames];
        double start = bench_now_us();
        bench_count(&cl->c.attempts);
        int got = ops.acquire(cl, name);
        if (got == 0) bench_count(&cl->c.busy);
        if (got == 1 && ops.release(cl, name) == 0) {
            bench_cycle_done(&cl->c, start);
            cl->failures_in_a_row = 0;
        } else if (got != 0 && ++cl->failures_in_a_row >= 100) {
            bench_warn("client %d: 100 failures in a row, stopping it", cl->id);
            cl->dead = true;
        }
    }
    if (cl->dead) bench_warn("client %d stopped early: see the errors above", cl->id);
    if (opt.engine == MY) mysql_thread_end();
    return NULL;
}

/* Setup and clean-up statements, on the admin connection (client 0's). */
static void admin_exec(struct client *admin, const char *sql) {
    if (opt.engine == PG) pg_exec_or_die(admin->pg, sql);
    else if (opt.engine == MY) my_exec_or_die(admin->my, sql);
    else sq_exec_or_die(admin->sq, sql);
}

static void create_tables(struct client *admin, struct client *cls, int nclients) {
    char sql[512];
    static const char *types[3][3] = {/* name, owner, expires_at */
                                      {"text", "text", "timestamptz"},
                                      {"VARCHAR(255)", "VARCHAR(255)", "DATETIME(6)"},
                                      {"TEXT", "TEXT", "REAL"}};
    const char **t = types[opt.engine];
    if (opt.rowlock)
        snprintf(sql, sizeof sql, "CREATE TABLE IF NOT EXISTS %s (name %s NOT NULL PRIMARY KEY)", opt.table, t[0]);
    else
        snprintf(
            sql, sizeof sql,
            "CREATE TABLE IF NOT EXISTS %s (name %s NOT NULL PRIMARY KEY, owner %s NOT NULL, expires_at %s NOT NULL)",
            opt.table, t[0], t[1], t[2]);
    admin_exec(admin, sql);
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE name LIKE 'floor:%d:%%'", opt.table, (int)getpid());
    admin_exec(admin, sql);
    if (!opt.rowlock) return;
    /* The rows to lock: names are floor:<pid>:... (no quotes), one transaction. */
    admin_exec(admin, opt.engine == MY ? "START TRANSACTION" : "BEGIN");
    for (int c = 0; c < nclients; c++)
        for (int i = 0; i < cls[c].nnames; i++) {
            snprintf(sql, sizeof sql, "INSERT INTO %s (name) VALUES ('%s')", opt.table, cls[c].names[i]);
            admin_exec(admin, sql);
        }
    admin_exec(admin, "COMMIT");
}

static void clean_up(struct client *admin) {
    char sql[256];
    if (opt.drop) snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", opt.table);
    else snprintf(sql, sizeof sql, "DELETE FROM %s WHERE name LIKE 'floor:%d:%%'", opt.table, (int)getpid());
    admin_exec(admin, sql);
}

static void usage(void) {
    fprintf(stderr,
            "usage: sqlock-floor --engine postgresql|mysql|sqlite --url URL [--clients N] [--names distinct|shared]\n"
            "                    [--seconds S] [--warmup S] [--mode insert|rowlock] [--sync full|normal]\n"
            "                    [--table-prefix P] [--drop]\n"
            "  URL: postgresql://user:pass@host:port/db, mysql://user:pass@host:port/db, sqlite:/path/file.db\n"
            "  Prints one JSON line (bench/results-format.md) on stdout.\n");
}

#define VALUE_OPTIONS " --engine --url --clients --names --seconds --warmup --mode --sync --table-prefix "

static void parse_args(int argc, char **argv) {
    const char *mode = "insert";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        char key[64];
        snprintf(key, sizeof key, " %s ", a);
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) usage(), exit(0);
        if (!strcmp(a, "--drop")) {
            opt.drop = true;
            continue;
        }
        if (strncmp(a, "--", 2) || !strstr(VALUE_OPTIONS, key)) usage(), bench_die("unknown option '%s'", a);
        if (i + 1 == argc) bench_die("%s needs a value (see --help)", a);
        v = argv[++i];
        if (!strcmp(a, "--engine")) opt.engine_name = v;
        else if (!strcmp(a, "--url")) opt.url = v;
        else if (!strcmp(a, "--clients")) opt.clients = (int)bench_arg_long(a, v, 1, MAX_CLIENTS);
        else if (!strcmp(a, "--names")) opt.names = v;
        else if (!strcmp(a, "--seconds")) opt.seconds = bench_arg_double(a, v, 0.1, 86400);
        else if (!strcmp(a, "--warmup")) opt.warmup = bench_arg_double(a, v, 0, 3600);
        else if (!strcmp(a, "--mode")) mode = v;
        else if (!strcmp(a, "--sync")) opt.sync = v;
        else opt.prefix = v; /* --table-prefix */
    }
    if (!opt.engine_name || !opt.url) usage(), bench_die("--engine and --url are required");
    if (!strcmp(opt.engine_name, "postgresql")) opt.engine = PG;
    else if (!strcmp(opt.engine_name, "mysql") || !strcmp(opt.engine_name, "mariadb"))
        opt.engine = MY, opt.engine_name = "mysql";
    else if (!strcmp(opt.engine_name, "sqlite")) opt.engine = SQ;
    else bench_die("unknown engine '%s': use postgresql, mysql or sqlite", opt.engine_name);
    static const char *schemes[3] = {"postgresql:", "mysql:", "sqlite:"};
    if (strncmp(opt.url, schemes[opt.engine], strlen(schemes[opt.engine])) &&
        !(opt.engine == PG && !strncmp(opt.url, "postgres:", 9)))
        bench_die("--engine %s needs a URL starting with %s (got '%s')", opt.engine_name, schemes[opt.engine],
                  bench_redact(opt.url));
    if (strcmp(opt.names, "distinct") && strcmp(opt.names, "shared"))
        bench_die("--names must be distinct or shared (got '%s')", opt.names);
    if (strcmp(mode, "insert") && strcmp(mode, "rowlock"))
        bench_die("--mode must be insert or rowlock (got '%s')", mode);
    opt.rowlock = !strcmp(mode, "rowlock");
    if (opt.rowlock && opt.engine == SQ)
        bench_die("--mode rowlock: SQLite has no row locks (no SELECT ... FOR UPDATE); use --mode insert");
    if (opt.sync && opt.engine != SQ)
        bench_die("--sync is for SQLite only (PostgreSQL and MariaDB keep their durable defaults)");
    if (opt.engine == SQ && !opt.sync) opt.sync = "full";
    if (opt.sync && strcmp(opt.sync, "full") && strcmp(opt.sync, "normal"))
        bench_die("--sync must be full or normal (got '%s')", opt.sync);
    if (!*opt.prefix || strlen(opt.prefix) > 64 ||
        strspn(opt.prefix, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(opt.prefix))
        bench_die("--table-prefix must be 1-64 characters of a-z, 0-9 and _ (got '%s')", opt.prefix);
    snprintf(opt.table, sizeof opt.table, "%s_floor_%s", opt.prefix, opt.rowlock ? "rows" : "locks");
}

int main(int argc, char **argv) {
    bench_prog = "sqlock-floor";
    parse_args(argc, argv);
    if (opt.engine == MY && mysql_library_init(0, NULL, NULL)) bench_die("MariaDB client library failed to initialise");

    struct client *cls = calloc((size_t)opt.clients, sizeof *cls);
    if (!cls) bench_die("out of memory");
    int pid = (int)getpid();
    bool shared = !strcmp(opt.names, "shared");
    for (int c = 0; c < opt.clients; c++) {
        struct client *cl = &cls[c];
        cl->id = c;
        snprintf(cl->owner, sizeof cl->owner, "floor:%d:owner%d", pid, c);
        cl->nnames = shared ? 1 : NAMES;
        for (int i = 0; i < cl->nnames; i++)
            if (shared) snprintf(cl->names[i], sizeof cl->names[i], "floor:%d:shared", pid);
            else snprintf(cl->names[i], sizeof cl->names[i], "floor:%d:%d:%d", pid, c, i);
    }

    /* Connect every client (client 0's connection also runs setup and clean-up), then prepare. */
    for (int c = 0; c < opt.clients; c++) {
        if (opt.engine == PG) cls[c].pg = pg_connect();
        else if (opt.engine == MY) cls[c].my = my_connect();
        else cls[c].sq = sq_connect();
        if (c == 0) create_tables(&cls[0], cls, shared ? 1 : opt.clients); /* shared: one name */
        if (opt.engine == PG) pg_prepare_all(&cls[c]);
        else if (opt.engine == MY) my_prepare_all(&cls[c]);
        else {
            cls[c].sq_acq = sq_prepare(&cls[c],
                                       "INSERT OR IGNORE INTO %s (name, owner, expires_at) "
                                       "VALUES (?1, ?2, julianday('now') + 30.0 / 86400)");
            cls[c].sq_rel = sq_prepare(&cls[c], "DELETE FROM %s WHERE name = ?1 AND owner = ?2");
        }
    }
    static const struct ops table[3][2] = {{{pg_acquire, pg_release}, {pg_row_acquire, pg_row_release}},
                                           {{my_acquire, my_release}, {my_row_acquire, my_row_release}},
                                           {{sq_acquire, sq_release}, {NULL, NULL}}};
    ops = table[opt.engine][opt.rowlock];

    pthread_t *th = calloc((size_t)opt.clients, sizeof *th);
    if (!th) bench_die("out of memory");
    for (int c = 0; c < opt.clients; c++)
        if (pthread_create(&th[c], NULL, client_main, &cls[c])) bench_die("cannot start client thread %d", c);
    struct bench_line line = {.engine = opt.engine_name,
                              .impl = opt.rowlock ? "floor-rowlock" : "floor",
                              .variant = "",
                              .names = opt.names,
                              .clients = opt.clients};
    char variant[32];
    if (opt.sync) snprintf(variant, sizeof variant, "sync=%s", opt.sync), line.variant = variant;
    line.seconds = bench_window(opt.warmup, opt.seconds, &line.cpu_us);
    for (int c = 0; c < opt.clients; c++) {
        pthread_join(th[c], NULL);
        bench_merge(&line.all, &cls[c].c);
    }

    bench_print(&line);
    clean_up(&cls[0]);
    for (int c = 0; c < opt.clients; c++) {
        if (opt.engine == PG) PQfinish(cls[c].pg);
        else if (opt.engine == MY) {
            mysql_stmt_close(cls[c].my_acq);
            if (cls[c].my_rel) mysql_stmt_close(cls[c].my_rel);
            mysql_close(cls[c].my);
        } else {
            sqlite3_finalize(cls[c].sq_acq), sqlite3_finalize(cls[c].sq_rel);
            sqlite3_close(cls[c].sq);
        }
    }
    if (opt.engine == MY) mysql_library_end();
    for (int c = 0; c < opt.clients; c++) free(cls[c].c.lat_us);
    free(line.all.lat_us), free(cls), free(th);
    if (line.all.errors)
        fprintf(stderr, "sqlock-floor: %llu errors (see above)\n", (unsigned long long)line.all.errors);
    return line.all.errors ? 1 : 0;
}
