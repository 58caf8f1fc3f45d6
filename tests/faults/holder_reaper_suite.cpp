// sqlock reliability battery — holder-side faults and the reaper (issue 13, plan §4.C03, §4.C07,
// §4.E02, §4.E04, §4.E05). Each test has tables of its own (a random table prefix, dropped afterwards).
//
//   C03_StoppedRowHolderInOpenTransaction  a row-lock holder SIGSTOPped inside its open
//       transaction (failpoint row.before_commit=stop: just before the COMMIT of its release).
//       Try and blocking acquirers (1 s) all come back within their wait plus a bound, as busy or
//       timeout; none gets the lock while the holder's transaction lives. PostgreSQL/MariaDB: the
//       server's idle-in-transaction limit the row lock sets from its TTL ends the stopped session,
//       and a waiter gets the lock within that limit plus slack; after SIGCONT the stopped holder's
//       release reports the lease lost, never released, and the new holder still holds. MariaDB:
//       after the waiters' lock-wait timeouts (1205) none of their connections has a transaction
//       open (information_schema.innodb_trx). SQLite: the stopped process holds the write lock of
//       the whole file; everyone gets busy/timeout, a table-lock holder of another name loses its
//       lease at its local deadline, and only the holder's death (kill -9) frees the file.
//   C07_RowHolderThatLeftAChildDiesLockFreesAtOnce  a row-lock holder that started a program (sleep)
//       is killed: the program inherited none of its connections, and the lock is free at once, not
//       when the program ends or the TTL runs out (MariaDB's sockets were not close-on-exec).
//   C07_ForkExecChurn  short processes, 4 at a time: acquire, one fenced write, then half release
//       and half _exit(0) without a release. K1, K3, K5, K6 (an abandoned lock is taken over within
//       TTL + backoff + slack), K7, K8, K9 over the recorded history and the database's audit; on
//       the servers, their connections return to the steady state once the processes are gone.
//   C08_LateGrantIsRenewedBeforeItRunsOut  a grant whose answer came 1.4 s late (failpoint) has less than
//       a third of its 2 s TTL left: its first renewal is due at once, and the lease is kept and released.
//   C09_LateSharedGrantIsValidFromItsGrant  the same for a read-write lock's shared lease: its validity
//       runs from the grant's request, not from the rename into the reader's row (which, on PostgreSQL and
//       SQLite, commits without waiting for the disk); a whole TTL from the rename would be unsafe.
//   C10_RowCreatedUnderAWaiterIsWaitedFor  a row-lock waiter saw no row for its name and stopped before
//       creating it (failpoint row.before_ensure=stop); meanwhile another client created the row and holds
//       it. The waiter's INSERT then waits in the engine's unique check for the holder's transaction and gives
//       up (lock wait); that is "the row exists and is held", not an error: the waiter goes on waiting in
//       the lock statement and gets the lock when the holder releases (PostgreSQL, MariaDB; on SQLite the lock
//       statement creates the row itself: the waiter never stops there). Found by the soak tier (issue 39) as an
//       untyped backend_error.
//   E04_LeaseTimesComeFromTheStatementsClock  the database's time a lease is dated by is read
//       when the statement acts, not at the start of its statement or transaction: a row-lock
//       waiter that queued 1.5 s is dated after the previous holder's release (its lease is not
//       shorter than the TTL), a row lock held in one transaction for seconds renews to now + TTL,
//       table-lock grants have expires_at - grant time = TTL, and the reaper's delete uses the
//       database's current time. (A caller's transaction or session settings can't reach the library's
//       statements: it takes no connection from the caller and opens its own, in autocommit.)
//   E02_TwoReapersWithSkewedClocks  two sqlock-reaper daemons on the same tables, their wall clocks
//       60 s ahead and 60 s behind (PostgreSQL, MariaDB; on SQLite both on the host's clock), while 8
//       threads take, renew, release and abandon leases: no reaper deletes a live lease, the purged
//       counts they print add up to the audit's deletes, no expired row outlives two passes, no error
//       surfaces, both stop cleanly on SIGTERM; K1.
//   E05_ReaperKilledMidPurge  a reaper killed (kill -9) between batches of a 10,000-row purge has
//       deleted whole batches, the oldest rows first, and no live row; the next pass completes.
//       With no reaper at all, acquire takes over expired rows (takeover-on-acquire).
#include "audit.hpp"
#include "checkers.hpp"
#include "history.hpp"
#include "marked_sessions.hpp"
#include "proc_net.hpp"
#include "skewed_process.hpp"
#include "soak.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <thread>

