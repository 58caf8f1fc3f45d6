// sqlock reliability battery — the load of a scenario: one worker process.
//
// T threads loop acquire -> critical section -> release on L locks for D ms, each with a
// locker of its own (owner "<name>.<pid>.t<k>", so a restarted process has new owners), and
// append every step to a history (history.hpp): invoke before acting, ok/fail/info after.
// The critical section:
//   - a fenced write (sqlock::fence) on the resource database, logged as write_fenced: ok with
//     `value`, the resource's own serial number of accepted writes for that lock (its commit
//     order), or fail "sqlock::stale_token: ..." when the fence refused it;
//   - the unfenced counter, a file per lock under the run dir: read, sleep U(0, cs-max-us),
//     write +1 (by rename, so a kill -9 never leaves a torn file), logged as write_unfenced
//     with the value written — only while the lease still says it is held;
//   - optionally a hold of U(hold-min-ms, hold-max-ms) and a second fenced write after it
//     (so a holder paused mid-hold writes again, stale, when it resumes).
// Renewals, failed renewals and losses the locker reports are logged as renew ok (with the
// validity then left) / renew fail / lost ok.
// --own-lock: thread k takes only lock --lock-offset + k (one lock per thread); --rounds N: each
// thread stops after N critical sections.
// --mixed: the mixed-operation storm instead of the loop above: each acquire takes a TTL of
// U(--ttl-min-ms, --ttl-ms), the holder renews explicitly (no watchdog) and writes the fenced
// resource a random number of times, then releases or, with --abandon-pct, abandons the lease:
// it logs that it gave it up (op lost), waits past its local deadline, and writes the fenced
// resource once more with its stale token, on purpose, for the fence to refuse.
// --fuzz: the randomized operation fuzzer and fork nemesis (thread_loop_fuzz; with --kind, on a semaphore's
// permits, an rw lock's shared and exclusive leases or an election's leaderships): one thread, on the
// main thread, making random calls from its seed; with --fork-pct it forks while holding (after the
// grant, inside renew(), inside release()), and its children end by _exit(), exit() or a return
// through main(), some after critical sections of their own (fork_nemesis_suite.cpp, fuzz_suite.cpp).
// --pool-size bounds the store's pooled connections (default threads + 4).
// --mode reaper runs a reaper loop instead (reap ok with `value` = rows purged).
// --stop-after-grant: after each grant is logged, the process stops itself (SIGSTOP) until the
// harness lets it go on (SIGCONT): the harness places a fault there, before the grant's first
// renewal can be sent (scenario::fault_after_grant).
// Built to be killed (SIGKILL) or paused (SIGSTOP) at any moment: every line is flushed as it
// is written, the counter is replaced atomically, and nothing is done at exit that a kill skips.
#include "history.hpp"

#include <sqlock/coordination.hpp>
#include <sqlock/fence.hpp>
#include <sqlock/majority.hpp>
#include <sqlock/sqlock.hpp>

#include <soci/postgresql/soci-postgresql.h>
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>
#include <CLI/CLI.hpp>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <typeinfo>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using sqlock_battery::event;
using sqlock_battery::history_writer;
using std::chrono::milliseconds;
using clock_type = std::chrono::steady_clock;

struct config {
    std::string mode = "worker";
    std::string name = "w";
    std::string history;
    std::string run_dir;
    std::vector<std::string> urls;  // one: single mode; several: majority over them
    std::string tables = "sqlock";
    std::string lock_prefix = "battery/";
    int threads = 4;
    int locks = 1;
    long long duration_ms = 5000;
    long long ttl_ms = 10000;
    long long acquire_wait_ms = 5000;
    long long cs_max_us = 5000;
    long long hold_min_ms = 0;
    long long hold_max_ms = 0;
    bool row = false;
    bool no_renew = false;
    int abandon_pct = 0;
    long long think_max_ms = 0;             // a pause of U(0, think) after each release, so other processes get turns
    std::string resource_backend = "none";  // postgresql | sqlite3 | none
    std::string resource_connect;
    std::string resource_tables = "sqlock";
    long long lock_wait_timeout_ms = 1000;
    long long io_timeout_ms = 2000;
    long long member_timeout_ms = 0;
    std::int64_t start_mono_ns = 0;  // > 0: every thread starts at this raw monotonic instant
    bool log_busy = false;
    bool stop_after_grant = false;
    long long round_ms = 0;  // > 0 (with start_mono_ns): every acquire starts on a multiple of this after the barrier
    long long linger_ms = 0;
    bool single_try = false;  // try_acquire (one round) instead of a waiting acquire  // stay this long after the last
                              // thread ended (a majority's late give-backs finish)
    std::uint64_t seed = 1;
    int pool_size = 0;      // 0: threads + 4
    bool own_lock = false;  // thread k uses only lock lock_offset + k
    int lock_offset = 0;
    int rounds = 0;      // > 0: each thread stops after this many critical sections
    bool mixed = false;  // the mixed-operation storm (thread_loop_mixed)
    long long ttl_min_ms = 0;
    bool fuzz = false;  // the randomized operation fuzzer (thread_loop_fuzz), one thread: the main thread
    int fork_pct = 0;   // --fuzz: percent of a holder's steps that fork (after acquire, during renew, during release)
    // --kind: the coordination kinds of issue 22 (thread_loop_coord); "lock" is the plain locker
    std::string kind = "lock";   // lock | semaphore | rw | election
    int permits = 2;             // semaphore: N
    int writer_pct = 30;         // rw: percent of acquires that are writes
    bool observer = false;       // election: this process observes (thread k follows election L<k>) instead
    long long observe_ms = 100;  // election: observe_interval
    int admin_pct = 0;           // --fuzz, semaphore | rw: percent of idle steps that are an operator's action
    // reaper mode
    long long reaper_interval_ms = 100;
    long long reaper_grace_ms = 0;
    int reaper_batch = 100;
    long long token_horizon_ms = -1;  // < 0: never purge counters
};

std::int64_t us_of(sqlock::db_time t) { return t.time_since_epoch().count(); }

/// "sqlock::<type>: <what>" for the library's errors (K9 reads the prefix); other exceptions
/// keep their own type name, which K9 then reports as untyped.
std::string error_text(std::exception const& e) {
    std::string type;
    if (dynamic_cast<sqlock::stale_token const*>(&e)) type = "sqlock::stale_token";
    else if (dynamic_cast<sqlock::timeout const*>(&e)) type = "sqlock::timeout";
    else if (dynamic_cast<sqlock::cancelled const*>(&e)) type = "sqlock::cancelled";
    else if (dynamic_cast<sqlock::lease_lost const*>(&e)) type = "sqlock::lease_lost";
    else if (dynamic_cast<sqlock::schema_missing const*>(&e)) type = "sqlock::schema_missing";
    else if (dynamic_cast<sqlock::backend_unavailable const*>(&e)) type = "sqlock::backend_unavailable";
    else if (dynamic_cast<sqlock::in_doubt const*>(&e)) type = "sqlock::in_doubt";
    else if (dynamic_cast<sqlock::backend_error const*>(&e)) type = "sqlock::backend_error";
    else if (dynamic_cast<sqlock::usage_error const*>(&e)) type = "sqlock::usage_error";
    else type = typeid(e).name();
    return type + ": " + e.what();
}

/// The lease a thread holds, for its locker's event hook (renewals report the validity left).
struct held_slot {
    std::mutex mutex;
    sqlock::lease const* lease = nullptr;
};

/// Abandoned leases: moved here and never destroyed (their destructors would release them). The
/// container is never freed, and stays reachable from this static, so LeakSanitizer does not count it.
void abandon(sqlock::lease l) {
    static std::mutex mutex;
    static auto* const kept = new std::vector<sqlock::lease>();
    std::lock_guard lock(mutex);
    kept->push_back(std::move(l));
}

