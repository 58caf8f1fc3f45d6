// sqlock reliability battery — the child processes of holder_reaper_suite.cpp (C03, C07, E05).
//
//   --mode row-hold  C03: takes a row lock (row_locker) on --lock, writes "acquired <token>" to
//                    --out, then releases it. Run with SQLOCK_FAILPOINTS=row.before_commit=stop, it
//                    stops itself inside the holding transaction, just before the COMMIT that ends
//                    the lease; once continued it writes what release() answered ("released" or
//                    "release <error type>: <message>") and "state <lease state>".
//                    With --spawn-child it starts `sleep 60` after the grant, before the release.
//   --mode churn     C07: one short life. Acquires --lock (table lock, waiting --wait-ms), writes the
//                    fenced resource once, then releases, or with --abandon leaves by _exit(0)
//                    without a release. Every step goes to --history (history.hpp), as the battery
//                    workers do, so K1, K3, K5, K7 and K9 read it. Exits 3 when it got no lock.
//   --mode late-grant C08: takes --lock with an auto-renewed table lock (--ttl-ms), holds it --hold-ms,
//                    then releases it. Run with SQLOCK_FAILPOINTS=acquire.after_commit_before_return=sleep:MS,
//                    the grant's answer comes MS late. Writes "granted <ms of validity left>", then
//                    "renewals <n>", "state <lease state>" and "released" or "release <error>".
//                    --shared: a shared lease of an rw_locker on that table locker (C09; PostgreSQL and SQLite
//                    rename the name's row after that failpoint, MariaDB in the grant's own transaction).
//   --mode reap      E05: one reaper pass (grace 0, no token purge, --batch rows per batch); writes
//                    "purged <n> batches <b> complete <0|1>" to --out. Run with
//                    SQLOCK_FAILPOINTS=reaper.between_batches=stop, the suite kills it between batches.
// Every line of --out is flushed as it is written: the suite reads it while the process is stopped.
#include "../proc_net.hpp"
#include "history.hpp"

#include <sqlock/fence.hpp>
#include <sqlock/sqlock.hpp>

#include <soci/postgresql/soci-postgresql.h>
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>
#include <CLI/CLI.hpp>

#include <spawn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <typeinfo>

extern char** environ;