namespace {

using namespace sqlock_test;
using namespace std::chrono_literals;
using sqlock::lease;
using sqlock::lease_state;
using std::chrono::duration_cast;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

#ifndef SQLOCK_HOLDER_WORKER
#error "SQLOCK_HOLDER_WORKER must name the holder_worker executable"
#endif

long long ms_since(steady::time_point t) { return duration_cast<milliseconds>(steady::now() - t).count(); }

/// Lines of a file (empty if it cannot be read).
std::vector<std::string> lines_of(fs::path const& p) {
    std::vector<std::string> out;
    std::ifstream in(p);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

/// A child process of the suite: started with posix_spawn, killed and reaped if still there at
/// scope exit.
class child {
public:
    /// `inherit` false: `extra_env` is the child's whole environment.
    child(std::vector<std::string> args, std::vector<std::string> extra_env, fs::path const& log_base,
          bool inherit = true) {
        std::vector<std::string> env;
        for (char** e = environ; inherit && *e != nullptr; ++e)
            if (std::string_view(*e).rfind("SQLOCK_FAILPOINTS=", 0) != 0) env.emplace_back(*e);
        for (auto& e : extra_env) env.push_back(std::move(e));
        spawn_file_actions fa;
        err_ = log_base.string() + ".err";
        fa.capture_to_files(log_base.string() + ".out", err_);
        pid_ = spawn_process(std::move(args), env, fa.get());
    }
    child(child const&) = delete;
    child& operator=(child const&) = delete;
    ~child() {
        if (pid_ > 0) {
            ::kill(pid_, SIGCONT);
            ::kill(pid_, SIGKILL);
            int st = 0;
            ::waitpid(pid_, &st, 0);
        }
    }

    pid_t pid() const { return pid_; }
    std::string stderr_text() const { return slurp(err_); }

    /// Waits until the child stops (SIGSTOP from a failpoint) or ends; true if it stopped.
    bool wait_stopped(milliseconds limit) {
        auto const deadline = steady::now() + limit;
        while (steady::now() < deadline) {
            int st = 0;
            pid_t r = ::waitpid(pid_, &st, WNOHANG | WUNTRACED);
            if (r == pid_) {
                if (WIFSTOPPED(st)) return true;
                status_ = st;
                pid_ = -1;
                return false;
            }
            std::this_thread::sleep_for(5ms);
        }
        return false;
    }

    /// Waits for the child's end; its status, or nullopt when it is still running after `limit`.
    std::optional<int> wait_exit(milliseconds limit) {
        if (pid_ <= 0) return status_;
        auto const deadline = steady::now() + limit;
        while (steady::now() < deadline) {
            int st = 0;
            pid_t r = ::waitpid(pid_, &st, WNOHANG);
            if (r == pid_) {
                pid_ = -1;
                status_ = st;
                return st;
            }
            std::this_thread::sleep_for(5ms);
        }
        return std::nullopt;
    }

    void signal(int sig) const {
        if (pid_ > 0) ::kill(pid_, sig);
    }

private:
    pid_t pid_ = -1;
    std::optional<int> status_;
    std::string err_;
};

class HolderReaper : public marked_sessions_fixture {
protected:
    void open_store() override {
        tables_ = "hr" + random_hex(10);
        db_.emplace(url_, sqlock::store_options{.create_schema = true, .table_prefix = tables_});
    }

    void TearDown() override {
        marked_sessions_fixture::TearDown();  // the churn's MariaDB user
        if (!raw_) return;
        try {
            drop_tables(*raw_, e_, tables_);
            if (res_raw_) drop_tables(*res_raw_, engine::postgresql, res_tables_);
        } catch (std::exception const& ex) {
            ADD_FAILURE() << "could not drop the test's tables " << tables_ << "_*: " << ex.what();
        }
    }

    static void drop_tables(soci::session& s, engine e, std::string const& prefix) {
        if (e == engine::sqlite) return;  // the file goes with the temp dir
        if (e == engine::postgresql) s << "SET client_min_messages = warning";
        sqlock_battery::drop_audit(s, e, prefix);
        for (auto const* t : {"_locks", "_tokens", "_fences", "_rows", "_values"})
            s << "DROP TABLE IF EXISTS " + prefix + t;
        if (e == engine::mysql)
            for (auto const* r : {"_acquire_v2", "_acquire_shared", "_acquire", "_renew"})
                s << "DROP PROCEDURE IF EXISTS " + prefix + r;
    }

    fs::path work() {
        if (!work_) work_.emplace();
        return work_->path();
    }

    std::string worker_url() const { return url_; }

    int server_port() const {
        auto p = parse_server_url(url_);
        return p.port.empty() ? (e_ == engine::mysql ? 3306 : 5432) : std::stoi(p.port);
    }

    /// C08, C09: holder_worker --mode late-grant (with --shared: a read-write lock's shared lease) on lock `tag`,
    /// its grant's answer 1.4 s late (failpoint) and a 2 s TTL. Asserts what it wrote: less than a third of the TTL
    /// left at the grant (`why_not`: what more would mean), then renewed, held and released.
    void late_grant(std::string const& tag, bool shared, std::string const& why_not) {
        auto const dir = work() / tag;
        fs::create_directories(dir);
        milliseconds const ttl = 2000ms;
        std::vector<std::string> args{SQLOCK_HOLDER_WORKER,
                                      "--mode",
                                      "late-grant",
                                      "--url",
                                      worker_url(),
                                      "--tables",
                                      tables_,
                                      "--lock",
                                      n(tag),
                                      "--ttl-ms",
                                      std::to_string(ttl.count()),
                                      "--hold-ms",
                                      "3000",
                                      "--out",
                                      (dir / "holder.out").string()};
        if (shared) args.emplace_back("--shared");
        child holder(args, {"SQLOCK_FAILPOINTS=acquire.after_commit_before_return=sleep:1400"}, dir / "holder");
        auto const status = holder.wait_exit(60s);
        ASSERT_TRUE(status.has_value()) << "the holder did not end within 60 s: " << holder.stderr_text();
        auto const out = lines_of(dir / "holder.out");
        ASSERT_EQ(out.size(), 4u) << "stdout lines: " << out.size() << "; stderr: " << holder.stderr_text();
        ASSERT_EQ(out[0].rfind("granted ", 0), 0u) << out[0];
        long long const left_ms = std::stoll(out[0].substr(8));
        ASSERT_LT(left_ms, ttl.count() / 3) << "the lease came with " << left_ms << " ms left: " << why_not;
        EXPECT_EQ(out[2], "state held") << "renewals: " << out[1];
        EXPECT_EQ(out[3], "released") << out[1];
        EXPECT_NE(out[1], "renewals 0");
    }

    std::string tables_;
    std::optional<temp_dir> work_;
    std::string res_tables_;
    std::unique_ptr<soci::session> res_raw_;
};

// ------------------------------------------------------------------------------------------ C03

/// What one waiter call answered.
struct call_result {
    bool is_try = false;
    std::string outcome;  // "busy", "timeout", "granted", or the error's type and message
    long long took_ms = 0;
    steady::time_point done;
};

/// Waiter threads on one lock: `tries` loop try_acquire, `blockers` loop acquire(wait). Each call is
/// recorded. The first grant is kept (not released) in `winner`; every thread stops then, or when
/// paused. Used by C03.
class waiter_pool {
public:
    waiter_pool(sqlock::locker locks, std::string name, int tries, int blockers, milliseconds wait)
        : locks_(std::move(locks)), name_(std::move(name)), wait_(wait) {
        for (int k = 0; k < tries + blockers; ++k) threads_.emplace_back([this, k, tries] { run(k < tries); });
    }
    ~waiter_pool() {
        // On a failure path a thread may still wait behind our own grant: give it back first.
        {
            std::lock_guard l(m_);
            done_ = true;
            cv_.notify_all();
        }
        winner_.reset();
        stop();
    }

    /// Let the threads call (again).
    void resume() {
        std::lock_guard l(m_);
        running_ = true;
        cv_.notify_all();
    }

    /// Make the threads idle after their current call; false if a call is still running after `limit`.
    bool pause(milliseconds limit) {
        std::unique_lock l(m_);
        running_ = false;
        cv_.notify_all();
        return cv_.wait_for(l, limit, [&] { return busy_ == 0; });
    }

    void stop() {
        {
            std::lock_guard l(m_);
            done_ = true;
            cv_.notify_all();
        }
        for (auto& t : threads_)
            if (t.joinable()) t.join();
    }

    /// Waits up to `limit` for a grant.
    bool wait_grant(milliseconds limit) {
        std::unique_lock l(m_);
        return cv_.wait_for(l, limit, [&] { return winner_.has_value(); });
    }

    std::vector<call_result> results() {
        std::lock_guard l(m_);
        return results_;
    }
    std::optional<lease>& winner() { return winner_; }
    steady::time_point granted_at() {
        std::lock_guard l(m_);
        return granted_at_;
    }

private:
    void run(bool is_try) {
        for (;;) {
            {
                std::unique_lock l(m_);
                cv_.wait(l, [&] { return done_ || (running_ && !winner_); });
                if (done_) return;
                ++busy_;
            }
            call_result r{.is_try = is_try};
            std::optional<lease> got;
            auto const t0 = steady::now();
            try {
                if (is_try) {
                    got = locks_.try_acquire(name_);
                    r.outcome = got ? "granted" : "busy";
                } else {
                    got.emplace(locks_.acquire(name_, wait_));
                    r.outcome = "granted";
                }
            } catch (sqlock::timeout const&) {
                r.outcome = "timeout";
            } catch (std::exception const& e) {
                r.outcome = describe(e);
            }
            r.done = steady::now();
            r.took_ms = duration_cast<milliseconds>(r.done - t0).count();
            std::lock_guard l(m_);
            results_.push_back(r);
            if (got && !winner_ && !done_) {
                winner_ = std::move(got);
                granted_at_ = r.done;
            }
            --busy_;
            cv_.notify_all();
            if (got) got.reset();  // a second grant (a violation, reported from results) is given back
            if (is_try) std::this_thread::sleep_for(10ms);  // tries poll; they need not hammer the server
        }
    }

    sqlock::locker locks_;
    std::string name_;
    milliseconds wait_;
    std::mutex m_;
    std::condition_variable cv_;
    bool running_ = false;
    bool done_ = false;
    int busy_ = 0;
    std::vector<call_result> results_;
    std::optional<lease> winner_;
    steady::time_point granted_at_{};
    std::vector<std::thread> threads_;
};

TEST_P(HolderReaper, C03_StoppedRowHolderInOpenTransaction) {
    // The holder's TTL is the server's idle-in-transaction limit (PostgreSQL
    // idle_in_transaction_session_timeout, MariaDB idle_transaction_timeout, both set by the row lock
    // from its TTL); it is longer than a waiter's wait + bound, so a waiter that the library did not
    // bound would wait for the server to end the holder and be caught.
    milliseconds const holder_ttl = 6s;
    milliseconds const wait = 1s;
    milliseconds const call_bound = wait + 3s;  // a waiter's call returns within its wait + this slack
    std::string const name = n("c03");
    auto const dir = work();
    // The waiters' store: a short engine wait and I/O bound, a connection for every thread and lease.
    sqlock::store waiters_db(url_,
                             {.pool_size = 12, .table_prefix = tables_, .lock_wait_timeout = 1s, .io_timeout = 2s});
    auto row_locks = sqlock::row_locker(waiters_db, {.ttl = 2s});
    auto table_locks = sqlock::table_locker(waiters_db, {.ttl = 1s});
    // SQLite: a table lock of another name, held from before the stop, must be lost at its local
    // deadline: its renewals cannot write while the stopped process holds the file.
    std::optional<lease> other;
    if (e_ == engine::sqlite) other.emplace(table_locks.acquire(n("c03-other"), 10s));
    // Declared before the holder, so that on a failure path the holder dies before the waiters are joined.
    std::optional<waiter_pool> pool;

    child holder({SQLOCK_HOLDER_WORKER, "--mode", "row-hold", "--url", worker_url(), "--tables", tables_, "--lock",
                  name, "--ttl-ms", std::to_string(holder_ttl.count()), "--wait-ms", "10000", "--out",
                  (dir / "holder.out").string()},
                 {"SQLOCK_FAILPOINTS=row.before_commit=stop"}, dir / "holder");
    ASSERT_TRUE(holder.wait_stopped(30s)) << "the holder never stopped at row.before_commit: " << holder.stderr_text();
    auto const stopped_at = steady::now();
    auto out = lines_of(dir / "holder.out");
    ASSERT_FALSE(out.empty()) << "the holder stopped before it reported its grant";
    ASSERT_EQ(out[0].rfind("acquired ", 0), 0u) << out[0];
    long long const holder_token = std::stoll(out[0].substr(9));

    if (e_ == engine::sqlite) {
        ASSERT_TRUE(eventually([&] { return other->stop_token().stop_requested(); }, 8s))
            << "a table lease of another name (TTL 1 s) was still believed held 8 s into the stop, though no "
               "renewal could write: its holder must report it lost at its local deadline";
        EXPECT_EQ(other->state(), lease_state::lost);
        // On a thread of its own, so that an unbounded wait fails the test instead of hanging it.
        auto try_other = std::async(std::launch::async, [&] { return table_locks.try_acquire(n("c03-third")); });
        if (try_other.wait_for(call_bound) != std::future_status::ready) {
            holder.signal(SIGKILL);  // frees the file, so that the try comes back
            try {
                (void)try_other.get();
            } catch (std::exception const&) {  // whatever it answers late, the test failed already
            }
            FAIL() << "a try of another name had not come back after " << call_bound.count() << " ms while a stopped "
                   << "process held the SQLite write lock: its busy wait is not bounded";
        }
        std::optional<lease> got;
        EXPECT_NO_THROW(got = try_other.get());
        EXPECT_FALSE(got.has_value()) << "a table lock was granted while a stopped process held the SQLite write lock";
    }

    pool.emplace(row_locks, name, 3, 3, wait);
    // Phase A: the holder's transaction lives; everyone must come back busy or timed out, promptly.
    pool->resume();
    std::this_thread::sleep_for(2500ms);
    ASSERT_TRUE(pool->pause(call_bound + wait))
        << "a waiter's call had not returned " << (call_bound + wait).count() << " ms after the waiters were told "
        << "to stop, behind a stopped holder: its wait is not bounded";
    auto const phase_a = pool->results();
    ASSERT_FALSE(pool->winner().has_value())
        << "a waiter got the lock " << ms_since(stopped_at) << " ms after the holder stopped inside its open "
        << "transaction, before the server could have ended it: two holders";
    std::size_t timeouts = 0;
    for (auto const& r : phase_a) {
        EXPECT_TRUE(r.outcome == "busy" || r.outcome == "timeout")
            << (r.is_try ? "try_acquire" : "acquire") << " answered " << r.outcome
            << " while the holder was stopped: only busy or timeout are right";
        EXPECT_LE(r.took_ms, (r.is_try ? milliseconds(0) : wait).count() + call_bound.count())
            << (r.is_try ? "try_acquire" : "acquire(1 s)") << " took " << r.took_ms
            << " ms behind a stopped holder: its wait is not bounded";
        timeouts += r.outcome == "timeout";
    }
    EXPECT_GE(timeouts, 1u) << "no blocking acquire ran out its wait: the scenario proves nothing about waits";

    if (e_ == engine::mysql) {
        // After lock-wait timeouts (1205 rolls back only the statement), the library must have ended
        // the waiters' transactions: none of this process's sessions has one open.
        auto ports = own_ports_to(server_port());
        ASSERT_FALSE(ports.empty()) << "found no connection of this process to the MariaDB server";
        std::string in;
        for (int p : ports) in += (in.empty() ? "" : ",") + std::string("'").append(std::to_string(p)) + "'";
        long long sessions = 0, open_trx = 0;
        *raw_ << "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE SUBSTRING_INDEX(HOST, ':', -1) IN (" + in +
                     ")",
            soci::into(sessions);
        *raw_ << "SELECT COUNT(*) FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p "
                 "ON p.ID = t.trx_mysql_thread_id WHERE SUBSTRING_INDEX(p.HOST, ':', -1) IN (" +
                     in + ")",
            soci::into(open_trx);
        EXPECT_GE(sessions, 2) << "the waiters' sessions were not found in the processlist";
        EXPECT_EQ(open_trx, 0) << open_trx << " of this process's " << sessions << " MariaDB sessions still have a "
                               << "transaction open after the waiters' lock-wait timeouts: a pooled connection went "
                               << "back with a half-rolled-back transaction";
    }

    if (e_ == engine::sqlite) {
        // No server ends the stopped process's transaction: the lock stays taken while it lives.
        pool->resume();
        std::this_thread::sleep_for(1s);
        ASSERT_TRUE(pool->pause(call_bound + wait)) << "a waiter's call did not return behind the stopped holder";
        ASSERT_FALSE(pool->winner().has_value()) << "a waiter got the SQLite lock while the holder was stopped";
        holder.signal(SIGKILL);
        auto const killed_at = steady::now();
        ASSERT_TRUE(holder.wait_exit(10s).has_value());
        pool->resume();
        ASSERT_TRUE(pool->wait_grant(10s)) << "nobody got the lock within 10 s of the stopped holder's kill -9";
        auto const gap = duration_cast<milliseconds>(pool->granted_at() - killed_at).count();
        EXPECT_LE(gap, (wait + call_bound).count()) << "the lock came free " << gap << " ms after the holder's death";
        std::cout << "C03 sqlite: " << phase_a.size() << " waiter calls while stopped (" << timeouts
                  << " timeouts), lock free " << gap << " ms after the kill -9\n";
        pool->stop();
        EXPECT_GT(pool->winner()->token(), holder_token);
        for (auto const& r : pool->results())
            EXPECT_TRUE(r.outcome == "busy" || r.outcome == "timeout" || r.outcome == "granted") << r.outcome;
        pool->winner()->release();
        std::string check;
        *raw_ << "PRAGMA integrity_check", soci::into(check);
        EXPECT_EQ(check, "ok") << "the database file after the stopped holder's kill -9";
        // And every other name is writable again.
        EXPECT_TRUE(table_locks.try_acquire(n("c03-other")).has_value());
        return;
    }

    // Phase B (servers): the server ends the stopped session at its idle limit; a waiter gets the lock.
    pool->resume();
    ASSERT_TRUE(pool->wait_grant(holder_ttl + 15s))
        << "nobody got the lock in " << ms_since(stopped_at) << " ms after the holder stopped inside its "
        << "transaction: the server never ended the stopped session (idle-in-transaction limit " << holder_ttl.count()
        << " ms)";
    auto const gap = duration_cast<milliseconds>(pool->granted_at() - stopped_at).count();
    EXPECT_LE(gap, (holder_ttl + 4s).count())
        << "the lock came free " << gap << " ms after the holder stopped, over its idle limit + 4 s";
    pool->stop();
    for (auto const& r : pool->results())
        EXPECT_TRUE(r.outcome == "busy" || r.outcome == "timeout" || r.outcome == "granted")
            << (r.is_try ? "try_acquire" : "acquire") << " answered " << r.outcome;
    lease& next = *pool->winner();
    EXPECT_GT(next.token(), holder_token) << "the next holder's token must be greater than the stopped holder's";

    // The stopped holder resumes: its COMMIT finds its session gone.
    holder.signal(SIGCONT);
    auto st = holder.wait_exit(20s);
    ASSERT_TRUE(st.has_value()) << "the resumed holder did not finish within 20 s";
    EXPECT_EQ(exit_text(*st), "exit 0") << holder.stderr_text();
    out = lines_of(dir / "holder.out");
    ASSERT_GE(out.size(), 3u) << "the resumed holder reported: " << testing::PrintToString(out);
    EXPECT_NE(out[1], "released") << "the resumed holder's release reported success, though its transaction was "
                                     "ended by the server and another holder took the lock";
    bool const typed = out[1].find("lease_lost") != std::string::npos || out[1].find("in_doubt") != std::string::npos;
    EXPECT_TRUE(typed) << "the resumed holder's release answered: " << out[1];
    EXPECT_TRUE(out[2] == "state lost" || out[2] == "state in_doubt") << out[2];
    std::cout << "C03 " << engine_name(e_) << ": " << phase_a.size() << " waiter calls while stopped (" << timeouts
              << " timeouts), lock free " << gap << " ms after the stop; the resumed holder: " << out[1] << "; "
              << out[2] << "\n";
    // The new holder still holds.
    EXPECT_NO_THROW(next.renew()) << "the new holder lost the lock when the stopped one resumed";
    EXPECT_EQ(next.state(), lease_state::held);
    next.release();
}

// ------------------------------------------------------------------------------------------ C07, a holder's child

TEST_P(HolderReaper, C07_RowHolderThatLeftAChildDiesLockFreesAtOnce) {
    // A holder that started a program (system(), popen(), posix_spawn) while holding a row lock, then died:
    // the lock must come free when the holder dies, as for any holder, not when that program ends or
    // the server's idle limit (the TTL, 15 s here) runs out. So no descriptor of the lock's connection
    // may reach the program.
    milliseconds const holder_ttl = 15s;
    std::string const name = n("c07-child");
    auto const dir = work();
    child holder({SQLOCK_HOLDER_WORKER, "--mode", "row-hold", "--spawn-child", "--url", worker_url(), "--tables",
                  tables_, "--lock", name, "--ttl-ms", std::to_string(holder_ttl.count()), "--wait-ms", "10000",
                  "--out", (dir / "holder.out").string()},
                 {"SQLOCK_FAILPOINTS=row.before_commit=stop"}, dir / "holder");
    ASSERT_TRUE(holder.wait_stopped(30s)) << "the holder never stopped at row.before_commit: " << holder.stderr_text();
    auto out = lines_of(dir / "holder.out");
    ASSERT_EQ(out.size(), 2u) << testing::PrintToString(out);
    long long const holder_token = std::stoll(out[0].substr(9));
    pid_t const kid = std::stoi(out[1].substr(6));
    struct reap_kid {
        pid_t pid;
        ~reap_kid() { ::kill(pid, SIGKILL); }
    } const kid_guard{kid};

    // What the program got from the holder: no socket, and not the database file. (The test's own raw
    // session, which the holder inherited from this process, is left out: it is not the library's.)
    std::set<std::string> mine;
    for (auto const& fd : fs::directory_iterator("/proc/self/fd")) {
        std::error_code ec;
        mine.insert(fs::read_symlink(fd.path(), ec).string());
    }
    std::vector<std::string> leaked;
    auto const db_file = e_ == engine::sqlite ? fs::weakly_canonical(sqlite_path_of(url_)).string() : std::string();
    for (auto const& fd : fs::directory_iterator(std::string("/proc/").append(std::to_string(kid)) + "/fd")) {
        if (std::stoi(fd.path().filename().string()) <= 2) continue;
        std::error_code ec;
        auto const target = fs::read_symlink(fd.path(), ec).string();
        if (target.rfind("socket:", 0) == 0 && mine.count(target) != 0) continue;
        if (target.rfind("socket:", 0) == 0 || (!db_file.empty() && target.rfind(db_file, 0) == 0))
            leaked.push_back(fd.path().filename().string() + " -> " + target);
    }
    EXPECT_TRUE(leaked.empty()) << "a program the holder started inherited " << leaked.size()
                                << " descriptors of its database connections: " << testing::PrintToString(leaked)
                                << "; they must be close-on-exec";

    holder.signal(SIGKILL);
    ASSERT_TRUE(holder.wait_exit(10s).has_value());
    auto const killed_at = steady::now();
    sqlock::store waiters_db(url_, {.table_prefix = tables_, .lock_wait_timeout = 1s, .io_timeout = 2s});
    auto row_locks = sqlock::row_locker(waiters_db, {.ttl = 2s});
    lease next = row_locks.acquire(name, holder_ttl + 10s);
    auto const gap = ms_since(killed_at);
    EXPECT_LE(gap, 3000) << "the row lock came free " << gap << " ms after its holder died (its idle limit is "
                         << holder_ttl.count() << " ms): a program the holder started kept its connection open";
    EXPECT_GT(next.token(), holder_token);
    next.release();
}

// ------------------------------------------------------------------------------------------ C10

TEST_P(HolderReaper, C10_RowCreatedUnderAWaiterIsWaitedFor) {
    // A waiter's lock statement finds no row for its name; before it creates the row, another client
    // creates it and locks it. The waiter's INSERT then waits in the engine's unique check for that
    // holder's transaction, and gives up at its lock wait (PostgreSQL 55P03, MariaDB 1205). That only
    // says the row exists and is held: the waiter must go on waiting for the lock, not fail with an
    // untyped backend_error (what the soak tier's fork nemesis met, issue 39). A try in the same race
    // answers busy at once (sqlock::timeout from acquire(name, 0)). The failpoint stops both between the
    // two (row.before_ensure=stop), so the race happens every run.
    milliseconds const waiter_lock_wait = 1s;  // holder_worker row-hold's store: lock_wait_timeout = 1 s
    std::string const name = n("c10");
    auto const dir = work();
    child waiter({SQLOCK_HOLDER_WORKER, "--mode", "row-hold", "--url", worker_url(), "--tables", tables_, "--lock",
                  name, "--ttl-ms", "5000", "--wait-ms", "30000", "--out", (dir / "waiter.out").string()},
                 {"SQLOCK_FAILPOINTS=row.before_ensure=stop"}, dir / "waiter");
    if (e_ == engine::sqlite) {
        // SQLite's lock statement creates the row itself (an upsert under the file lock): there is no
        // separate INSERT, so no race, and the waiter never reaches the failpoint.
        ASSERT_FALSE(waiter.wait_stopped(30s)) << "an SQLite row-lock waiter stopped at row.before_ensure";
        auto const st = waiter.wait_exit(30s);
        ASSERT_TRUE(st.has_value());
        EXPECT_EQ(exit_text(*st), "exit 0") << waiter.stderr_text();
        auto const out = lines_of(dir / "waiter.out");
        ASSERT_GE(out.size(), 2u) << testing::PrintToString(out);
        EXPECT_EQ(out[0].rfind("acquired ", 0), 0u) << out[0];
        EXPECT_EQ(out[1], "released");
        return;
    }
    ASSERT_TRUE(waiter.wait_stopped(30s)) << "the waiter never stopped at row.before_ensure (it found the row, or "
                                          << "failed): " << waiter.stderr_text();
    child trier({SQLOCK_HOLDER_WORKER, "--mode", "row-hold", "--url", worker_url(), "--tables", tables_, "--lock", name,
                 "--ttl-ms", "5000", "--wait-ms", "0", "--out", (dir / "trier.out").string()},
                {"SQLOCK_FAILPOINTS=row.before_ensure=stop"}, dir / "trier");
    ASSERT_TRUE(trier.wait_stopped(30s)) << "the try never stopped at row.before_ensure: " << trier.stderr_text();

    // Another client creates the row and holds it; then the waiter goes on, into its INSERT.
    sqlock::store holder_db(url_, {.table_prefix = tables_});
    auto row_locks = sqlock::row_locker(holder_db, {.ttl = 20s});
    lease held = row_locks.acquire(name, 10s);
    long long const held_token = held.token();
    waiter.signal(SIGCONT);
    trier.signal(SIGCONT);
    // The fault bites only if the waiter's INSERT waits on the holder's transaction: see it wait.
    std::string const insert = (e_ == engine::postgresql ? "INSERT INTO " : "INSERT IGNORE INTO ") + tables_ + "_rows";
    auto inserting = [&] {
        long long c = 0;
        if (e_ == engine::postgresql)
            *raw_ << "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                     " AND position(:t in query) > 0",
                soci::use(insert, "t"), soci::into(c);
        else
            *raw_ << "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INSTR(INFO, :t) > 0",
                soci::use(insert, "t"), soci::into(c);
        return c > 0;
    };
    ASSERT_TRUE(eventually(inserting, 10s))
        << "the waiter's INSERT of the row was never seen waiting for the holder's transaction: the test proves "
        << "nothing (waiter: " << waiter.stderr_text() << ")";
    // Three times the waiter's lock wait: before the fix, it failed here with "creating row lock ... failed:
    // canceling statement due to lock timeout" (PostgreSQL) or "Lock wait timeout exceeded" (MariaDB).
    std::this_thread::sleep_for(3 * waiter_lock_wait);
    ASSERT_FALSE(waiter.wait_exit(50ms).has_value())
        << "the waiter ended while the row was held, instead of waiting for it: " << waiter.stderr_text();
    EXPECT_TRUE(lines_of(dir / "waiter.out").empty()) << "the waiter was granted the lock while another held it";
    // The try has answered by now (its INSERT waits at most its own wait): busy, typed.
    auto const tried = trier.wait_exit(30s);
    ASSERT_TRUE(tried.has_value()) << "the try had not answered 30 s after it went on";
    EXPECT_EQ(exit_text(*tried), "exit 2") << "the try's acquire(name, 0) did not fail: " << trier.stderr_text();
    EXPECT_NE(trier.stderr_text().find("sqlock::timeout"), std::string::npos)
        << "a try that met the row created and held under it must answer busy (sqlock::timeout from acquire(name, "
        << "0)), not an error: " << trier.stderr_text();
    EXPECT_TRUE(lines_of(dir / "trier.out").empty()) << "the try was granted the lock while another held it";

    held.release();
    auto const st = waiter.wait_exit(30s);
    ASSERT_TRUE(st.has_value()) << "the waiter had not got the released lock 30 s after its release";
    EXPECT_EQ(exit_text(*st), "exit 0") << waiter.stderr_text();
    auto const out = lines_of(dir / "waiter.out");
    ASSERT_GE(out.size(), 2u) << testing::PrintToString(out) << " " << waiter.stderr_text();
    ASSERT_EQ(out[0].rfind("acquired ", 0), 0u) << out[0];
    EXPECT_GT(std::stoll(out[0].substr(9)), held_token) << "the waiter's grant has a token below its predecessor's";
    EXPECT_EQ(out[1], "released");
}

// ------------------------------------------------------------------------------------------ C08

// A grant whose answer comes late: the acquirer pauses 1.4 s between the commit and the return
// (failpoint acquire.after_commit_before_return=sleep:1400; a grant that queued behind a busy pool or
// server does the same), so its 2 s lease comes back with less than a third of its TTL left. Its first
// renewal is due at once, not a third of the TTL after the answer, when the lease would already have
// run out: it is renewed, held through a 3 s hold, and released.
TEST_P(HolderReaper, C08_LateGrantIsRenewedBeforeItRunsOut) {
    // The fault bit: with a third of the TTL or more left, a renewal a third of the TTL later would do.
    late_grant("c08", false, "the pause did not bite");
}

// A shared lease is valid from its grant's request, not from the rename that makes the reader's row: on
// PostgreSQL and SQLite that rename commits without waiting for the disk, and is safe only because a lease that
// a crash could take its row from ends with the name's grant (docs/coordination.md). The grant's answer comes
// 1.4 s late (after the grant's commit, before the rename; on MariaDB after the one transaction of both): the
// lease has less than a third of its TTL left, not a whole TTL counted from the rename, is renewed at once, kept
// and released.
TEST_P(HolderReaper, C09_LateSharedGrantIsValidFromItsGrant) {
    late_grant("c09", true, "its validity was not counted from its grant's request");
}

// ------------------------------------------------------------------------------------------ C07

TEST_P(HolderReaper, C07_ForkExecChurn) {
    using namespace sqlock_battery;
    scenario_summary_on_exit summary;  // battery.sh's end-of-run table (no seed: the churn draws none)
    int const total = soak_mode() ? 400 : 100, parallel = 4, locks = 4;
    milliseconds const ttl = 500ms;
    std::int64_t const k6_bound_ms = ttl.count() + 100 /* backoff_max */ + 1500 /* slack */;
    auto const dir = work() / "run";
    fs::create_directories(dir);
    if (e_ == engine::postgresql) *raw_ << "SET client_min_messages = warning";  // the audit's IF EXISTS notices
    install_audit(*raw_, e_, tables_);

    // The fenced resource: PostgreSQL #2 (SQLOCK_TEST_PG2_URL) for the servers, a file for SQLite.
    res_tables_ = tables_ + "r";
    std::string res_backend, res_connect, res_url;
    if (e_ == engine::sqlite) {
        res_backend = "sqlite3";
        res_url = sqlite_url(work() / "resource.db");
        res_connect = "db=" + (work() / "resource.db").string() + " timeout=30";
    } else {
        require_env("SQLOCK_TEST_PG2_URL", res_url);
        if (should_stop()) return;
        res_backend = "postgresql";
        auto pr = parse_server_url(res_url);
        res_connect = "host=" + pg_quote_param(pr.host) + " dbname=" + pg_quote_param(pr.db) +
                      " user=" + pg_quote_param(pr.user) + " password=" + pg_quote_param(pr.password);
        if (!pr.port.empty()) res_connect += " port=" + pr.port;
    }
    // The churn's own server sessions carry a mark of their own (marked_sessions.hpp): PostgreSQL an
    // application_name (the fenced resource's sessions too: they are on the same server), MariaDB a user.
    // Not the processes' client ports: under ctest -j another test's session can reuse a dead process's
    // port, and was counted as one of its sessions left open (the soak tier, issue 39).
    std::string const marker = e_ == engine::sqlite ? std::string() : new_marker();
    std::string const wurl = e_ == engine::sqlite ? url_ : tagged_url(marker);
    if (should_stop()) return;
    if (e_ != engine::sqlite) res_connect += " application_name=" + marker;
    sqlock::store(res_url, {.create_schema = true, .table_prefix = res_tables_});
    res_raw_ = raw_session(e_ == engine::sqlite ? engine::sqlite : engine::postgresql, res_url);
    *res_raw_ << "CREATE TABLE IF NOT EXISTS " + res_tables_ +
                     "_values (lock_name TEXT PRIMARY KEY, value BIGINT NOT NULL)";
    if (e_ == engine::sqlite) res_raw_.reset();  // nothing to drop; don't hold the file

    auto sessions = [&]() -> long long {
        return e_ == engine::sqlite ? 0 : static_cast<long long>(sessions_of(marker).size());
    };
    long long const baseline = sessions();

    std::ofstream nemesis(dir / "nemesis.jsonl");
    std::map<pid_t, int> running;
    std::vector<std::string> failures;
    int next = 0, finished = 0, no_grant = 0, spawned = total;
    long long peak = 0;
    auto const started = steady::now();
    auto last_sample = steady::now();
    while (finished < spawned) {
        while (static_cast<int>(running.size()) < parallel && next < total) {
            int const i = next++;
            std::string const name = std::string("c").append(std::to_string(i));
            std::vector<std::string> args{SQLOCK_HOLDER_WORKER,
                                          "--mode",
                                          "churn",
                                          "--url",
                                          wurl,
                                          "--tables",
                                          tables_,
                                          "--lock",
                                          n(std::string("c07/L").append(std::to_string((i / 2) % locks))),
                                          "--ttl-ms",
                                          std::to_string(ttl.count()),
                                          "--wait-ms",
                                          "8000",
                                          "--name",
                                          name,
                                          "--history",
                                          (dir / ("history-" + name + ".jsonl")).string(),
                                          "--resource-backend",
                                          res_backend,
                                          "--resource-connect",
                                          res_connect,
                                          "--resource-tables",
                                          res_tables_};
            if (i % 2 == 1) args.push_back("--abandon");
            if (e_ != engine::sqlite) {
                args.push_back("--server-port");
                args.push_back(std::to_string(server_port()));
            }
            spawn_file_actions fa;
            fa.capture_to_files(work() / (name + ".out"), work() / (name + ".err"));
            running[spawn_process(args, std::nullopt, fa.get())] = i;
        }
        int st = 0;
        pid_t const pid = ::waitpid(-1, &st, WNOHANG);
        if (pid > 0 && running.count(pid)) {
            int const i = running[pid];
            running.erase(pid);
            ++finished;
            if (exit_text(st) == "exit 3" && ++no_grant >= 3 && next < total) {
                failures.push_back("3 processes got no lock within their wait: the churn stopped after " +
                                   std::to_string(next) + " processes");
                spawned = next;
                next = total;  // start no more; the checks below say why
            }
            if (exit_text(st) != "exit 0" && exit_text(st) != "exit 3")
                failures.push_back(std::string("c").append(std::to_string(i)) + ": " + exit_text(st) + ": " +
                                   slurp(work() / (std::string("c").append(std::to_string(i)) + ".err")));
            if (i % 2 == 1)
                nemesis << to_json(nemesis_event{.fault = "exit",
                                                 .target = std::string("c").append(std::to_string(i)),
                                                 .phase = "instant",
                                                 .mono_ns = raw_monotonic_ns(),
                                                 .detail = "_exit(0) holding the lock"})
                               .dump()
                        << '\n'
                        << std::flush;
            continue;
        }
        if (steady::now() - last_sample > 100ms) {
            peak = std::max(peak, sessions());
            last_sample = steady::now();
        }
        if (steady::now() - started > 180s) {
            for (auto const& [p, i] : running) ::kill(p, SIGKILL);
            for (auto const& [p, i] : running) ::waitpid(p, &st, 0);
            FAIL() << "the churn did not finish in 180 s (" << finished << " of " << total << " processes ended)";
        }
        std::this_thread::sleep_for(2ms);
    }
    auto const churn_ms = ms_since(started);
    nemesis.close();
    EXPECT_TRUE(failures.empty()) << failures.size() << " processes failed, e.g. " << failures.front();

    // Quiescence: every abandoned row expired (the reaper is not running: takeover on acquire and expiry
    // are all there is); then the table, the audit and the checkers.
    auto const live_rows = [&] {
        long long c = 0;
        *raw_ << "SELECT COUNT(*) FROM " + tables_ + "_locks WHERE " + col_us_expr(e_, "expires_at") + " > " +
                     db_now_us_expr(e_),
            soci::into(c);
        return c;
    };
    EXPECT_TRUE(eventually([&] { return live_rows() == 0; }, 10s))
        << live_rows() << " lock rows were still live 10 s after the last process ended (TTL " << ttl.count() << " ms)";
    write_audit((dir / "remaining.jsonl").string(), lock_table_rows(*raw_, e_, tables_));
    write_audit((dir / "audit.jsonl").string(), dump_audit(*raw_, e_, tables_));
    run_final fin;
    fin.has_remaining = true;
    fin.k6_bound_ms = k6_bound_ms;
    fin.k2_expect_zero = false;
    fin.asserted = std::vector<std::string>{"K1", "K3", "K5", "K6", "K7", "K8", "K9"};
    std::ofstream(dir / "final.json") << to_json(fin).dump(2) << '\n';
    std::map<std::string, report> by;
    for (auto& r : check_directory(dir.string())) {
        std::cout << "C07 " << engine_name(e_) << " " << r.summary() << "\n";
        if (r.asserted) {
            EXPECT_TRUE(r.ok()) << r.summary();
        }
        by.emplace(r.checker, std::move(r));
    }
    // The run did what it says: every process got the lock and wrote once, abandoned locks were taken
    // over on acquire, and K6 measured waits behind abandoned locks.
    auto const history = [&] {
        std::vector<event> all;
        for (auto const& f : fs::directory_iterator(dir))
            if (f.path().filename().string().rfind("history-", 0) == 0)
                for (auto& e : read_history(f.path().string())) all.push_back(std::move(e));
        return all;
    }();
    std::size_t grants = 0, accepted = 0, releases = 0;
    for (auto const& e : history) {
        grants += e.op == "acquire" && e.type == "ok";
        accepted += e.op == "write_fenced" && e.type == "ok";
        releases += e.op == "release" && e.type == "ok";
    }
    summary.grants = grants;
    EXPECT_EQ(grants, static_cast<std::size_t>(spawned)) << "not every process got its lock";
    EXPECT_EQ(accepted, grants) << "not every grant's fenced write was accepted";
    EXPECT_EQ(releases, static_cast<std::size_t>(spawned / 2)) << "the releasing half did not all release";
    ASSERT_TRUE(by.count("K1") && by.count("K6"));
    EXPECT_GE(by["K1"].counts["takeovers"], 1) << "no abandoned row was taken over: the scenario proves nothing";
    EXPECT_GE(by["K6"].counts["waits_checked"], 1) << "K6 saw no waiter behind an abandoned lock";

    // The servers' sessions go back to where they were: nothing of the dead processes stays. No session with
    // the churn's mark may be left once the processes are gone. Each process also printed its local ports to
    // the server, to show it found its own connections (a child may list sockets it inherited from this
    // process, such as the test's own raw session: those are left out).
    if (e_ != engine::sqlite) {
        auto const mine = own_ports_to(server_port());
        std::size_t processes_with_ports = 0;
        for (int i = 0; i < spawned; ++i)
            for (auto const& l : lines_of(work() / (std::string("c").append(std::to_string(i)) + ".out")))
                if (l.rfind("ports", 0) == 0) {
                    std::istringstream f(l.substr(5));
                    bool any = false;
                    for (int port = 0; f >> port;) any = any || mine.count(port) == 0;
                    processes_with_ports += any;
                }
        EXPECT_EQ(processes_with_ports, static_cast<std::size_t>(grants))
            << "not every process that got its lock found its own connection to the server";
        EXPECT_GT(peak, 0) << "no session with the churn's mark was ever seen: the check below proves nothing";
        EXPECT_TRUE(eventually([&] { return sessions() == 0; }, 10s))
            << sessions() << " server sessions of the churn's processes were still there 10 s after the last one "
            << "ended: dead processes' connections stayed open";
    }
    std::cout << "C07 " << engine_name(e_) << ": " << spawned << " processes in " << churn_ms << " ms, peak sessions "
              << peak << " (before " << baseline << ")\n";
    if (HasFailure()) {
        auto kept = fs::temp_directory_path() / ("sqlock-c07-" + tables_);
        fs::copy(dir, kept, fs::copy_options::recursive);
        std::cout << "replay: build/tests/faults/sqlock_battery_check " << kept.string() << "\n";
    }
}

// ------------------------------------------------------------------------------------------ E05

TEST_P(HolderReaper, E05_ReaperKilledMidPurge) {
    constexpr int expired = 10000, live = 50, batch = 1000, kill_at = 3;
    std::string const locks = tables_ + "_locks";
    std::string const p = n("e05/");
    // 10,000 expired rows, the oldest first by name (e05/00000 expired an hour ago, each next one
    // 1 ms later), and 50 live ones (an hour to go), written straight into the table.
    long long const now_us = db_now_us(*raw_, e_);
    std::string const cols = " (name, owner, token, holds, attempt, created_at, expires_at) ";
    switch (e_) {
        case engine::postgresql:
            *raw_ << "INSERT INTO " + locks + cols +
                         "SELECT :p || lpad(g::text, 5, '0'), 'dead', g + 1, 1, 0, "
                         "clock_timestamp() - interval '2 hours', clock_timestamp() - interval '1 hour' + g * interval "
                         "'1 millisecond' FROM generate_series(0, " +
                         std::to_string(expired - 1) + ") g",
                soci::use(p, "p");
            *raw_ << "INSERT INTO " + locks + cols +
                         "SELECT :p || 'live' || g, 'alive', g + 1, 1, 0, clock_timestamp(), "
                         "clock_timestamp() + interval '1 hour' FROM generate_series(1, " +
                         std::to_string(live) + ") g",
                soci::use(p, "p");
            break;
        case engine::mysql: {
            std::string const digit =
                "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL "
                "SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 "
                "UNION ALL SELECT 9)";
            std::string const seq = "(SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d AS g FROM " + digit + " a, " +
                                    digit + " b, " + digit + " c, " + digit + " e) s";
            *raw_
                << "INSERT INTO " + locks + cols +
                       "SELECT CONCAT(:p, LPAD(g, 5, '0')), 'dead', g + 1, 1, 0, "
                       "NOW(6) - INTERVAL 2 HOUR, TIMESTAMPADD(MICROSECOND, g * 1000, NOW(6) - INTERVAL 1 HOUR) FROM " +
                       seq,
                soci::use(p, "p");
            *raw_ << "INSERT INTO " + locks + cols +
                         "SELECT CONCAT(:p, 'live', g), 'alive', g + 1, 1, 0, NOW(6), "
                         "NOW(6) + INTERVAL 1 HOUR FROM " +
                         seq + std::string(" WHERE g BETWEEN 1 AND ").append(std::to_string(live)),
                soci::use(p, "p");
            break;
        }
        case engine::sqlite: {
            long long const hour = 3600LL * 1000000;
            *raw_ << "WITH RECURSIVE seq(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM seq WHERE g < " +
                         std::to_string(expired - 1) + ") INSERT INTO " + locks + cols +
                         "SELECT :p || printf('%05d', g), 'dead', g + 1, 1, 0, :c, :e + g * 1000 FROM seq",
                soci::use(p, "p"), soci::use(now_us - 2 * hour, "c"), soci::use(now_us - hour, "e");
            *raw_ << std::string("WITH RECURSIVE seq(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM seq WHERE g < ")
                             .append(std::to_string(live)) +
                         ") INSERT INTO " + locks + cols +
                         "SELECT :p || 'live' || g, 'alive', g + 1, 1, 0, :c, :e FROM seq",
                soci::use(p, "p"), soci::use(now_us, "c"), soci::use(now_us + hour, "e");
            break;
        }
    }
    auto count = [&](std::string const& where) {
        long long c = 0;
        *raw_ << "SELECT COUNT(*) FROM " + locks + " WHERE " + where, soci::into(c);
        return c;
    };
    auto const key = [&](int i) {
        char b[8];
        std::snprintf(b, sizeof b, "%05d", i);
        return p + b;
    };
    ASSERT_EQ(count("owner = 'dead'"), expired);
    ASSERT_EQ(count("owner = 'alive'"), live);

    // The reaper process stops itself after each batch; the third stop is where it dies.
    auto const dir = work();
    child reaper_proc({SQLOCK_HOLDER_WORKER, "--mode", "reap", "--url", worker_url(), "--tables", tables_, "--batch",
                       std::to_string(batch), "--out", (dir / "reap.out").string()},
                      {"SQLOCK_FAILPOINTS=reaper.between_batches=stop"}, dir / "reap");
    for (int stop = 1; stop <= kill_at; ++stop) {
        ASSERT_TRUE(reaper_proc.wait_stopped(60s))
            << "the reaper never stopped between batches (stop " << stop << "): it purged "
            << expired - count("owner = 'dead'") << " rows in one go. " << reaper_proc.stderr_text()
            << testing::PrintToString(lines_of(dir / "reap.out"));
        if (stop < kill_at) reaper_proc.signal(SIGCONT);
    }
    reaper_proc.signal(SIGKILL);
    ASSERT_TRUE(reaper_proc.wait_exit(10s).has_value());

    // Whole batches, oldest first: exactly the first kill_at batches are gone, nothing else.
    std::string const cut = key(kill_at * batch);
    long long const gone_old = kill_at * batch - count("owner = 'dead' AND name < '" + cut + "'");
    EXPECT_EQ(count("owner = 'dead' AND name < '" + cut + "'"), 0)
        << "rows of the first " << kill_at << " batches survived the kill: a batch was not one transaction";
    EXPECT_EQ(count("owner = 'dead' AND name >= '" + cut + "'"), expired - kill_at * batch)
        << "rows past the first " << kill_at << " batches are gone: the killed reaper left a partial batch or "
        << "deleted out of expiry order";
    EXPECT_EQ(count("owner = 'alive'"), live) << "the reaper deleted live rows";

    // Takeover on acquire with no reaper running: expired rows are taken, with greater tokens.
    auto table_locks = sqlock::table_locker(*db_, {.ttl = 30s});
    std::vector<lease> taken;
    for (int i = 5000; i < 5010; ++i) {
        std::optional<lease> l;
        ASSERT_NO_THROW(l = table_locks.try_acquire(key(i)));
        ASSERT_TRUE(l.has_value()) << "an expired row (" << key(i) << ", expired an hour ago) was not taken over by "
                                   << "acquire with the reaper gone: the lock is stuck until a reaper runs";
        EXPECT_GT(l->token(), i + 1) << "the takeover's token must be greater than the expired row's";
        taken.push_back(std::move(*l));
    }
    // A live row is not taken over.
    std::optional<lease> no;
    ASSERT_NO_THROW(no = table_locks.try_acquire(p + "live1"));
    EXPECT_FALSE(no.has_value()) << "a live row was taken over";

    // The next pass completes: every expired row gone, the live and taken ones kept.
    sqlock::reaper r(
        *db_, {.grace = 0ms, .batch_size = batch, .token_horizon = std::nullopt, .row_lock_warning = std::nullopt});
    auto res = r.reap_once();
    EXPECT_TRUE(res.complete);
    EXPECT_EQ(res.purged, static_cast<std::uint64_t>(expired - kill_at * batch - 10));
    EXPECT_EQ(count("owner = 'dead'"), 0);
    EXPECT_EQ(count("owner = 'alive'"), live);
    for (auto& l : taken) EXPECT_EQ(l.state(), lease_state::held);
    std::cout << "E05 " << engine_name(e_) << ": killed after " << kill_at << " batches, " << gone_old
              << " oldest rows gone; the next pass purged " << res.purged << " in " << res.batches << " batches\n";
    for (auto& l : taken) l.release();
}

// ------------------------------------------------------------------------------------------ E04

TEST_P(HolderReaper, E04_LeaseTimesComeFromTheStatementsClock) {
    milliseconds const ttl = 3s;
    long long const ttl_us = duration_cast<std::chrono::microseconds>(ttl).count();
    long long const slack_us = 1'000'000;
    if (e_ == engine::postgresql) *raw_ << "SET client_min_messages = warning";  // the audit's IF EXISTS notices
    sqlock_battery::install_audit(*raw_, e_, tables_);
    sqlock::store second(url_, {.table_prefix = tables_});
    auto rows_a = sqlock::row_locker(*db_, {.ttl = ttl});
    auto rows_b = sqlock::row_locker(second, {.ttl = ttl});

    // 1. A row-lock waiter that queued behind a holder for 1.5 s is dated when it got the row, after
    //    the holder's release, not when its statement (or transaction) began.
    std::string const row_name = n("e04-row");
    lease a = rows_a.acquire(row_name, 10s);
    std::optional<lease> b;
    std::thread waiter([&] { b.emplace(rows_b.acquire(row_name, 20s)); });
    std::this_thread::sleep_for(1500ms);
    long long const before_release_us = db_now_us(*raw_, e_);
    // 2. A row lock held in one transaction for 1.5 s renews to the database's now + TTL.
    a.renew();
    long long const after_renew_us = db_now_us(*raw_, e_);
    EXPECT_GE(us_of(a.expires_at()), before_release_us + ttl_us - slack_us)
        << "a row lock renewed after 1.5 s in its transaction expires at " << us_of(a.expires_at())
        << ", not the database's now + TTL (" << before_release_us + ttl_us << "): the renewal used the transaction's "
        << "start time";
    EXPECT_LE(us_of(a.expires_at()), after_renew_us + ttl_us + slack_us);
    a.release();
    waiter.join();
    ASSERT_TRUE(b.has_value());
    long long const after_grant_us = db_now_us(*raw_, e_);
    EXPECT_GE(us_of(b->created_at()), before_release_us - 50'000)
        << "the waiter's row lock is dated " << (before_release_us - us_of(b->created_at())) / 1000
        << " ms before the previous holder's release: its grant time is its statement's start, not when it got the row";
    EXPECT_GE(us_of(b->expires_at()), after_grant_us + ttl_us - slack_us)
        << "the waiter's lease ends " << (after_grant_us + ttl_us - us_of(b->expires_at())) / 1000
        << " ms short of TTL from its grant";
    b->release();

    // 3. Table-lock grants, fresh and by takeover: expires_at - the database's time of the grant = TTL.
    auto table_locks = sqlock::table_locker(*db_, {.ttl = ttl, .auto_renew = false});
    std::string const fresh = n("e04-fresh"), stale = n("e04-stale");
    std::set<std::string> owners;
    {
        auto old = sqlock::table_locker(second, {.ttl = 200ms, .auto_renew = false});
        auto l = old.acquire(stale, 5s);
        backdate_row(*raw_, e_, stale, tables_);
        auto f = table_locks.acquire(fresh, 5s);
        auto t = table_locks.acquire(stale, 5s);  // a takeover of the expired row
        owners = {f.owner(), t.owner()};
        EXPECT_EQ(us_of(f.expires_at()) - us_of(f.created_at()), ttl_us);
        EXPECT_EQ(us_of(t.expires_at()) - us_of(t.created_at()), ttl_us);
        f.release();
        t.release();
    }
    // The audit's time of a grant is the database's clock when its trigger ran.
    int checked = 0;
    for (auto const& row : sqlock_battery::dump_audit(*raw_, e_, tables_)) {
        if ((row.kind != "grant" && row.kind != "takeover") || !owners.count(row.owner)) continue;
        if (row.lock != fresh && row.lock != stale) continue;
        ++checked;
        long long const len = row.expires_at_us - row.db_time_us;
        EXPECT_GE(len, ttl_us - slack_us) << row.kind << " of " << row.lock << ": expires_at - grant time = " << len
                                          << " µs, not the TTL " << ttl_us << " µs";
        EXPECT_LE(len, ttl_us + slack_us) << row.kind << " of " << row.lock << ": expires_at - grant time = " << len;
    }
    EXPECT_GE(checked, 2) << "the audit did not show the fresh grant and the takeover";

    // 4. The reaper deletes by the database's current time: a row 1 s from expiry stays, and is
    //    purged once the database's clock has passed its expiry.
    sqlock::reaper r(*db_, {.grace = 0ms, .token_horizon = std::nullopt, .row_lock_warning = std::nullopt});
    std::string const soon = n("e04-soon");
    auto short_locks = sqlock::table_locker(*db_, {.ttl = 1s, .auto_renew = false});
    auto s = short_locks.acquire(soon, 5s);
    auto first = r.reap_once();
    EXPECT_EQ(read_row(*raw_, e_, soon, tables_).has_value(), true) << "the reaper deleted a row before its expiry";
    EXPECT_EQ(first.purged, 0u);
    ASSERT_TRUE(eventually([&] { return db_now_us(*raw_, e_) > us_of(s.expires_at()); }, 10s));
    auto second_pass = r.reap_once();
    EXPECT_EQ(second_pass.purged, 1u) << "the reaper did not delete a row whose expiry the database's clock had passed";
    EXPECT_FALSE(read_row(*raw_, e_, soon, tables_).has_value());
}

// ------------------------------------------------------------------------------------------ E02

#ifdef SQLOCK_REAPER_BIN
/// One sqlock-reaper daemon of E02: its clock, how it was moved, and the logs of each of its runs
/// (a run that libfaketime hung is replaced by one under the system_clock preload).
struct reaper_daemon {
    std::string label;
    std::chrono::seconds skew{0};
    std::string mover = "none (the host's clock)";
    std::vector<fs::path> outs, errs;
    std::optional<child> proc;
    std::string hang;  ///< the hung libfaketime run's description, when there was one
};

/// The JSON objects a reaper printed in `file` (one a line); a line that is not JSON goes to `bad`.
std::vector<nlohmann::json> json_lines(fs::path const& file, std::vector<std::string>& bad) {
    std::vector<nlohmann::json> out;
    for (auto const& l : lines_of(file)) {
        if (l.empty()) continue;
        auto j = nlohmann::json::parse(l, nullptr, false);
        if (j.is_discarded() || !j.is_object()) bad.push_back(file.filename().string() + ": " + l);
        else out.push_back(std::move(j));
    }
    return out;
}

std::size_t passes_in(fs::path const& file) {
    std::vector<std::string> bad;
    std::size_t n = 0;
    for (auto const& j : json_lines(file, bad)) n += j.value("event", "") == "pass";
    return n;
}
#endif

TEST_P(HolderReaper, E02_TwoReapersWithSkewedClocks) {
    // Two sqlock-reaper daemons on the same tables, as if on two hosts whose clocks disagree: on
    // PostgreSQL and MariaDB one reaper's wall clock runs 60 s ahead and the other's 60 s behind
    // (libfaketime; the system_clock preload if libfaketime hangs one). The reaper deletes by the
    // database's clock, so neither may delete a live lease. On SQLite the database's clock IS the
    // calling process's clock: a skewed reaper there is the documented one-host-clock limit
    // (docs/guarantees.md; Engines/Characterization.SqliteProcessWithAClockAheadTakesOverALiveLease
    // shows a skewed SQLite process breaking a live lease), so both SQLite reapers run on the host's
    // clock; they are still two reapers in two processes racing each other and the clients.
    // Meanwhile 8 client threads take 8 names with TTLs of 0.5-2 s and release, renew, or abandon.
    // Checks: (1) every audited delete that is not a client's release deleted an expired row
    // (expires_at <= its db_time); (2) the purged counts the reapers printed add up to exactly those
    // deletes (none counted twice, none missed); (3) once the clients stop and every lease ran out,
    // no row is left after two more passes of each reaper; (4) the reapers report no error or
    // warning (deadlocks, lock waits and SQLITE_BUSY are retried inside) and exit 0 on SIGTERM;
    // (5) K1 over the audit.
#ifndef SQLOCK_REAPER_BIN
    GTEST_SKIP() << "sqlock-reaper is not built (SQLOCK_BUILD_REAPER=OFF)";
#else
    using namespace sqlock_battery;
    scenario_summary_on_exit summary;  // battery.sh's end-of-run table
    // The clients' schedule: a fixed seed in CI, a fresh one per soak round (SQLOCK_SOAK=1), replayed
    // with SQLOCK_BATTERY_SEED; 5 s of clients in CI, 50 s under soak.
    std::uint64_t const seed = scenario_seed(0xe02);
    summary.seed = seed;
    std::cout << "E02: seed " << seed << " (replay the clients' schedule with SQLOCK_BATTERY_SEED=" << seed << ")\n";
    int const threads = 8, names = 8;
    milliseconds const run_for = scaled(5s);
    std::chrono::seconds const hang_limit = 20s;
    auto const dir = work();
    if (e_ == engine::postgresql) *raw_ << "SET client_min_messages = warning";  // the audit's IF EXISTS notices
    install_audit(*raw_, e_, tables_);
    bool const skewed = e_ != engine::sqlite;
    if (skewed && client_clock_mover() == clock_mover::libfaketime && !fs::exists(libfaketime_path())) {
        if (in_ci()) FAIL() << "libfaketime is not installed (" << libfaketime_path() << "): scripts/deps.sh --servers";
        GTEST_SKIP() << "libfaketime is not installed (" << libfaketime_path() << ")";
    }

    std::vector<reaper_daemon> reapers(2);
    reapers[0].label = skewed ? "+60 s" : "host clock #1";
    reapers[0].skew = skewed ? 60s : 0s;
    reapers[1].label = skewed ? "-60 s" : "host clock #2";
    reapers[1].skew = skewed ? -60s : 0s;
    auto start = [&](std::size_t i, clock_mover m) {
        auto& r = reapers[i];
        fs::path const base = dir / (std::string("reaper").append(std::to_string(i)) +
                                     std::string("-").append(std::to_string(r.outs.size())));
        std::vector<std::string> args{SQLOCK_REAPER_BIN, "--db", url_,     "--interval",     "200ms",
                                      "--grace",         "0s",   "--json", "--table-prefix", tables_};
        std::vector<std::string> env;
        if (r.skew != 0s) {
            fs::path const clock = base.string() + ".clock";
            if (m == clock_mover::libfaketime) {
                // The environment moves a program's wall clock (else the test would prove nothing):
                // date(1) under it is off by the skew. If libfaketime hangs date(1), it is described and
                // kept, and the reaper runs under the system_clock preload at once.
                set_clock_file(m, clock, r.skew);
                auto const probe = run_in_env({"/bin/date", "+%s"}, clock_file_environment(m, clock), hang_limit,
                                              describe_running_process);
                long long const host = std::chrono::duration_cast<std::chrono::seconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count();
                if (probe.finished) {
                    long long const off = std::stoll(probe.out.empty() ? "0" : probe.out) - host;
                    EXPECT_LE(std::abs(off - r.skew.count()), 10)
                        << "date(1) under the reaper's libfaketime environment was " << off << " s off the host's "
                        << "clock, not " << r.skew.count() << " s: the clock mover does not work here";
                } else {
                    r.hang = probe.diagnosis;
                    report_libfaketime_hang("date(1) (the reaper's " + r.label + " clock probe) for " +
                                                std::to_string(hang_limit.count()) + " s",
                                            r.hang);
                    m = clock_mover::system_clock_preload;
                }
            }
            set_clock_file(m, clock, r.skew);
            env = clock_file_environment(m, clock);
            r.mover = to_string(m);
        }
        r.outs.push_back(base.string() + ".out");
        r.errs.push_back(base.string() + ".err");
        r.proc.reset();
        r.proc.emplace(args, env, base, r.skew == 0s);
    };
    auto passes = [&](std::size_t i) { return passes_in(reapers[i].outs.back()); };
    for (std::size_t i = 0; i < reapers.size(); ++i) start(i, client_clock_mover());
    // Each reaper reports a first pass; a skewed one that doesn't within the limit was hung by
    // libfaketime (as a client once was in CI): it is described, kept, and replaced by one whose
    // system_clock is moved by tests/clock_shift_preload.cpp.
    for (std::size_t i = 0; i < reapers.size(); ++i) {
        auto& r = reapers[i];
        if (eventually([&] { return passes(i) >= 1; }, hang_limit)) continue;
        ASSERT_FALSE(r.proc->wait_exit(50ms).has_value())
            << "the reaper (" << r.label << ") ended before its first pass: " << slurp(r.errs.back());
        ASSERT_EQ(r.mover, to_string(clock_mover::libfaketime)) << "the reaper (" << r.label << ") reported no pass in "
                                                                << hang_limit.count() << " s: " << slurp(r.errs.back());
        r.hang = describe_running_process(r.proc->pid());
        report_libfaketime_hang("sqlock-reaper (" + r.label +
                                    std::string(") for ").append(std::to_string(hang_limit.count())) + " s",
                                r.hang);
        start(i, clock_mover::system_clock_preload);
        ASSERT_TRUE(eventually([&] { return passes(i) >= 1; }, hang_limit))
            << "the reaper (" << r.label
            << ") reported no pass under the system_clock preload either: " << slurp(r.errs.back());
    }

    // The clients. What each thread did; the (owner, token) of every grant it released itself.
    using grant_key = std::pair<std::string, std::int64_t>;
    struct client_log {
        std::set<grant_key> released;  ///< release() returned: the audit's delete of it is the client's
        std::set<grant_key> ran_out;   ///< release() found the lease run out: its polite delete may have run
        long long grants = 0, busy = 0, releases = 0, renews = 0, renew_lost = 0, release_lost = 0, abandoned = 0;
        long long timeouts = 0;  ///< sqlock::timeout (typed; tolerated: a busy machine)
        std::vector<std::string> errors;
    };
    sqlock::store clients(url_, {.pool_size = static_cast<std::size_t>(threads) + 4, .table_prefix = tables_});
    std::vector<client_log> logs(threads);
    // Leases given up without a release (abandoned, or lost at a renewal): kept alive until the audit is
    // read, so that no destructor's release deletes their rows (battery_worker.cpp's abandon()).
    std::vector<std::vector<lease> > kept(threads);
    auto const until = steady::now() + run_for;
    std::vector<std::thread> pool;
    for (int k = 0; k < threads; ++k)
        pool.emplace_back([&, k] {
            auto& log = logs[k];
            std::mt19937_64 rng(seed + static_cast<std::uint64_t>(k));
            auto uniform = [&](long long lo, long long hi) {
                return std::uniform_int_distribution<long long>(lo, hi)(rng);
            };
            while (steady::now() < until) {
                std::string const name = n(std::string("e02/L").append(std::to_string(uniform(0, names - 1))));
                milliseconds const ttl(uniform(500, 2000));
                auto locks = sqlock::table_locker(clients, {.ttl = ttl, .auto_renew = false});
                std::optional<lease> got;
                try {
                    got = locks.try_acquire(name);
                } catch (sqlock::timeout const&) {  // typed: the pool or the SQLite file stayed busy under load
                    ++log.timeouts;
                } catch (std::exception const& e) {
                    log.errors.push_back("try_acquire: " + describe(e));
                }
                if (!got) {  // a pause, so that expired rows are left to the reapers too, not all taken over
                    ++log.busy;
                    std::this_thread::sleep_for(milliseconds(uniform(20, 120)));
                    continue;
                }
                ++log.grants;
                auto const action = uniform(0, 2);
                if (action == 2) {  // abandon: never released, never renewed
                    ++log.abandoned;
                    kept[k].push_back(std::move(*got));
                    continue;
                }
                bool renewed_ok = true;
                if (action == 1) {  // renew twice, each after a third of the TTL
                    for (int i = 0; i < 2 && renewed_ok; ++i) {
                        std::this_thread::sleep_for(ttl / 3);
                        try {
                            got->renew();
                            ++log.renews;
                        } catch (sqlock::lease_lost const&) {
                            ++log.renew_lost;  // a late renewal (a noisy machine): the row is the reaper's now
                            renewed_ok = false;
                        } catch (sqlock::timeout const&) {
                            ++log.timeouts;
                            renewed_ok = false;
                        } catch (std::exception const& e) {
                            log.errors.push_back("renew: " + describe(e));
                            renewed_ok = false;
                        }
                    }
                } else {
                    std::this_thread::sleep_for(milliseconds(uniform(0, ttl.count() / 4)));
                }
                if (!renewed_ok || got->state() != lease_state::held) {
                    kept[k].push_back(std::move(*got));
                    continue;
                }
                grant_key const key{got->owner(), got->token()};
                try {
                    got->release();
                    log.released.insert(key);
                    ++log.releases;
                } catch (sqlock::lease_lost const& e) {
                    ++log.release_lost;
                    // "had run out": the lease's local validity ended before the release, which then
                    // deleted the row if it was still there (lease_row::release_hold). Otherwise the
                    // row was no longer ours and the client deleted nothing.
                    if (std::string_view(e.what()).find("had run out") != std::string_view::npos)
                        log.ran_out.insert(key);
                } catch (sqlock::timeout const&) {
                    ++log.timeouts;
                    log.ran_out.insert(key);  // whether its DELETE ran is not known
                } catch (std::exception const& e) {
                    log.errors.push_back("release: " + describe(e));
                    log.ran_out.insert(key);
                }
            }
        });
    for (auto& t : pool) t.join();
    client_log all;
    for (auto& l : logs) {
        all.released.insert(l.released.begin(), l.released.end());
        all.ran_out.insert(l.ran_out.begin(), l.ran_out.end());
        all.grants += l.grants, all.busy += l.busy, all.releases += l.releases, all.renews += l.renews;
        all.renew_lost += l.renew_lost, all.release_lost += l.release_lost, all.abandoned += l.abandoned;
        all.timeouts += l.timeouts;
        all.errors.insert(all.errors.end(), l.errors.begin(), l.errors.end());
    }
    summary.grants = static_cast<std::size_t>(all.grants);
    EXPECT_TRUE(all.errors.empty()) << all.errors.size() << " client calls failed, e.g. " << all.errors.front();

    // (3) Quiescence: every lease runs out within its TTL (at most 2 s); then, after two more passes of
    // each reaper (the second began after the first ended), no row is left.
    std::string const locks_table = tables_ + "_locks";
    auto const live_rows = [&] {
        long long c = 0;
        *raw_ << "SELECT COUNT(*) FROM " + locks_table + " WHERE " + col_us_expr(e_, "expires_at") +
                     " >= " + db_now_us_expr(e_),
            soci::into(c);
        return c;
    };
    ASSERT_TRUE(eventually([&] { return live_rows() == 0; }, 10s))
        << live_rows() << " lock rows were still live 10 s after the clients stopped (TTLs at most 2 s)";
    std::vector<std::size_t> mark;
    for (std::size_t i = 0; i < reapers.size(); ++i) mark.push_back(passes(i));
    for (std::size_t i = 0; i < reapers.size(); ++i)
        ASSERT_TRUE(eventually([&] { return passes(i) >= mark[i] + 2; }, 20s))
            << "the reaper (" << reapers[i].label
            << ") did not complete two passes in 20 s: " << slurp(reapers[i].errs.back());
    auto const remaining = lock_table_rows(*raw_, e_, tables_);
    std::string left;
    for (auto const& r : remaining)
        if (r.expires_at_us < r.db_time_us)
            left += " " + r.lock + std::string(" (token ").append(std::to_string(r.token)) + ", expired " +
                    std::to_string((r.db_time_us - r.expires_at_us) / 1000) + " ms ago)";
    EXPECT_TRUE(left.empty()) << "expired rows were still there after two passes of each reaper (K8):" << left;
    EXPECT_TRUE(remaining.empty()) << remaining.size() << " rows left once every lease had run out";

    // (4) Both reapers stop cleanly on SIGTERM, and reported no error and no warning.
    for (auto& r : reapers) r.proc->signal(SIGTERM);
    for (auto& r : reapers) {
        auto const st = r.proc->wait_exit(15s);
        ASSERT_TRUE(st.has_value()) << "the reaper (" << r.label << ") had not exited 15 s after SIGTERM";
        EXPECT_EQ(exit_text(*st), "exit 0") << "the reaper (" << r.label << "): " << slurp(r.errs.back());
    }
    std::vector<std::uint64_t> purged(reapers.size(), 0);
    std::vector<std::size_t> pass_count(reapers.size(), 0);
    for (std::size_t i = 0; i < reapers.size(); ++i) {
        auto const& r = reapers[i];
        for (std::size_t run = 0; run < r.outs.size(); ++run) {
            bool const hung_run = run + 1 < r.outs.size();  // replaced after a libfaketime hang
            std::vector<std::string> bad;
            for (auto const& j : json_lines(r.outs[run], bad)) {
                if (j.value("event", "") != "pass") {
                    bad.push_back("stdout: " + j.dump());
                    continue;
                }
                ++pass_count[i];
                purged[i] += j.value("purged", std::uint64_t{0});
                if (j.value("live_purged", std::uint64_t{0}) != 0) bad.push_back("live rows purged: " + j.dump());
            }
            for (auto const& j : json_lines(r.errs[run], bad)) {
                auto const ev = j.value("event", "");
                if (ev != "started" && ev != "stopping" && ev != "stopped") bad.push_back("stderr: " + j.dump());
            }
            if (!hung_run) {
                EXPECT_TRUE(bad.empty()) << "the reaper (" << r.label << ") reported " << bad.size()
                                         << " errors or warnings, e.g. " << bad.front();
            }
        }
    }

    // The audit: whose were the deletes?
    auto const audit = dump_audit(*raw_, e_, tables_);
    long long client_deletes = 0, maybe_client_deletes = 0, reaper_deletes = 0, takeovers = 0;
    std::vector<std::string> live_deletes;
    for (auto const& a : audit) {
        takeovers += a.kind == "takeover";
        if (a.kind != "delete") continue;
        grant_key const key{a.owner, a.token};
        if (all.released.count(key) != 0) {
            ++client_deletes;
        } else if (all.ran_out.count(key) != 0) {
            ++maybe_client_deletes;
        } else {
            ++reaper_deletes;
            // (1) A delete that no client made is a reaper's, and must find the row expired by the
            // database's clock at the moment of the delete.
            if (a.expires_at_us > a.db_time_us)
                live_deletes.push_back(a.lock + std::string(" token ").append(std::to_string(a.token)) + " deleted " +
                                       std::to_string((a.expires_at_us - a.db_time_us) / 1000) +
                                       std::string(" ms before its expiry (seq ").append(std::to_string(a.seq)) + ")");
        }
    }
    EXPECT_TRUE(live_deletes.empty()) << live_deletes.size() << " live leases were deleted by a reaper, e.g. "
                                      << live_deletes.front();
    EXPECT_EQ(client_deletes, static_cast<long long>(all.released.size()))
        << "not every release the clients saw succeed shows as a delete in the audit";
    // (2) Every reaper delete counted once, by the reaper that made it. A release whose lease had run
    // out may or may not have deleted its row itself: those deletes may count either way.
    std::uint64_t const reported = std::accumulate(purged.begin(), purged.end(), std::uint64_t{0});
    EXPECT_GE(reported, static_cast<std::uint64_t>(reaper_deletes))
        << "the reapers reported " << reported << " purged rows, the audit shows " << reaper_deletes
        << " deletes by no client: a reaper's delete went uncounted";
    EXPECT_LE(reported, static_cast<std::uint64_t>(reaper_deletes + maybe_client_deletes))
        << "the reapers reported " << reported << " purged rows, the audit shows " << reaper_deletes
        << " deletes by no client (+" << maybe_client_deletes << " that may be a client's): a delete was counted "
        << "twice, or a row counted that was not deleted";
    // (5) K1.
    auto const k1 = k1_db_disjoint(audit);
    EXPECT_TRUE(k1.ok()) << k1.summary();

    // The run did what it says: grants of every kind, and both reapers racing over expired rows.
    EXPECT_GE(all.releases, 1) << "no client released: the scenario proves nothing";
    EXPECT_GE(all.renews, 1) << "no client renewed: the scenario proves nothing";
    EXPECT_GE(all.abandoned, 1) << "no client abandoned a lease: the scenario proves nothing";
    EXPECT_GE(reaper_deletes, 1) << "no reaper deleted anything: the scenario proves nothing";
    std::cout << "E02 " << engine_name(e_) << ": " << all.grants << " grants (" << all.busy << " busy tries), "
              << all.releases << " releases, " << all.renews << " renewals (" << all.renew_lost << " too late), "
              << all.abandoned << " abandoned, " << all.release_lost << " releases lost, " << all.timeouts
              << " timeouts (" << all.ran_out.size() << " releases of unknown effect); audit: " << takeovers
              << " takeovers, " << client_deletes << " client deletes, " << reaper_deletes << " reaper deletes, "
              << maybe_client_deletes << " either; " << k1.summary() << "\n";
    for (std::size_t i = 0; i < reapers.size(); ++i)
        std::cout << "E02 " << engine_name(e_) << ": reaper " << reapers[i].label << " (clock moved by "
                  << reapers[i].mover << (reapers[i].hang.empty() ? "" : ", after libfaketime hung it")
                  << "): " << pass_count[i] << " passes, " << purged[i] << " purged\n";
    kept.clear();  // the given-up leases last: their destructors may delete nothing the audit was read for
#endif
}

INSTANTIATE_TEST_SUITE_P(Engines, HolderReaper, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

}  // namespace