/// Thrown in a forked child that ends by returning through main(): it unwinds every frame the
/// child inherited (the parent's locker, lease and stores are destroyed in the child).
struct fork_return {
    int code = 0;
};

enum class fork_point { idle, after_acquire, renewal, release };
enum class child_end { underscore_exit, return_main, exit_call };

char const* to_string(fork_point p) {
    switch (p) {
        case fork_point::idle: return "idle";
        case fork_point::after_acquire: return "acquired";
        case fork_point::renewal: return "renewing";
        case fork_point::release: return "releasing";
    }
    return "?";
}

char const* to_string(child_end e) {
    switch (e) {
        case child_end::underscore_exit: return "_exit";
        case child_end::return_main: return "return";
        case child_end::exit_call: return "exit";
    }
    return "?";
}

class worker {
public:
    explicit worker(config c) : c_(std::move(c)), h_(std::make_unique<history_writer>(c_.history, c_.name)) {
        sqlock::store_options so{.pool_size =
                                     static_cast<std::size_t>(c_.pool_size > 0 ? c_.pool_size : c_.threads + 4),
                                 .table_prefix = c_.tables,
                                 .connect_timeout = 5s,
                                 .lock_wait_timeout = milliseconds(c_.lock_wait_timeout_ms),
                                 .io_timeout = milliseconds(c_.io_timeout_ms)};
        for (auto const& url : c_.urls) open_store(url, so);
    }

    /// Opens a store; a session the nemesis kills while the worker starts (mixed_faults' session kill) is opened
    /// again, up to three times: nothing is logged before the stores are open, so the history loses nothing.
    void open_store(std::string const& url, sqlock::store_options const& so) {
        for (int attempt = 1;; ++attempt) {
            try {
                stores_.emplace_back(url, so);
                return;
            } catch (sqlock::backend_unavailable const& e) {
                if (attempt == 3) throw;
                std::cerr << c_.name << ": opening the store failed (" << e.what() << "): again\n";
                std::this_thread::sleep_for(200ms);
            }
        }
    }

    int run() {
        if (c_.fuzz) {
            // On the main thread, so that a forked child can end by returning through main().
            thread_main(0);
            reap_children(true);
            return failed_.load() ? 2 : 0;
        }
        std::vector<std::thread> threads;
        for (int k = 0; k < c_.threads; ++k) threads.emplace_back([this, k] { thread_main(k); });
        for (auto& t : threads) t.join();
        if (c_.linger_ms > 0) std::this_thread::sleep_for(milliseconds(c_.linger_ms));
        return failed_.load() ? 2 : 0;
    }

private:
    sqlock::locker make_locker(std::string const& owner, std::shared_ptr<held_slot> const& slot, int k,
                               std::optional<milliseconds> ttl_override = std::nullopt,
                               sqlock::store const* own_store = nullptr) {
        auto hook = [this, slot, owner, k](sqlock::lease_event const& ev) { on_event(ev, *slot, owner, k); };
        auto const ttl = ttl_override.value_or(milliseconds(c_.ttl_ms));
        if (c_.urls.size() == 1) {
            sqlock::store const& db = own_store != nullptr ? *own_store : stores_.front();
            sqlock::locker_options o{.ttl = ttl, .owner = owner, .auto_renew = !c_.no_renew, .on_event = hook};
            return c_.row ? sqlock::row_locker(db, o) : sqlock::table_locker(db, o);
        }
        std::vector<sqlock::locker> members;
        for (auto const& s : stores_) {
            sqlock::locker_options o{.ttl = ttl, .owner = owner, .auto_renew = false};
            members.push_back(c_.row ? sqlock::row_locker(s, o) : sqlock::table_locker(s, o));
        }
        sqlock::majority_options mo{.owner = owner, .auto_renew = !c_.no_renew, .on_event = hook};
        if (c_.member_timeout_ms > 0) mo.member_timeout = milliseconds(c_.member_timeout_ms);
        return sqlock::majority_locker(std::move(members), mo);
    }

    void on_event(sqlock::lease_event const& ev, held_slot& slot, std::string const& owner, int k) {
        using kind = sqlock::lease_event::kind;
        event e{.thread = k, .lock = history_name(ev.name), .owner = row_owner(owner), .token = ev.token};
        switch (ev.what) {
            case kind::busy:
                if (!c_.log_busy) return;
                e.op = "busy";
                e.type = "ok";
                break;
            case kind::renewed: {
                // Logged (under the slot's mutex) only while the worker still has the lease in its slot,
                // which it empties before it logs the release's invoke: a renewal the renewer finished
                // just before a release, whose hook runs after it, must not appear after that release.
                std::lock_guard lock(slot.mutex);
                if (slot.lease == nullptr || slot.lease->token() != ev.token) return;
                e.op = "renew";
                e.type = "ok";
                e.expires_at_us = us_of(slot.lease->expires_at());
                e.validity_ms = std::chrono::duration_cast<milliseconds>(slot.lease->remaining()).count();
                h_->write(std::move(e));
                return;
            }
            case kind::renew_failed:
                e.op = "renew";
                e.type = "fail";
                e.error = "sqlock::backend_unavailable: " + std::string(ev.detail);
                break;
            case kind::lost:
                e.op = "lost";
                e.type = "ok";
                e.error = "sqlock::lease_lost: " + std::string(ev.detail);
                break;
            default: return;
        }
        h_->write(std::move(e));
    }

    std::unique_ptr<soci::session> open_resource() {
        if (c_.resource_backend == "postgresql")
            return std::make_unique<soci::session>(*soci::factory_postgresql(), c_.resource_connect);
        if (c_.resource_backend == "sqlite3")
            return std::make_unique<soci::session>(*soci::factory_sqlite3(), c_.resource_connect);
        return nullptr;
    }

    /// The fenced write: fence check and the resource's serial number of the lock, one transaction.
    void fenced_write(soci::session& res, sqlock::fence const& fence, event base) {
        base.op = "write_fenced";
        base.type = "invoke";
        h_->write(base);
        bool const lite = c_.resource_backend == "sqlite3";
        std::string const values = c_.resource_tables + "_values";
        try {
            res << (lite ? "BEGIN IMMEDIATE" : "BEGIN");
            long long serial = 0;
            try {
                fence.check_and_set(res, base.lock, *base.token);
                res << "INSERT INTO " + values +
                           " (lock_name, value) VALUES (:l, 1) ON CONFLICT (lock_name) DO UPDATE SET "
                           "value = " +
                           values + ".value + 1 RETURNING value",
                    soci::use(base.lock), soci::into(serial);
                res << "COMMIT";
            } catch (...) {
                try {
                    res << "ROLLBACK";
                } catch (...) {}
                throw;
            }
            base.type = "ok";
            base.value = serial;
        } catch (sqlock::stale_token const& e) {
            base.type = "fail";
            base.error = error_text(e);
        } catch (std::exception const& e) {
            base.type = "info";  // the resource failed: not the lock's doing
            base.error = "resource: " + error_text(e);
            failed_ = true;
            std::cerr << c_.name << ": resource write failed: " << e.what() << "\n";
        }
        h_->write(std::move(base));
    }