namespace {

using namespace std::chrono_literals;
using sqlock_battery::event;
using sqlock_battery::history_writer;
using std::chrono::milliseconds;

struct config {
    std::string mode;
    std::string url;
    std::string tables = "sqlock";
    std::string lock;
    std::string out;
    long long ttl_ms = 2000;
    long long wait_ms = 10000;
    bool spawn_child = false;  // row-hold: start `sleep 60` while holding, as a program that runs a command would
    // churn
    int server_port = 0;  // > 0: print "ports <p>..." (this process's local ports to the server) before leaving
    std::string name = "c";
    std::string history;
    bool abandon = false;
    std::string resource_backend = "none";  // postgresql | sqlite3 | none
    std::string resource_connect;
    std::string resource_tables = "sqlock";
    // late-grant
    long long hold_ms = 3000;
    bool shared = false;
    // reap
    int batch = 1000;
};

/// "sqlock::<type>: <what>" for the library's errors (K9 reads the prefix).
std::string error_text(std::exception const& e) {
    std::string type;
    if (dynamic_cast<sqlock::stale_token const*>(&e)) type = "sqlock::stale_token";
    else if (dynamic_cast<sqlock::timeout const*>(&e)) type = "sqlock::timeout";
    else if (dynamic_cast<sqlock::lease_lost const*>(&e)) type = "sqlock::lease_lost";
    else if (dynamic_cast<sqlock::backend_unavailable const*>(&e)) type = "sqlock::backend_unavailable";
    else if (dynamic_cast<sqlock::in_doubt const*>(&e)) type = "sqlock::in_doubt";
    else if (dynamic_cast<sqlock::schema_missing const*>(&e)) type = "sqlock::schema_missing";
    else if (dynamic_cast<sqlock::backend_error const*>(&e)) type = "sqlock::backend_error";
    else if (dynamic_cast<sqlock::usage_error const*>(&e)) type = "sqlock::usage_error";
    else type = typeid(e).name();
    return type + ": " + e.what();
}

/// A line to --out, flushed at once.
class out_file {
public:
    explicit out_file(std::string const& path) : f_(std::fopen(path.c_str(), "a")) {
        if (f_ == nullptr) throw std::runtime_error("cannot open " + path + " for appending");
    }
    out_file(out_file const&) = delete;
    out_file& operator=(out_file const&) = delete;
    ~out_file() { std::fclose(f_); }
    void line(std::string const& s) {
        std::fputs((s + "\n").c_str(), f_);
        std::fflush(f_);
    }

private:
    std::FILE* f_;
};

int row_hold(config const& c) {
    out_file out(c.out);
    sqlock::store db(c.url, {.pool_size = 4, .table_prefix = c.tables, .lock_wait_timeout = 1s, .io_timeout = 3s});
    auto locks = sqlock::row_locker(db, {.ttl = milliseconds(c.ttl_ms)});
    sqlock::lease l = c.shared ? sqlock::rw_locker(locks).acquire_shared(c.lock, milliseconds(c.wait_ms))
                               : locks.acquire(c.lock, milliseconds(c.wait_ms));
    out.line("acquired " + std::to_string(l.token()));
    if (c.spawn_child) {
        std::string prog = "sleep", arg = "60";
        char* argv[] = {prog.data(), arg.data(), nullptr};
        pid_t pid = -1;
        if (int rc = ::posix_spawnp(&pid, "sleep", nullptr, nullptr, argv, environ); rc != 0)
            throw std::runtime_error("posix_spawnp sleep: " + std::string(std::strerror(rc)));
        out.line("child " + std::to_string(pid));
    }
    try {
        l.release();  // stops at row.before_commit
        out.line("released");
    } catch (std::exception const& e) {
        out.line("release " + error_text(e));
    }
    out.line(std::string("state ") + std::string(sqlock::to_string(l.state())));
    return 0;
}

int churn(config const& c) {
    history_writer h(c.history, c.name);
    sqlock::store db(c.url, {.pool_size = 2, .table_prefix = c.tables, .lock_wait_timeout = 1s, .io_timeout = 3s});
    std::string const owner = c.name + "." + std::to_string(::getpid());
    auto locks = sqlock::table_locker(db, {.ttl = milliseconds(c.ttl_ms), .owner = owner, .backoff_max = 100ms});
    // The resource's session opens before the acquire: a connect inside the critical section (tens of
    // ms where the server forks slowly, more under load) would eat into the 500 ms lease.
    bool const lite = c.resource_backend == "sqlite3";
    std::optional<soci::session> res;
    if (c.resource_backend != "none")
        res.emplace(lite ? *soci::factory_sqlite3() : *soci::factory_postgresql(), c.resource_connect);
    event base{.thread = 0, .lock = c.lock, .owner = owner};
    event inv = base;
    inv.op = "acquire";
    inv.type = "invoke";
    h.write(inv);
    std::optional<sqlock::lease> l;
    try {
        l.emplace(locks.acquire(c.lock, milliseconds(c.wait_ms)));
    } catch (std::exception const& e) {
        event f = base;
        f.op = "acquire";
        f.type = dynamic_cast<sqlock::in_doubt const*>(&e) ? "info" : "fail";
        f.error = error_text(e);
        h.write(f);
        return 3;  // no grant: the suite stops the churn early
    }
    base.token = l->token();
    {
        event ok = base;
        ok.op = "acquire";
        ok.type = "ok";
        ok.db_time_us = l->created_at().time_since_epoch().count();
        ok.expires_at_us = l->expires_at().time_since_epoch().count();
        ok.validity_ms = std::chrono::duration_cast<milliseconds>(l->remaining()).count();
        h.write(ok);
    }
    if (c.resource_backend != "none") {
        // The fenced write: fence check and the resource's serial number of the lock, one transaction
        // (as battery_worker.cpp writes it, so that K3 reads both alike).
        event w = base;
        w.op = "write_fenced";
        w.type = "invoke";
        h.write(w);
        std::string const values = c.resource_tables + "_values";
        try {
            sqlock::fence fence(lite ? sqlock::engine::sqlite : sqlock::engine::postgresql, c.resource_tables);
            *res << (lite ? "BEGIN IMMEDIATE" : "BEGIN");
            long long serial = 0;
            try {
                fence.check_and_set(*res, c.lock, l->token());
                *res << "INSERT INTO " + values +
                            " (lock_name, value) VALUES (:l, 1) ON CONFLICT (lock_name) DO "
                            "UPDATE SET value = " +
                            values + ".value + 1 RETURNING value",
                    soci::use(c.lock), soci::into(serial);
                *res << "COMMIT";
            } catch (...) {
                try {
                    *res << "ROLLBACK";
                } catch (...) {}
                throw;
            }
            w.type = "ok";
            w.value = serial;
        } catch (sqlock::stale_token const& e) {
            w.type = "fail";
            w.error = error_text(e);
        } catch (std::exception const& e) {
            w.type = "info";
            w.error = "resource: " + error_text(e);
        }
        h.write(w);
    }
    if (c.server_port > 0) {
        std::string line = "ports";
        // The suite looks for these among the server's sessions after this process is gone.
        for (int p : sqlock_test::own_ports_to(c.server_port)) line += " " + std::to_string(p);
        std::cout << line << std::endl;
    }
    if (c.abandon) {
        // Gone without a word: no release, no destructor, no atexit. The row stays until it expires.
        std::fflush(nullptr);
        ::_exit(0);
    }
    event rel = base;
    rel.op = "release";
    rel.type = "invoke";
    h.write(rel);
    try {
        l->release();
        rel.type = "ok";
    } catch (std::exception const& e) {
        rel.type = dynamic_cast<sqlock::lease_lost const*>(&e) ? "fail" : "info";
        rel.error = error_text(e);
    }
    h.write(rel);
    return 0;
}

int late_grant(config const& c) {
    out_file out(c.out);
    sqlock::store db(c.url, {.pool_size = 2, .table_prefix = c.tables, .lock_wait_timeout = 1s, .io_timeout = 3s});
    auto renewals = std::make_shared<std::atomic<int>>(0);
    auto locks = sqlock::table_locker(db, {.ttl = milliseconds(c.ttl_ms), .on_event = [renewals](auto const& ev) {
                                               if (ev.what == sqlock::lease_event::kind::renewed) ++*renewals;
                                           }});
    sqlock::lease l = c.shared ? sqlock::rw_locker(locks).acquire_shared(c.lock, milliseconds(c.wait_ms))
                               : locks.acquire(c.lock, milliseconds(c.wait_ms));
    out.line("granted " + std::to_string(std::chrono::duration_cast<milliseconds>(l.remaining()).count()));
    auto const until = std::chrono::steady_clock::now() + milliseconds(c.hold_ms);
    while (std::chrono::steady_clock::now() < until && l.state() != sqlock::lease_state::lost)
        std::this_thread::sleep_for(10ms);
    out.line("renewals " + std::to_string(renewals->load()));
    out.line(std::string("state ") + std::string(sqlock::to_string(l.state())));
    try {
        l.release();
        out.line("released");
    } catch (std::exception const& e) {
        out.line("release " + error_text(e));
    }
    return 0;
}

int reap(config const& c) {
    out_file out(c.out);
    sqlock::store db(c.url, {.pool_size = 2, .table_prefix = c.tables});
    sqlock::reaper r(db, {.grace = 0ms,
                          .batch_size = static_cast<std::size_t>(c.batch),
                          .token_horizon = std::nullopt,
                          .row_lock_warning = std::nullopt});
    out.line("start");
    auto res = r.reap_once();
    out.line("purged " + std::to_string(res.purged) + " batches " + std::to_string(res.batches) + " complete " +
             (res.complete ? "1" : "0"));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    config c;
    CLI::App app{"sqlock holder/reaper fault worker (holder_reaper_suite.cpp)"};
    app.add_option("--mode", c.mode)->required()->check(CLI::IsMember({"row-hold", "churn", "late-grant", "reap"}));
    app.add_option("--url", c.url, "lock database URL")->required();
    app.add_option("--tables", c.tables, "table prefix of the lock tables");
    app.add_option("--lock", c.lock, "lock name");
    app.add_option("--out", c.out, "row-hold, reap: where to write what happened (lines, appended)");
    app.add_option("--ttl-ms", c.ttl_ms)->check(CLI::Range(10LL, 86400000LL));
    app.add_option("--wait-ms", c.wait_ms)->check(CLI::Range(0LL, 86400000LL));
    app.add_option("--name", c.name, "churn: this process's name in the run (history `proc`)");
    app.add_option("--history", c.history, "churn: history file (JSON lines, appended)");
    app.add_flag("--spawn-child", c.spawn_child, "row-hold: start `sleep 60` while holding the lock");
    app.add_option("--server-port", c.server_port, "churn: print this process's local ports to that server port");
    app.add_flag("--abandon", c.abandon, "churn: _exit(0) after the fenced write, without a release");
    app.add_option("--resource-backend", c.resource_backend)->check(CLI::IsMember({"postgresql", "sqlite3", "none"}));
    app.add_option("--resource-connect", c.resource_connect, "SOCI connect string of the fenced resource");
    app.add_option("--resource-tables", c.resource_tables, "table prefix of the resource's fence table");
    app.add_option("--hold-ms", c.hold_ms, "late-grant: how long to hold the lock")->check(CLI::Range(0LL, 600000LL));
    app.add_flag("--shared", c.shared, "late-grant: a shared lease of a read-write lock");
    app.add_option("--batch", c.batch, "reap: rows per batch")->check(CLI::Range(1, 100000));
    CLI11_PARSE(app, argc, argv);
    try {
        if (c.mode == "row-hold") return row_hold(c);
        if (c.mode == "churn") return churn(c);
        if (c.mode == "late-grant") return late_grant(c);
        return reap(c);
    } catch (std::exception const& e) {
        std::cerr << "holder_worker " << c.mode << "[" << ::getpid() << "]: " << error_text(e) << "\n";
        return 2;
    }
}