    /// The unfenced counter of lock i: read, pause, write + 1 (atomically by rename).
    void unfenced_write(int i, event base, std::mt19937_64& rng) {
        auto const path = std::filesystem::path(c_.run_dir) / ("counter-" + std::to_string(i));
        base.op = "write_unfenced";
        base.type = "invoke";
        h_->write(base);
        long long value = 0;
        {
            std::ifstream in(path);
            if (in && !(in >> value)) value = 0;
        }
        if (c_.cs_max_us > 0)
            std::this_thread::sleep_for(
                std::chrono::microseconds(std::uniform_int_distribution<long long>(0, c_.cs_max_us)(rng)));
        auto tmp = path;
        tmp += "." + c_.name + "." + std::to_string(base.thread) + ".tmp";
        {
            std::ofstream out(tmp, std::ios::trunc);
            out << value + 1 << "\n";
            out.flush();
            if (!out) throw std::runtime_error("cannot write " + tmp.string());
        }
        std::filesystem::rename(tmp, path);
        base.type = "ok";
        base.value = value + 1;
        h_->write(std::move(base));
    }

    void thread_main(int k) {
        try {
            if (c_.fuzz) thread_loop_fuzz(k);
            else if (c_.kind != "lock") thread_loop_coord(k);
            else if (c_.mixed) thread_loop_mixed(k);
            else thread_loop(k);
        } catch (std::exception const& e) {
            failed_ = true;
            std::cerr << c_.name << "[" << ::getpid() << "] thread " << k << ": " << error_text(e) << "\n";
        }
    }

    void thread_loop(int k) {
        std::mt19937_64 rng(c_.seed * 1000003 + static_cast<std::uint64_t>(k) * 7919 + 17);
        std::string const owner = c_.name + "." + std::to_string(::getpid()) + ".t" + std::to_string(k);
        auto slot = std::make_shared<held_slot>();
        sqlock::locker locker = make_locker(owner, slot, k);
        auto [res, fence] = open_fenced_resource();
        if (c_.start_mono_ns > 0) {
            // The start barrier: every thread of every worker begins at the same instant.
            while (sqlock_battery::raw_monotonic_ns() < c_.start_mono_ns)
                std::this_thread::sleep_for(std::chrono::nanoseconds(
                    std::min<std::int64_t>(c_.start_mono_ns - sqlock_battery::raw_monotonic_ns(), 1'000'000)));
        }
        auto const end = clock_type::now() + milliseconds(c_.duration_ms);
        std::uniform_int_distribution<int> pick(0, c_.locks - 1);
        std::int64_t round = -1;
        int sections = 0;
        while (clock_type::now() < end && (c_.rounds <= 0 || sections++ < c_.rounds)) {
            if (c_.round_ms > 0 && c_.start_mono_ns > 0) {
                // Rounds: every thread of every worker invokes its acquire at the same instants.
                std::int64_t const period = c_.round_ms * 1'000'000;
                std::int64_t const now = sqlock_battery::raw_monotonic_ns();
                round = std::max(round + 1, (now - c_.start_mono_ns + period - 1) / period);
                std::int64_t const at = c_.start_mono_ns + round * period;
                while (sqlock_battery::raw_monotonic_ns() < at)
                    std::this_thread::sleep_for(std::chrono::nanoseconds(
                        std::min<std::int64_t>(at - sqlock_battery::raw_monotonic_ns(), 1'000'000)));
                if (clock_type::now() >= end) break;
            }
            int const i = c_.own_lock ? c_.lock_offset + k : pick(rng);
            std::string const name = c_.lock_prefix + "L" + std::to_string(i);
            event base{.thread = k, .lock = name, .owner = owner};
            std::optional<sqlock::lease> lease;
            if (!acquire_logged(locker, base, c_.single_try ? "one try" : nullptr, 20, lease, *slot, rng)) continue;
            if (c_.stop_after_grant) ::raise(SIGSTOP);

            // The critical section.
            if (fence) fenced_write(*res, *fence, base);
            if (lease->held()) unfenced_write(i, base, rng);
            if (c_.hold_max_ms > 0) {
                std::this_thread::sleep_for(
                    milliseconds(std::uniform_int_distribution<long long>(c_.hold_min_ms, c_.hold_max_ms)(rng)));
                if (fence) fenced_write(*res, *fence, base);
            }

            {
                std::lock_guard lock(slot->mutex);
                slot->lease = nullptr;
            }
            if (c_.abandon_pct > 0 && std::uniform_int_distribution<int>(0, 99)(rng) < c_.abandon_pct) {
                // Abandoned: never released, never renewed (--no-renew); its row expires and is
                // reaped or taken over. The lease object is kept until the process ends, and never
                // destroyed, so that its destructor does not release it (kept reachable: not a
                // leak to LeakSanitizer).
                // Logged as the client giving the lease up (op lost): it no longer believes it holds it.
                event ab = base;
                ab.op = "lost";
                ab.type = "ok";
                ab.error = "abandoned by the worker: never released, left to expire";
                h_->write(std::move(ab));
                abandon(std::move(*lease));
                lease.reset();
                continue;
            }
            release_logged(base, *lease);
            lease.reset();
            if (c_.think_max_ms > 0)
                std::this_thread::sleep_for(
                    milliseconds(std::uniform_int_distribution<long long>(0, c_.think_max_ms)(rng)));
        }
    }

    /// A thread's fenced resource: its own session and fence (both empty without a resource).
    std::pair<std::unique_ptr<soci::session>, std::optional<sqlock::fence>> open_fenced_resource() {
        auto res = open_resource();
        if (res && c_.resource_backend == "postgresql") *res << "SET synchronous_commit = off";
        std::optional<sqlock::fence> fence;
        if (res)
            fence.emplace(c_.resource_backend == "postgresql" ? sqlock::engine::postgresql : sqlock::engine::sqlite,
                          c_.resource_tables);
        return {std::move(res), std::move(fence)};
    }

    /// Logs an acquire that threw, then pauses 10 ms.
    /// One acquire of `base.lock`, logged: a single try_acquire when `try_what` is given (busy is
    /// logged as a fail naming it, then a pause of 1..`busy_pause_ms` ms) or a waiting acquire. On a
    /// grant `lease` holds it, `slot` points at it and `base.token` is its token.
    bool acquire_logged(sqlock::locker& locker, event& base, char const* try_what, long long busy_pause_ms,
                        std::optional<sqlock::lease>& lease, held_slot& slot, std::mt19937_64& rng) {
        return acquire_logged([&] { return locker.try_acquire(base.lock); },
                              [&] { return locker.acquire(base.lock, milliseconds(c_.acquire_wait_ms)); }, base,
                              try_what, busy_pause_ms, lease, slot, rng);
    }

    /// As above, through `try_get` (a try) or `get` (a waiting acquire): a coordination kind's calls.
    bool acquire_logged(std::function<std::optional<sqlock::lease>()> const& try_get,
                        std::function<sqlock::lease()> const& get, event& base, char const* try_what,
                        long long busy_pause_ms, std::optional<sqlock::lease>& lease, held_slot& slot,
                        std::mt19937_64& rng) {
        write_invoke(base, "acquire");
        try {
            if (try_what != nullptr) {
                auto got = try_get();
                if (!got) {
                    event out = base;
                    out.op = "acquire";
                    out.type = "fail";
                    out.error = std::string("sqlock::busy: held by another owner (") + try_what + ")";
                    h_->write(std::move(out));
                    std::this_thread::sleep_for(
                        milliseconds(std::uniform_int_distribution<long long>(1, busy_pause_ms)(rng)));
                    return false;
                }
                lease.emplace(std::move(*got));
            } else {
                lease.emplace(get());
            }
        } catch (std::exception const& e) {
            acquire_failed(base, e);
            return false;
        }
        {
            std::lock_guard lock(slot.mutex);
            slot.lease = &*lease;
        }
        base.token = lease->token();
        granted(base, *lease);
        return true;
    }

    void acquire_failed(event out, std::exception const& e) {
        out.op = "acquire";
        // Definitely nothing held: timeout, unreachable (majority: too few members),
        // usage. An unknown outcome (in_doubt, anything else) is info.
        // With --admin-pct a semaphore's N changes during the run: a semaphore of another N is refused
        // (usage_error, before any grant) and draws its N again (thread_loop_fuzz).
        bool const refused_n =
            c_.admin_pct > 0 && c_.kind == "semaphore" && dynamic_cast<sqlock::usage_error const*>(&e) != nullptr;
        if (refused_n) definition_refused_ = true;
        bool const definite = dynamic_cast<sqlock::timeout const*>(&e) ||
                              dynamic_cast<sqlock::backend_unavailable const*>(&e) ||
                              dynamic_cast<sqlock::cancelled const*>(&e) || refused_n;
        out.type = definite ? "fail" : "info";
        out.error = error_text(e);
        auto const lock = out.lock;
        h_->write(std::move(out));
        if (!definite && !dynamic_cast<sqlock::error const*>(&e)) {
            failed_ = true;  // not a lock error: a usage error or a bug; the run fails, and says why
            std::cerr << c_.name << "[" << ::getpid() << "]: acquire of '" << lock << "' failed: " << error_text(e)
                      << "\n";
        }
        std::this_thread::sleep_for(10ms);
    }

    /// Logs a grant (`base` carries its token).
    void granted(event ok, sqlock::lease const& lease) {
        ok.op = "acquire";
        ok.type = "ok";
        ok.db_time_us = us_of(lease.created_at());
        ok.expires_at_us = us_of(lease.expires_at());
        ok.validity_ms = std::chrono::duration_cast<milliseconds>(lease.remaining()).count();
        h_->write(std::move(ok));
    }

    void write_invoke(event ev, char const* op) {
        ev.op = op;
        ev.type = "invoke";
        h_->write(std::move(ev));
    }

    /// Runs `call` between its logged invoke and its completion: ok (then `on_ok` adds to the event),
    /// fail when the lease was lost, info for any other error. Returns whether it was ok.
    template <class Call, class OnOk>
    bool logged(event ev, char const* op, Call&& call, OnOk&& on_ok) {
        ev.op = op;
        write_invoke(ev, op);
        try {
            call();
            ev.type = "ok";
            on_ok(ev);
        } catch (sqlock::lease_lost const& e) {
            ev.type = "fail";
            ev.error = error_text(e);
        } catch (std::exception const& e) {
            ev.type = "info";
            ev.error = error_text(e);
        }
        bool const ok = ev.type == "ok";
        h_->write(std::move(ev));
        return ok;
    }

    void release_logged(event rel, sqlock::lease& lease) {
        logged(
            std::move(rel), "release", [&] { lease.release(); }, [](event&) {});
    }

    /// An explicit renewal (ok with the expiry and validity then left).
    bool renew_logged(event ev, sqlock::lease& lease) {
        return logged(
            std::move(ev), "renew", [&] { lease.renew(); },
            [&](event& ok) {
                ok.expires_at_us = us_of(lease.expires_at());
                ok.validity_ms = std::chrono::duration_cast<milliseconds>(lease.remaining()).count();
            });
    }

    // ---------------------------------------------------------------- --kind: semaphores, rw locks, elections

    /// The name a history records for a lease of the coordination kinds: the user's name X, whatever row the
    /// library keeps it in (a permit slot X U+001F p U+001F k, a reader's row X U+001F r U+001F hex).
    [[nodiscard]] std::string history_name(std::string_view row_name) const {
        if (c_.kind == "lock") return std::string(row_name);
        return std::string(row_name.substr(0, row_name.find('\x1f')));
    }

    /// An election's value, and the owner column of its leader's row (owner id U+001F value): the audit's owner,
    /// which the history's owner must match (K1-reap, K8).
    static std::string campaign_value(std::string const& owner) { return "v-" + owner; }
    [[nodiscard]] std::string row_owner(std::string const& owner) const {
        return c_.kind == "election" ? owner + '\x1f' + campaign_value(owner) : owner;
    }

    /// --kind semaphore | rw | election: thread k loops acquire -> critical section -> release on the locks
    /// L0 .. L<locks-1>, as thread_loop does, through a semaphore of --permits, an rw lock (--writer-pct percent
    /// of the acquires write, the others read: a shared grant is logged with value 1) or an election (campaign
    /// with value "v-<owner>", lead, resign). Writers and leaders write the fenced resource with their token and
    /// the unfenced counter; a permit holder writes the fenced resource under its slot's row name (each slot has
    /// its own token counter), readers write nothing. Every event names the user's name (history_name).
    /// --observer: thread k < locks runs election::observe on L<k> until the run ends, logging each report as op
    /// observe, type ok, with the term as token and the leader's owner (none: no token, no owner).
    void thread_loop_coord(int k) {
        std::mt19937_64 rng(c_.seed * 1000003 + static_cast<std::uint64_t>(k) * 7919 + 17);
        std::string const owner = c_.name + "." + std::to_string(::getpid()) + ".t" + std::to_string(k);
        auto slot = std::make_shared<held_slot>();
        sqlock::locker locker = make_locker(owner, slot, k);
        if (c_.observer) {
            observe_loop(k, locker);
            return;
        }
        auto [res, fence] = open_fenced_resource();
        std::optional<sqlock::semaphore> sem;
        std::optional<sqlock::rw_locker> rw;
        std::optional<sqlock::election> elect;
        if (c_.kind == "semaphore") sem.emplace(locker, c_.permits);
        else if (c_.kind == "rw") rw.emplace(locker);
        else elect.emplace(locker, sqlock::election_options{.observe_interval = milliseconds(c_.observe_ms)});
        auto const end = clock_type::now() + milliseconds(c_.duration_ms);
        std::uniform_int_distribution<int> pick(0, c_.locks - 1);
        int sections = 0;
        while (clock_type::now() < end && (c_.rounds <= 0 || sections++ < c_.rounds)) {
            int const i = pick(rng);
            std::string const name = c_.lock_prefix + "L" + std::to_string(i);
            bool const shared = rw && std::uniform_int_distribution<int>(0, 99)(rng) >= c_.writer_pct;
            event base{.thread = k, .lock = name, .owner = row_owner(owner)};
            if (shared) base.value = 1;
            write_invoke(base, "acquire");
            std::optional<sqlock::lease> lease;
            std::optional<sqlock::leadership> leader;
            auto const wait = milliseconds(c_.acquire_wait_ms);
            try {
                if (sem) lease.emplace(sem->acquire(name, wait));
                else if (rw) lease.emplace(shared ? rw->acquire_shared(name, wait) : rw->acquire(name, wait));
                else leader.emplace(elect->campaign(name, campaign_value(owner), wait));
            } catch (std::exception const& e) {
                acquire_failed(base, e);
                continue;
            }
            sqlock::lease& held = leader ? leader->lease() : *lease;
            {
                std::lock_guard lock(slot->mutex);
                slot->lease = &held;
            }
            base.token = held.token();
            granted(base, held);
            if (c_.stop_after_grant) ::raise(SIGSTOP);

            // The critical section. A permit's fence is its slot's (the row's name, U+001F as '/'); readers write
            // nothing.
            event fenced = base;
            if (sem) {
                fenced.lock = held.name();  // a fence's name may not hold U+001F, a slot's row name does
                std::replace(fenced.lock.begin(), fenced.lock.end(), '\x1f', '/');
            }
            bool const fence_it = fence && !shared && (!sem || fenced.lock != name);
            if (fence_it) fenced_write(*res, *fence, fenced);
            if (!shared && !sem && held.held()) unfenced_write(i, base, rng);
            if (c_.hold_max_ms > 0) {
                std::this_thread::sleep_for(
                    milliseconds(std::uniform_int_distribution<long long>(c_.hold_min_ms, c_.hold_max_ms)(rng)));
                if (fence_it) fenced_write(*res, *fence, fenced);
            }
            {
                std::lock_guard lock(slot->mutex);
                slot->lease = nullptr;
            }
            release_logged(base, held);  // a leadership's resign() is its lease's release
            if (c_.think_max_ms > 0)
                std::this_thread::sleep_for(
                    milliseconds(std::uniform_int_distribution<long long>(0, c_.think_max_ms)(rng)));
        }
    }

    /// --observer: follows election L<k> until the run's end (see thread_loop_coord).
    void observe_loop(int k, sqlock::locker const& locker) {
        if (k >= c_.locks) return;
        std::string const name = c_.lock_prefix + "L" + std::to_string(k);
        sqlock::election elect(locker, sqlock::election_options{.observe_interval = milliseconds(c_.observe_ms)});
        auto const end = clock_type::now() + milliseconds(c_.duration_ms);
        std::stop_source stop;
        std::jthread timer([&](std::stop_token quit) {
            while (!quit.stop_requested() && clock_type::now() < end) std::this_thread::sleep_for(20ms);
            stop.request_stop();
        });
        try {
            elect.observe(
                name,
                [&](std::optional<sqlock::leader_info> const& who) {
                    event e{.thread = k, .op = "observe", .type = "ok", .lock = name};
                    if (who) {
                        e.owner = who->owner + '\x1f' + who->value;
                        e.token = who->term;
                        e.db_time_us = us_of(who->elected_at);
                        e.expires_at_us = us_of(who->expires_at);
                    }
                    h_->write(std::move(e));
                },
                stop.get_token());
        } catch (std::exception const& e) {
            h_->write(event{.thread = k, .op = "observe", .type = "info", .lock = name, .error = error_text(e)});
            failed_ = true;
            std::cerr << c_.name << ": observe failed: " << error_text(e) << "\n";
        }
    }

    /// The mixed-operation storm (--mixed; see the file comment). Renewals are explicit and logged
    /// here; the locker's hook logs losses (its slot stays empty, so it logs no renewal).
    void thread_loop_mixed(int k) {
        std::mt19937_64 rng(c_.seed * 1000003 + static_cast<std::uint64_t>(k) * 7919 + 17);
        std::string const owner = c_.name + "." + std::to_string(::getpid()) + ".t" + std::to_string(k);
        auto slot = std::make_shared<held_slot>();
        std::map<long long, sqlock::locker> lockers;  // one per TTL drawn (in 50 ms steps)
        auto [res, fence] = open_fenced_resource();
        auto const end = clock_type::now() + milliseconds(c_.duration_ms);
        std::uniform_int_distribution<int> pick(0, c_.locks - 1);
        std::uniform_int_distribution<long long> draw_ttl(c_.ttl_min_ms, c_.ttl_ms);
        auto percent = [&] { return std::uniform_int_distribution<int>(0, 99)(rng); };
        while (clock_type::now() < end) {
            long long const ttl = draw_ttl(rng) / 50 * 50;
            auto it = lockers.find(ttl);
            if (it == lockers.end()) it = lockers.emplace(ttl, make_locker(owner, slot, k, milliseconds(ttl))).first;
            std::string const name = c_.lock_prefix + "L" + std::to_string(pick(rng));
            event base{.thread = k, .lock = name, .owner = owner};
            write_invoke(base, "acquire");
            std::optional<sqlock::lease> lease;
            try {
                lease.emplace(it->second.acquire(name, milliseconds(c_.acquire_wait_ms)));
            } catch (std::exception const& e) {
                acquire_failed(base, e);
                continue;
            }
            base.token = lease->token();
            granted(base, *lease);
            if (fence) fenced_write(*res, *fence, base);
            // Up to three steps, each after a pause of up to half the TTL: a renewal or a fenced write.
            bool renewed_ok = true;
            for (int step = std::uniform_int_distribution<int>(0, 3)(rng); step > 0 && renewed_ok; --step) {
                std::this_thread::sleep_for(milliseconds(std::uniform_int_distribution<long long>(0, ttl / 2)(rng)));
                if (percent() < 50) renewed_ok = renew_logged(base, *lease);
                else if (fence) fenced_write(*res, *fence, base);
            }
            if (percent() < c_.abandon_pct) {
                // Abandoned: the client gives the lease up (op lost), then, past its local deadline, writes
                // the resource with its stale token anyway: the fence must refuse it once a later grant wrote.
                event ab = base;
                ab.op = "lost";
                ab.type = "ok";
                ab.error = "abandoned by the worker: it writes once more after its deadline, on purpose";
                h_->write(std::move(ab));
                std::this_thread::sleep_for(lease->remaining() +
                                            milliseconds(std::uniform_int_distribution<long long>(20, 300)(rng)));
                if (fence) fenced_write(*res, *fence, base);
                abandon(std::move(*lease));
                continue;
            }
            release_logged(base, *lease);
        }
    }

    // ---------------------------------------------------------------- --fuzz: random operations and forks

    /// The randomized operation fuzzer (--fuzz): one thread making random calls from its seed. Not
    /// holding: a waiting acquire or a try (logged as acquire; busy is fail "sqlock::busy"). Holding:
    /// a fenced or unfenced write, an explicit renewal, a reentrant hold (ops reenter and
    /// release_hold, which the checkers leave to K9), a pause, a release, or (--fork-pct) a fork:
    /// right after the grant, while another thread of this process renews the lease, or while it
    /// releases it (the worker's failpoints widen those calls). A fork is logged as op fork (owner:
    /// the child's name, value: its pid) and its end as op fork_end, ok only if the child exited 0.
    void thread_loop_fuzz(int k) {
        std::mt19937_64 rng(c_.seed * 1000003 + static_cast<std::uint64_t>(k) * 7919 + 17);
        std::string const owner = c_.name + "." + std::to_string(::getpid()) + ".t" + std::to_string(k);
        auto slot = std::make_shared<held_slot>();
        sqlock::locker locker = make_locker(owner, slot, k);
        std::tie(res_, fence_) = open_fenced_resource();
        auto* const res = res_.get();
        auto const& fence = fence_;
        auto const end = clock_type::now() + milliseconds(c_.duration_ms);
        std::uniform_int_distribution<int> pick(0, c_.locks - 1);
        auto percent = [&] { return std::uniform_int_distribution<int>(0, 99)(rng); };
        // --kind semaphore | rw | election: the lease comes from the kind's calls (a permit, a shared or the
        // exclusive lease, a leadership's lease) and is fuzzed like a lock's. Readers write nothing; a permit
        // writes the fenced resource under its slot's row name (each slot its own token counter), and nothing
        // unfenced. The kind's draws come only with a kind: a plain lock's seeds keep their schedules.
        std::optional<sqlock::semaphore> sem;
        std::optional<sqlock::rw_locker> rw;
        std::optional<sqlock::election> elect;
        if (c_.kind == "semaphore") sem.emplace(locker, c_.permits);
        else if (c_.kind == "rw") rw.emplace(locker);
        else if (c_.kind == "election")
            elect.emplace(locker, sqlock::election_options{.observe_interval = milliseconds(c_.observe_ms)});
        auto const wait = milliseconds(c_.acquire_wait_ms);
        // --admin-pct: each name's N as this worker believes it (forget and define anew change it), and a
        // semaphore per N. Without it, every name is `sem`'s.
        std::map<std::string, int> n_of;
        std::map<int, sqlock::semaphore> by_n;
        auto semaphore_for = [&](std::string const& name) -> sqlock::semaphore& {
            if (c_.admin_pct == 0) return *sem;
            int const n = n_of.try_emplace(name, c_.permits).first->second;
            return by_n.try_emplace(n, locker, n).first->second;
        };
        bool shared = false;
        std::optional<sqlock::lease> lease;
        event base;
        event fenced;  // base, under the slot's row name for a permit
        int lock_index = 0;
        while (clock_type::now() < end) {
            reap_children(false);
            if (!lease) {
                if (percent() < c_.fork_pct / 4) {
                    fork_here(fork_point::idle, lease, event{.thread = k, .owner = owner}, rng);
                    continue;
                }
                if ((sem || rw) && c_.admin_pct > 0 && percent() < c_.admin_pct) {
                    std::string const name = c_.lock_prefix + "L" + std::to_string(pick(rng));
                    admin_action(k, owner, name, sem ? &semaphore_for(name) : nullptr, n_of, rng);
                    continue;
                }
                lock_index = pick(rng);
                std::string const name = c_.lock_prefix + "L" + std::to_string(lock_index);
                base = event{.thread = k, .lock = name, .owner = row_owner(owner)};
                bool const try_only = percent() < 35;
                char const* const try_what = try_only ? "try_acquire" : nullptr;
                bool got = false;
                if (sem) {
                    auto& s = semaphore_for(name);
                    if (c_.admin_pct > 0) base.value = s.permits();  // K1-permits-defs: the N it was granted under
                    got = acquire_logged([&] { return s.try_acquire(name); }, [&] { return s.acquire(name, wait); },
                                         base, try_what, 30, lease, *slot, rng);
                    if (definition_refused_) {  // another N is stored: draw this name's again
                        definition_refused_ = false;
                        n_of[name] = std::uniform_int_distribution<int>(1, 3)(rng);
                    }
                } else if (rw) {
                    shared = percent() >= c_.writer_pct;
                    if (shared) base.value = 1;
                    got = acquire_logged([&] { return shared ? rw->try_acquire_shared(name) : rw->try_acquire(name); },
                                         [&] {
                                             return shared ? rw->acquire_shared(name, wait) : rw->acquire(name, wait);
                                         },
                                         base, try_what, 30, lease, *slot, rng);
                } else if (elect) {
                    auto const value = campaign_value(owner);
                    got = acquire_logged(
                        [&]() -> std::optional<sqlock::lease> {
                            auto l = elect->try_campaign(name, value);
                            if (!l) return std::nullopt;
                            return std::move(l->lease());
                        },
                        [&] { return std::move(elect->campaign(name, value, wait).lease()); }, base, try_what, 30,
                        lease, *slot, rng);
                } else {
                    got = acquire_logged(locker, base, try_what, 30, lease, *slot, rng);
                }
                if (!got) continue;
                fenced = base;
                if (sem) {
                    fenced.lock = lease->name();  // a fence's name may not hold U+001F, a slot's row name does
                    std::replace(fenced.lock.begin(), fenced.lock.end(), '\x1f', '/');
                }
                if (percent() < c_.fork_pct) fork_here(fork_point::after_acquire, lease, base, rng);
                continue;
            }
            bool const writes = !shared && (!sem || fenced.lock != base.lock);
            int const roll = percent();
            if (roll < 20) {
                if (fence && writes) fenced_write(*res, *fence, fenced);
            } else if (roll < 35) {
                if (lease->held() && !shared && !sem) unfenced_write(lock_index, base, rng);
            } else if (roll < 50) {
                renew_logged(base, *lease);
            } else if (roll < 58) {
                std::optional<sqlock::lease> inner;
                if (logged(
                        base, "reenter", [&] { inner.emplace(lease->reenter()); }, [](event&) {})) {
                    if (fence && percent() < 50 && writes) fenced_write(*res, *fence, fenced);
                    logged(
                        base, "release_hold", [&] { inner->release(); }, [](event&) {});
                }
            } else if (roll < 70) {
                std::this_thread::sleep_for(
                    milliseconds(std::uniform_int_distribution<long long>(c_.hold_min_ms, c_.hold_max_ms)(rng)));
            } else if (roll < 70 + c_.fork_pct) {
                auto const point = percent() < 50 ? fork_point::renewal : fork_point::release;
                if (point == fork_point::release) {
                    std::lock_guard lock(slot->mutex);
                    slot->lease = nullptr;
                }
                fork_here(point, lease, base, rng);
            } else {
                {
                    std::lock_guard lock(slot->mutex);
                    slot->lease = nullptr;
                }
                release_logged(base, *lease);
                lease.reset();
                if (c_.think_max_ms > 0)
                    std::this_thread::sleep_for(
                        milliseconds(std::uniform_int_distribution<long long>(0, c_.think_max_ms)(rng)));
            }
        }
        if (lease) {
            {
                std::lock_guard lock(slot->mutex);
                slot->lease = nullptr;
            }
            release_logged(base, *lease);
        }
    }

    /// --admin-pct: an operator's action on `name`, logged. A force_release (sqlock::force_release, as `sqlock
    /// release --force`) of the name's row (rw: X, the writers' lock; semaphore: a permit slot X U+001F p U+001F k,
    /// k < N): op force_release, lock = the row's exact name, ok with the released row's token (value 1) or none
    /// (value 0). Or, for a semaphore, forget_semaphore: op forget, ok value 1 (forgotten) or 0 (nothing stored),
    /// fail when refused (a permit is held); once forgotten this worker defines the name anew with N drawn from
    /// 1 .. 3 (op define ok, value N): stored at its next acquire, unless another process stores its own first.
    void admin_action(int k, std::string const& owner, std::string const& name, sqlock::semaphore const* sem,
                      std::map<std::string, int>& n_of, std::mt19937_64& rng) {
        auto const& db = stores_.front();
        if (sem == nullptr || std::uniform_int_distribution<int>(0, 1)(rng) == 0) {
            std::string row = name;
            if (sem != nullptr)
                row += std::string("\x1fp\x1f") +
                       std::to_string(std::uniform_int_distribution<int>(0, sem->permits() - 1)(rng));
            std::optional<sqlock::lock_info> gone;
            logged(
                event{.thread = k, .lock = row, .owner = owner}, "force_release",
                [&] { gone = sqlock::force_release(db, row); },
                [&](event& ok) {
                    ok.value = gone ? 1 : 0;
                    if (gone) ok.token = gone->token;
                });
            return;
        }
        event ev{.thread = k, .lock = name, .owner = owner};
        write_invoke(ev, "forget");
        ev.op = "forget";
        bool forgotten = false;
        try {
            forgotten = sqlock::forget_semaphore(db, name);
            ev.type = "ok";
            ev.value = forgotten ? 1 : 0;
        } catch (sqlock::usage_error const& e) {
            ev.type = "fail";  // refused: a permit is held
            ev.error = error_text(e);
        } catch (std::exception const& e) {
            ev.type = "info";
            ev.error = error_text(e);
        }
        h_->write(ev);
        if (!forgotten) return;
        int const n = std::uniform_int_distribution<int>(1, 3)(rng);
        n_of[name] = n;
        h_->write(event{.thread = k, .op = "define", .type = "ok", .lock = name, .owner = owner, .value = n});
    }

    /// Forks at `point`: for renewal and release, while a helper thread of this process is inside
    /// that call on `lease` (release ends the lease). The child runs child_main and never comes back.
    void fork_here(fork_point point, std::optional<sqlock::lease>& lease, event const& base, std::mt19937_64& rng) {
        auto const end = static_cast<child_end>(std::uniform_int_distribution<int>(0, 2)(rng));
        // On SQLite a child never opens the database again: a parent thread (a renewal, the release) may be
        // inside SQLite at the fork, and SQLite's process-wide state (its global mutex, the per-file lock
        // records) is copied in whatever state that thread left it; SQLite forbids using a database across
        // fork() (sqlite.org/howtocorrupt.html, 2.6). A child that did hung once in CI (Fuzz.TableLock/sqlite,
        // seed 701, forked inside release()). The draw stays, so the schedule of the seed is unchanged.
        // With --kind a child never works either: its critical sections take plain locks of the names, which a
        // read-write lock's readers do not exclude (a plain lock is a writer that does not wait for readers).
        bool const work = std::uniform_int_distribution<int>(0, 1)(rng) == 1 &&
                          c_.urls.front().rfind("sqlite:", 0) != 0 && c_.kind == "lock";
        std::string const child = c_.name + ".f" + std::to_string(++forks_) + "-" + to_string(point) + "-" +
                                  to_string(end) + (work ? "-lock" : "");
        std::atomic<bool> inside{false};
        // Leaked by the child, where its thread does not exist (a joinable std::thread's destructor aborts).
        std::thread* helper = nullptr;
        if (point == fork_point::renewal) {
            helper = new std::thread([&] {
                inside = true;
                renew_logged(base, *lease);
            });
        } else if (point == fork_point::release) {
            helper = new std::thread([&] {
                inside = true;
                release_logged(base, *lease);
            });
        }
        if (helper != nullptr) {
            while (!inside) std::this_thread::yield();
            std::this_thread::sleep_for(
                std::chrono::microseconds(std::uniform_int_distribution<long long>(0, 40000)(rng)));
        }
        event f = base;
        f.op = "fork";
        f.owner = child;
        write_invoke(f, "fork");
        pid_t const parent = ::getpid();
        pid_t const pid = ::fork();
        if (pid == 0) child_main(child, end, work, rng, parent);
        if (pid < 0) {
            f.type = "info";
            f.error = std::string("fork failed: ") + std::strerror(errno);
            failed_ = true;
        } else {
            f.type = "ok";
            f.value = pid;
            children_.push_back({pid, child});
        }
        h_->write(std::move(f));
        if (helper != nullptr) {
            helper->join();
            delete helper;
        }
        if (point == fork_point::release) lease.reset();
    }

    /// The forked child: its own history, optionally one or two critical sections through a store
    /// and locker of its own (drawing from the random stream it inherited, as a real child would),
    /// then the end the parent drew: _exit, exit() or a return through main() (fork_return).
    [[noreturn]] void child_main(std::string const& name, child_end end, bool work, std::mt19937_64& rng,
                                 pid_t parent) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);     // a killed worker takes its children with it
        if (::getppid() != parent) ::_exit(0);  // killed before the line above
        (void)h_.release();    // the parent's writer: its mutex may be held by a thread this process does not have
        (void)res_.release();  // the parent's resource session: the test's own, not the library under test
        c_.name = name;
        h_ = std::make_unique<history_writer>(
            (std::filesystem::path(c_.run_dir) / ("history-" + name + ".jsonl")).string(), name);
        children_.clear();
        int code = 0;
        if (work) {
            try {
                child_work(rng);
            } catch (std::exception const& e) {
                std::cerr << name << "[" << ::getpid() << "]: " << error_text(e) << "\n";
                code = 3;
            }
        }
        switch (end) {
            case child_end::underscore_exit: ::_exit(code);
            case child_end::exit_call: std::exit(code);
            case child_end::return_main: throw fork_return{code};
        }
        ::_exit(code);
    }

    void child_work(std::mt19937_64& rng) {
        sqlock::store db(c_.urls.front(), {.pool_size = 2,
                                           .table_prefix = c_.tables,
                                           .connect_timeout = 5s,
                                           .lock_wait_timeout = milliseconds(c_.lock_wait_timeout_ms),
                                           .io_timeout = milliseconds(c_.io_timeout_ms)});
        std::string const owner = c_.name + "." + std::to_string(::getpid()) + ".t0";
        auto slot = std::make_shared<held_slot>();
        sqlock::locker locker = make_locker(owner, slot, 0, std::nullopt, &db);
        auto [res, fence] = open_fenced_resource();
        std::uniform_int_distribution<int> pick(0, c_.locks - 1);
        for (int round = std::uniform_int_distribution<int>(1, 2)(rng); round > 0; --round) {
            int const i = pick(rng);
            std::string const name = c_.lock_prefix + "L" + std::to_string(i);
            event base{.thread = 0, .lock = name, .owner = owner};
            write_invoke(base, "acquire");
            std::optional<sqlock::lease> lease;
            try {
                lease.emplace(locker.acquire(name, milliseconds(c_.acquire_wait_ms)));
            } catch (std::exception const& e) {
                acquire_failed(base, e);
                continue;
            }
            {
                std::lock_guard lock(slot->mutex);
                slot->lease = &*lease;
            }
            base.token = lease->token();
            granted(base, *lease);
            if (fence) fenced_write(*res, *fence, base);
            if (lease->held()) unfenced_write(i, base, rng);
            std::this_thread::sleep_for(
                milliseconds(std::uniform_int_distribution<long long>(c_.hold_min_ms, 2 * c_.hold_max_ms)(rng)));
            if (fence) fenced_write(*res, *fence, base);
            {
                std::lock_guard lock(slot->mutex);
                slot->lease = nullptr;
            }
            release_logged(base, *lease);
        }
    }

    /// Reaps the forked children (all of them, waiting up to 20 s, when `wait_all`) and logs each end
    /// as op fork_end: ok for exit 0, else fail with how it ended (a child that crashes, hangs or
    /// fails is the library misbehaving after fork).
    void reap_children(bool wait_all) {
        auto const deadline = clock_type::now() + 20s;
        while (!children_.empty()) {
            for (auto it = children_.begin(); it != children_.end();) {
                int st = 0;
                bool const late = wait_all && clock_type::now() > deadline;
                if (late) ::kill(it->pid, SIGKILL);
                if (::waitpid(it->pid, &st, late ? 0 : WNOHANG) != it->pid) {
                    ++it;
                    continue;
                }
                event e{.op = "fork_end", .owner = it->name, .value = it->pid};
                if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
                    e.type = "ok";
                } else {
                    e.type = "fail";
                    e.error = "fork child " + it->name + " (pid " + std::to_string(it->pid) + ") ended with " +
                              (late ? std::string("no end 20 s after its parent's run: killed (hung)") : exit_text(st));
                    std::cerr << c_.name << ": " << e.error << "\n";
                    failed_ = true;
                }
                h_->write(std::move(e));
                it = children_.erase(it);
            }
            if (!wait_all) return;
            std::this_thread::sleep_for(20ms);
        }
    }

    static std::string exit_text(int st) {
        if (WIFEXITED(st)) return "exit " + std::to_string(WEXITSTATUS(st));
        if (WIFSIGNALED(st))
            return std::string("signal ") + std::to_string(WTERMSIG(st)) + " (" + ::strsignal(WTERMSIG(st)) + ")";
        return "status " + std::to_string(st);
    }

    config c_;
    std::unique_ptr<history_writer> h_;  // a forked child swaps in its own (the parent's may be mid-write)
    std::vector<sqlock::store> stores_;
    std::atomic<bool> failed_{false};
    struct child_proc {
        pid_t pid;
        std::string name;
    };
    std::vector<child_proc> children_;
    int forks_ = 0;
    bool definition_refused_ = false;     // --admin-pct: the last acquire found another N stored (acquire_failed)
    std::unique_ptr<soci::session> res_;  // --fuzz: the fenced resource (a child leaves it to its parent)
    std::optional<sqlock::fence> fence_;
};

int run_reaper(config const& c) {
    history_writer h(c.history, c.name);
    sqlock::store db(c.urls.at(0), {.pool_size = 2,
                                    .table_prefix = c.tables,
                                    .connect_timeout = 5s,
                                    .lock_wait_timeout = milliseconds(c.lock_wait_timeout_ms),
                                    .io_timeout = milliseconds(c.io_timeout_ms)});
    sqlock::reaper_options ro{.grace = milliseconds(c.reaper_grace_ms),
                              .batch_size = static_cast<std::size_t>(c.reaper_batch),
                              .row_lock_warning = std::nullopt,
                              .on_warning = [](std::string_view) {}};
    if (c.token_horizon_ms >= 0) ro.token_horizon = milliseconds(c.token_horizon_ms);
    else ro.token_horizon = std::nullopt;
    sqlock::reaper reaper(db, ro);
    auto const end = clock_type::now() + milliseconds(c.duration_ms);
    while (clock_type::now() < end) {
        h.write(event{.op = "reap", .type = "invoke"});
        event out{.op = "reap"};
        try {
            auto r = reaper.reap_once();
            out.type = "ok";
            out.value = static_cast<std::int64_t>(r.purged);
        } catch (std::exception const& e) {
            out.type = "fail";
            out.error = error_text(e);
        }
        h.write(std::move(out));
        std::this_thread::sleep_for(milliseconds(c.reaper_interval_ms));
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    config c;
    CLI::App app{"sqlock battery worker: acquire, critical section, release in a loop, with a recorded history"};
    app.add_option("--mode", c.mode, "worker | reaper")->check(CLI::IsMember({"worker", "reaper"}));
    app.add_option("--name", c.name, "this process's name in the run (history `proc`)")->required();
    app.add_option("--history", c.history, "history file (JSON lines, appended)")->required();
    app.add_option("--run-dir", c.run_dir, "the run directory (unfenced counters live here)");
    app.add_option("--url", c.urls, "lock database URL; give it N times for a majority over N")->required();
    app.add_option("--tables", c.tables, "table prefix of the lock tables");
    app.add_option("--lock-prefix", c.lock_prefix, "prefix of the lock names (locks are <prefix>L<i>)");
    app.add_option("--threads", c.threads)->check(CLI::Range(1, 256));
    app.add_option("--locks", c.locks)->check(CLI::Range(1, 100000));
    app.add_option("--duration-ms", c.duration_ms)->check(CLI::Range(0LL, 86400000LL));
    app.add_option("--ttl-ms", c.ttl_ms)->check(CLI::Range(10LL, 86400000LL));
    app.add_option("--acquire-wait-ms", c.acquire_wait_ms);
    app.add_option("--cs-max-us", c.cs_max_us, "the unfenced counter's pause: U(0, this) µs");
    app.add_option("--hold-min-ms", c.hold_min_ms);
    app.add_option("--hold-max-ms", c.hold_max_ms, "extra hold after the counter, then a second fenced write");
    app.add_flag("--row", c.row, "the row lock (row_locker) instead of the table lock");
    app.add_flag("--no-renew", c.no_renew, "no watchdog renewals");
    app.add_option("--think-max-ms", c.think_max_ms,
                   "pause U(0, this) after each release (the engines' waiting is not fair: a process that loops "
                   "acquire-release can keep a lock from the others)");
    app.add_option("--abandon-pct", c.abandon_pct, "percent of leases abandoned (never released)")
        ->check(CLI::Range(0, 100));
    app.add_option("--resource-backend", c.resource_backend)->check(CLI::IsMember({"postgresql", "sqlite3", "none"}));
    app.add_option("--resource-connect", c.resource_connect, "SOCI connect string of the fenced resource");
    app.add_option("--resource-tables", c.resource_tables, "table prefix of the resource's fence table");
    app.add_option("--lock-wait-timeout-ms", c.lock_wait_timeout_ms);
    app.add_option("--io-timeout-ms", c.io_timeout_ms);
    app.add_option("--member-timeout-ms", c.member_timeout_ms, "majority: bound on one member's answer");
    app.add_option("--seed", c.seed);
    app.add_option("--start-mono-ns", c.start_mono_ns, "start barrier: begin at this raw monotonic instant (ns)");
    app.add_option("--round-ms", c.round_ms, "with --start-mono-ns: acquires start on multiples of this");
    app.add_option("--linger-ms", c.linger_ms, "stay this long after the threads ended");
    app.add_flag("--single-try", c.single_try, "try_acquire (one round) instead of a waiting acquire");
    app.add_flag("--log-busy", c.log_busy, "log each busy attempt inside a waiting acquire (op busy)");
    app.add_flag("--stop-after-grant", c.stop_after_grant, "SIGSTOP this process after each grant it logged");
    app.add_option("--pool-size", c.pool_size, "the store's pooled connections (0: threads + 4)")
        ->check(CLI::Range(0, 1024));
    app.add_flag("--own-lock", c.own_lock, "thread k takes only lock --lock-offset + k");
    app.add_option("--lock-offset", c.lock_offset, "with --own-lock: the first thread's lock");
    app.add_option("--rounds", c.rounds, "> 0: each thread stops after this many critical sections");
    app.add_flag("--mixed", c.mixed, "the mixed-operation storm: random TTLs, explicit renewals, abandons");
    app.add_option("--ttl-min-ms", c.ttl_min_ms, "--mixed: TTLs are U(this, --ttl-ms)");
    app.add_flag("--fuzz", c.fuzz,
                 "the randomized operation fuzzer: one thread, random try/acquire/renew/reenter/release/fork");
    app.add_option("--fork-pct", c.fork_pct, "--fuzz: percent of a holder's steps that fork")
        ->check(CLI::Range(0, 100));
    // The coordination kinds (issue 22). Also from the environment, which the harness passes to every worker of a
    // scenario (scenario::worker_env) and to one slot (battery_run::set_slot_env).
    app.add_option("--kind", c.kind, "lock | semaphore | rw | election (thread_loop_coord)")
        ->check(CLI::IsMember({"lock", "semaphore", "rw", "election"}))
        ->envname("SQLOCK_BATTERY_KIND");
    app.add_option("--permits", c.permits, "semaphore: N")
        ->check(CLI::Range(1, 10000))
        ->envname("SQLOCK_BATTERY_PERMITS");
    app.add_option("--writer-pct", c.writer_pct, "rw: percent of acquires that write")
        ->check(CLI::Range(0, 100))
        ->envname("SQLOCK_BATTERY_WRITER_PCT");
    app.add_flag("--observer", c.observer, "election: observe L<k> on thread k instead of campaigning")
        ->envname("SQLOCK_BATTERY_OBSERVER");
    app.add_option("--observe-ms", c.observe_ms, "election: observe_interval")
        ->check(CLI::Range(10LL, 60000LL))
        ->envname("SQLOCK_BATTERY_OBSERVE_MS");
    app.add_option("--admin-pct", c.admin_pct,
                   "--fuzz with --kind semaphore | rw: percent of idle steps that are an operator's action: "
                   "force_release of a name's row, forget_semaphore and a definition of another N (admin_action)")
        ->check(CLI::Range(0, 100))
        ->envname("SQLOCK_BATTERY_ADMIN_PCT");
    app.add_option("--reaper-interval-ms", c.reaper_interval_ms);
    app.add_option("--reaper-grace-ms", c.reaper_grace_ms);
    app.add_option("--reaper-batch", c.reaper_batch)->check(CLI::Range(1, 100000));
    app.add_option("--token-horizon-ms", c.token_horizon_ms,
                   "reaper: purge token counters older than this (< 0: never)");
    CLI11_PARSE(app, argc, argv);
    try {
        if (c.mode == "reaper") return run_reaper(c);
        worker w(c);
        return w.run();
    } catch (fork_return const& r) {
        return r.code;  // a forked child that returned through main(): every inherited frame was unwound
    } catch (std::exception const& e) {
        std::cerr << "battery_worker " << c.name << "[" << ::getpid() << "]: " << error_text(e) << "\n";
        return 2;
    }
}
