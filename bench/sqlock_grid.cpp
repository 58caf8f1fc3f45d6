// sqlock-grid: sqlock's side of the benchmark grid. Each run measures one configuration and prints
// ONE JSON line on stdout in the format of bench/results-format.md (progress, notes and errors go to
// stderr), so that `sqlock-grid ... >> results.jsonl` collects a result file for bench/report.py.
//
//   sqlock-grid cycle   --url URL --lock table|row|semaphore|rw-shared|rw-exclusive --clients N
//                       --names distinct|shared --seconds S [--ttl 30s] [--permits 4]
//       N threads on one store (pool_size = N + 2) and one locker loop try_acquire(name) + release().
//       The coordination kinds (include/sqlock/coordination.hpp), each over a table locker:
//         semaphore     sqlock::semaphore(locker, PERMITS).try_acquire(name): a permit, on one of
//                       the name's PERMITS slots (impl sqlock-semaphore; the line has `permits`)
//         rw-shared     sqlock::rw_locker(locker).try_acquire_shared(name) (impl sqlock-rw-shared)
//         rw-exclusive  sqlock::rw_locker(locker).try_acquire(name) (impl sqlock-rw-exclusive): the
//                       table lock of the name, then the check that no reader is left
//       A semaphore with shared names and N clients: up to PERMITS of them hold a permit at once.
//       distinct: each thread cycles through 64 names of its own (the lock is always free);
//       shared: every thread asks for one name, and a busy try is retried at once and counted.
//       Row lock with shared names: acquire(name, 10s) instead, so waiters queue in the engine.
//       1 s of warm-up, then S seconds measured. p50/p99: one successful cycle, from the start of
//       the acquire call that got the lock to the return of release() (a busy try before it is an
//       attempt of its own, not part of the cycle). cpu_us_per_cycle: getrusage(RUSAGE_SELF)
//       user + system over the measured window / cycles. errors: every exception the callers saw,
//       warm-up included.
//       On SQLite a row lock is BEGIN IMMEDIATE and locks the whole file: with several clients
//       "distinct" names still take turns (their busy tries show as busy).
//
//   sqlock-grid handoff --url URL --path notify|row-queue|poll|in-process --samples N
//       A holder takes the lock; a waiter thread calls acquire(name, 10s) and parks (table lock: its
//       first attempt came back busy); the holder releases 5-20 ms (random) after it acquired.
//       sample = (right after the waiter's acquire returned) - (right after the holder's release()
//       returned); a negative one (the wake-up overtook release's own return) is counted as 0 and
//       in `early`. Three unrecorded samples first. Paths:
//         notify      table lock; holder and waiter on two stores (as two processes); the waiter's
//                     backoff is 60 s, so only the engine's announcement can wake it in time
//                     (PostgreSQL: LISTEN/NOTIFY; MariaDB: KILL QUERY of a parked SLEEP; SQLite:
//                     the bell file, inotify)
//         row-queue   row lock (PostgreSQL, MariaDB), two stores: the waiter waits in the engine's
//                     lock queue
//         poll        table lock, two stores, default backoff (5 ms doubling to 500 ms). The
//                     announcement wakes the waiter too (every engine since issue 21), so this is
//                     `notify` with a shorter backoff; a SQLite URL without a file of its own polls
//         in-process  table lock, one store: the releasing thread wakes the waiter (backoff 60 s)
//
//   sqlock-grid renewal --url URL [--leases 10000] [--ttl 15s] [--seconds 60] [--threads 4]
//       One table locker (auto_renew on) holds LEASES leases, acquired as fast as THREADS threads
//       can; every `renewed` event (locker_options::on_event) is timed. The renewer schedules a
//       lease's next renewal ttl/3 after its acquire or its last successful renewal
//       (src/locker.cpp: watch(), on_renewed()), so the lag of a renewal = its completion (the
//       event) - (the previous acquired/renewed event of that lease + ttl/3). SECONDS counts from
//       the first acquire to the start of the release of all leases. lost: leases reported lost
//       (on_lost or a `lost` event). Lag by 10 s slices of the run goes to stderr.
//
// Lock names start with "grid:<pid>:"; the store creates the default tables (`sqlock_*`) if missing.
// SQLite lines carry variant "sync=<mode>": the URL's synchronous parameter (sqlock's default is full).
//
// Examples (servers: source the env.sh printed by `bash scripts/test-servers.sh start`):
//   build/bench/sqlock-grid cycle --url "$SQLOCK_TEST_PG_URL" --lock table --clients 4 --names distinct --seconds 5
//   build/bench/sqlock-grid cycle --url sqlite:/tmp/grid.db --lock row --clients 1 --names shared --seconds 5
//   build/bench/sqlock-grid cycle --url "$SQLOCK_TEST_MYSQL_URL" --lock semaphore --permits 4 --clients 4 --names
//   shared build/bench/sqlock-grid handoff --url "$SQLOCK_TEST_PG_URL" --path notify --samples 200
//   build/bench/sqlock-grid renewal --url "$SQLOCK_TEST_PG_URL" --leases 10000 --ttl 15s --seconds 60
// Exit status: 0 after printing the line (even with errors > 0: they are in the line), 1 when the
// run could not happen at all (no database), 2 on bad arguments.
#include "duration.hpp"  // tools/: "30s" -> milliseconds

#include <sqlock/coordination.hpp>
#include <sqlock/sqlock.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

std::string const name_prefix = "grid:" + std::to_string(::getpid()) + ":";

double seconds_between(steady::time_point a, steady::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}
double us_between(steady::time_point a, steady::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}
/// Rounded to one decimal: enough for µs and ms, and readable.
double r1(double x) { return std::round(x * 10.0) / 10.0; }

/// Nearest-rank percentile (p in 0..1) of `sorted`; 0 when empty.
double percentile(std::vector<double> const& sorted, double p) {
    if (sorted.empty()) return 0;
    auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
    return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

/// The process's user + system CPU time so far, in microseconds.
double cpu_us() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    auto us = [](timeval t) { return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec); };
    return us(u.ru_utime) + us(u.ru_stime);
}

/// Exceptions the callers saw: counted, and each distinct message shown once on stderr.
class error_log {
public:
    void add(std::string_view where, std::exception const& e) {
        count_.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard lock(mutex_);
        std::string key = std::string(where) + ": " + e.what();
        if (++seen_[key] == 1 && seen_.size() <= 20) std::cerr << "sqlock-grid: error in " << key << "\n";
    }
    [[nodiscard]] long long count() const { return count_.load(); }

private:
    std::atomic<long long> count_{0};
    std::mutex mutex_;
    std::map<std::string, long long> seen_;
};

/// The fields every line starts with (results-format.md).
json line_head(std::string_view suite, sqlock::store const& db, std::string_view impl, double seconds) {
    json j;
    j["suite"] = suite;
    j["engine"] = sqlock::to_string(db.engine());
    j["impl"] = impl;
    std::string variant;
    if (db.engine() == sqlock::engine::sqlite) {
        auto const& url = db.url();
        auto const at = url.find("synchronous=");
        variant = "sync=" +
                  (at == std::string::npos ? std::string("full") : url.substr(at + 12, url.find('&', at) - at - 12));
    }
    j["variant"] = variant;
    j["seconds"] = std::round(seconds * 1000.0) / 1000.0;
    return j;
}

void print_line(json const& j) { std::cout << j.dump() << std::endl; }

// ------------------------------------------------------------------------------------------ cycle

struct cycle_args {
    std::string url;
    std::string lock = "table";
    int clients = 1;
    std::string names = "distinct";
    double seconds = 5;
    std::string ttl = "30s";
    int permits = 4;
    std::string metrics = "on";  ///< off: a metrics that records nothing (the overhead's baseline)
};

int run_cycle(cycle_args const& a) {
    auto const ttl = sqlock::tools::parse_duration(a.ttl);
    bool const row = a.lock == "row";
    bool const shared = a.names == "shared";
    bool const queue = row && shared;  // waiters queue in the engine: acquire(name, 10s)
    auto const clients = static_cast<std::size_t>(a.clients);

    // Metrics on: the process's, as every program gets by default; off: a metrics that records nothing.
    auto const metrics = a.metrics == "off"
                             ? std::make_shared<sqlock::metrics>(sqlock::metrics_options{.enabled = false})
                             : sqlock::metrics::global();
    sqlock::store db(a.url, {.pool_size = clients + 2, .create_schema = true, .metrics = metrics});
    auto locks = row ? sqlock::row_locker(db, {.ttl = ttl}) : sqlock::table_locker(db, {.ttl = ttl});
    // One try of the kind measured: a lease, or empty when busy.
    std::function<std::optional<sqlock::lease>(std::string const&)> try_once;
    std::string impl = row ? "sqlock-row" : "sqlock-table";
    if (a.lock == "semaphore") {
        try_once = [sem = sqlock::semaphore(locks, a.permits)](std::string const& name) mutable {
            return sem.try_acquire(name);
        };
        impl = "sqlock-semaphore";
    } else if (a.lock == "rw-shared") {
        try_once = [rw = sqlock::rw_locker(locks)](std::string const& name) mutable {
            return rw.try_acquire_shared(name);
        };
        impl = "sqlock-rw-shared";
    } else if (a.lock == "rw-exclusive") {
        try_once = [rw = sqlock::rw_locker(locks)](std::string const& name) mutable { return rw.try_acquire(name); };
        impl = "sqlock-rw-exclusive";
    } else {
        try_once = [&locks](std::string const& name) { return locks.try_acquire(name); };
    }
    if (a.metrics == "off") impl += "-nometrics";
    if (row && db.engine() == sqlock::engine::sqlite)
        std::cerr << "sqlock-grid: note: on SQLite a row lock locks the whole database file (BEGIN IMMEDIATE)\n";

    enum : int { warming, measuring, stopping };
    std::atomic<int> phase{warming};
    struct tally {
        std::vector<double> us;
        long long cycles = 0, attempts = 0, busy = 0;
    };
    std::vector<tally> per(clients);
    error_log errors;

    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < clients; ++t) {
        threads.emplace_back([&, t] {
            std::vector<std::string> names;
            if (shared) {
                names.push_back(name_prefix + "cycle:shared");
            } else {
                for (int i = 0; i < 64; ++i)
                    names.push_back(name_prefix + "cycle:" + std::to_string(t) + ":" + std::to_string(i));
            }
            auto& mine = per[t];
            mine.us.reserve(1 << 16);
            std::size_t k = 0;
            while (phase.load(std::memory_order_relaxed) != stopping) {
                auto const& name = names[k % names.size()];
                bool got = false, failed = false;
                auto const start = steady::now();
                try {
                    std::optional<sqlock::lease> lease;
                    if (queue) lease.emplace(locks.acquire(name, 10s));
                    else lease = try_once(name);
                    if (lease) {
                        lease->release();
                        got = true;
                    }
                } catch (std::exception const& e) {
                    errors.add("cycle", e);
                    failed = true;
                }
                auto const end = steady::now();
                if (got || failed) ++k;  // a busy try is retried at once, on the same name
                if (phase.load(std::memory_order_relaxed) != measuring) continue;
                ++mine.attempts;
                if (got) {
                    ++mine.cycles;
                    mine.us.push_back(us_between(start, end));
                } else if (!failed) {
                    ++mine.busy;
                }
            }
        });
    }
    std::this_thread::sleep_for(1s);  // warm-up: connections, schema check, renewer threads
    double const cpu0 = cpu_us();
    auto const t0 = steady::now();
    phase = measuring;
    std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));
    phase = stopping;
    auto const t1 = steady::now();
    double const cpu1 = cpu_us();
    for (auto& t : threads) t.join();

    tally all;
    for (auto& p : per) {
        all.us.insert(all.us.end(), p.us.begin(), p.us.end());
        all.cycles += p.cycles;
        all.attempts += p.attempts;
        all.busy += p.busy;
    }
    std::sort(all.us.begin(), all.us.end());
    double const secs = seconds_between(t0, t1);
    auto j = line_head("cycle", db, impl, secs);
    j["clients"] = a.clients;
    j["names"] = a.names;
    if (a.lock == "semaphore") j["permits"] = a.permits;
    j["cycles"] = all.cycles;
    j["cycles_per_s"] = r1(static_cast<double>(all.cycles) / secs);
    j["attempts"] = all.attempts;
    j["busy"] = all.busy;
    j["p50_us"] = r1(percentile(all.us, 0.50));
    j["p99_us"] = r1(percentile(all.us, 0.99));
    j["cpu_us_per_cycle"] = all.cycles > 0 ? r1((cpu1 - cpu0) / static_cast<double>(all.cycles)) : 0.0;
    j["errors"] = errors.count();
    std::cerr << "sqlock-grid cycle: " << db.url() << " " << a.lock << " lock, " << a.clients << " clients, " << a.names
              << " names: " << all.cycles << " cycles in " << secs << " s, CPU " << (cpu1 - cpu0) / 1e6 << " s\n";
    print_line(j);
    return 0;
}

// ---------------------------------------------------------------------------------------- handoff

struct handoff_args {
    std::string url;
    std::string path = "notify";
    int samples = 100;
};

/// The waiter's side of one sample, handed between the holder (main thread) and the waiter thread.
struct waiter_slot {
    std::mutex mutex;
    std::condition_variable cv;
    int round = 0;         // holder -> waiter: start the acquire of this round
    int done = 0;          // waiter -> holder: the round that finished
    bool calling = false;  // the waiter is about to call acquire (or is in it)
    bool quit = false;
    bool failed = false;
    steady::time_point held;
};

int run_handoff(handoff_args const& a) {
    bool const row = a.path == "row-queue";
    bool const one_store = a.path == "in-process";
    bool const slow_backoff = a.path == "notify" || a.path == "in-process";

    sqlock::store holder_db(a.url, {.pool_size = 4, .create_schema = true});
    auto const e = holder_db.engine();
    if (row && e == sqlock::engine::sqlite)
        throw sqlock::usage_error("the row-queue path needs PostgreSQL or MariaDB (an engine lock queue)");
    std::optional<sqlock::store> second;
    if (!one_store) second.emplace(a.url, sqlock::store_options{.pool_size = 4});
    sqlock::store& waiter_db = one_store ? holder_db : *second;

    sqlock::locker_options waiter_options{};
    if (slow_backoff) waiter_options.backoff_min = waiter_options.backoff_max = 60s;
    auto holder = row ? sqlock::row_locker(holder_db) : sqlock::table_locker(holder_db);
    auto waiter = row ? sqlock::row_locker(waiter_db, waiter_options) : sqlock::table_locker(waiter_db, waiter_options);

    std::string const name = name_prefix + "handoff:" + a.path;
    error_log errors;
    waiter_slot w;
    std::thread waiter_thread([&] {
        std::unique_lock lock(w.mutex);
        for (int seen = 0;;) {
            w.cv.wait(lock, [&] { return w.quit || w.round != seen; });
            if (w.quit) return;
            seen = w.round;
            w.calling = true;
            w.failed = false;
            lock.unlock();
            w.cv.notify_all();
            std::optional<sqlock::lease> got;
            steady::time_point held;
            try {
                got.emplace(waiter.acquire(name, 10s));
                held = steady::now();
            } catch (std::exception const& ex) {
                errors.add("handoff waiter", ex);
            }
            try {
                if (got) got->release();
            } catch (std::exception const& ex) {
                errors.add("handoff waiter release", ex);
            }
            lock.lock();
            w.held = held;
            w.failed = !got;
            w.calling = false;
            w.done = seen;
            w.cv.notify_all();
        }
    });

    std::mt19937 rng{std::random_device{}()};
    std::uniform_int_distribution<int> hold_us(5000, 20000);
    std::vector<double> samples;
    long long early = 0;
    int const warmup = 3;
    auto const start = steady::now();
    for (int i = -warmup; i < a.samples; ++i) {
        // The holder's turn. The waiter released the previous round before it reported done.
        std::optional<sqlock::lease> held;
        auto const give_up = steady::now() + 10s;
        while (!held && steady::now() < give_up) {
            try {
                held = holder.try_acquire(name);
            } catch (std::exception const& ex) {
                errors.add("handoff holder acquire", ex);
                std::this_thread::sleep_for(10ms);
            }
        }
        if (!held) {
            std::cerr << "sqlock-grid: the holder could not take " << name << " within 10 s; giving up\n";
            break;
        }
        auto const acquired = steady::now();
        auto const busy_before = waiter.stats().busy;
        int round = 0;
        {
            std::unique_lock lock(w.mutex);
            round = ++w.round;
            w.cv.notify_all();
            w.cv.wait(lock, [&] { return w.calling || w.done == round; });
        }
        // Parked: a table-lock waiter has had its first busy answer (then it sleeps until woken);
        // a row-lock waiter is in the engine's queue after one round trip, well inside the hold.
        if (!row) {
            while (waiter.stats().busy == busy_before && steady::now() < acquired + 10s) {
                std::this_thread::sleep_for(50us);
            }
        }
        std::this_thread::sleep_until(acquired + std::chrono::microseconds(hold_us(rng)));
        steady::time_point released;
        try {
            held->release();
            released = steady::now();
        } catch (std::exception const& ex) {
            errors.add("handoff holder release", ex);
        }
        bool failed = false;
        steady::time_point got;
        {
            std::unique_lock lock(w.mutex);
            w.cv.wait(lock, [&] { return w.done == round; });
            failed = w.failed;
            got = w.held;
        }
        if (i < 0 || failed || released == steady::time_point{}) continue;
        double const us = us_between(released, got);
        if (us < 0) ++early;
        samples.push_back(std::max(0.0, us));
    }
    double const secs = seconds_between(start, steady::now());
    {
        std::lock_guard lock(w.mutex);
        w.quit = true;
    }
    w.cv.notify_all();
    waiter_thread.join();

    std::sort(samples.begin(), samples.end());
    auto j = line_head("handoff", holder_db, row ? "sqlock-row" : "sqlock-table", secs);
    j["path"] = a.path;
    j["samples"] = samples.size();
    j["p50_us"] = r1(percentile(samples, 0.50));
    j["p99_us"] = r1(percentile(samples, 0.99));
    j["max_us"] = r1(samples.empty() ? 0.0 : samples.back());
    j["early"] = early;
    j["errors"] = errors.count();
    std::cerr << "sqlock-grid handoff: " << holder_db.url() << " path " << a.path << ": " << samples.size()
              << " samples in " << secs << " s\n";
    print_line(j);
    return 0;
}

// ---------------------------------------------------------------------------------------- renewal

struct renewal_args {
    std::string url;
    int leases = 10000;
    std::string ttl = "15s";
    double seconds = 60;
    int threads = 4;
};

int run_renewal(renewal_args const& a) {
    auto const ttl = sqlock::tools::parse_duration(a.ttl);
    auto const n = static_cast<std::size_t>(a.leases);
    auto const threads = static_cast<std::size_t>(a.threads);
    auto const period = ttl / 3;  // as the renewer computes it (src/locker.cpp)

    struct slot {
        std::atomic<std::int64_t> last_ns{-1};  // steady time of the last acquired/renewed event
        std::atomic<bool> lost{false};
    };
    auto slots = std::make_unique<slot[]>(n);
    auto const origin = steady::now();
    auto now_ns = [&] { return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - origin).count(); };
    std::string const prefix = name_prefix + "renewal:";
    auto slot_of = [&](std::string_view name) -> slot* {
        if (name.substr(0, prefix.size()) != prefix) return nullptr;
        std::size_t i = 0;
        auto digits = name.substr(prefix.size());
        auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), i);
        return ec == std::errc{} && end == digits.data() + digits.size() && i < n ? &slots[i] : nullptr;
    };

    std::atomic<bool> recording{true};
    std::atomic<long long> renew_failed{0};
    std::mutex lag_mutex;
    std::vector<std::pair<double, double>> lags;  // (completed, s since origin; lag, ms)
    lags.reserve(static_cast<std::size_t>(static_cast<double>(n) * a.seconds * 1000.0 /
                                          static_cast<double>(std::max<std::int64_t>(period.count(), 1))) +
                 16);
    auto const period_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(period).count();

    sqlock::locker_options options{.ttl = ttl};
    options.on_lost = [&](std::string_view name, std::int64_t) {
        if (auto* s = slot_of(name)) s->lost = true;
    };
    options.on_event = [&](sqlock::lease_event const& ev) {
        using kind = sqlock::lease_event::kind;
        if (ev.what == kind::renew_failed) ++renew_failed;
        if (ev.what != kind::acquired && ev.what != kind::renewed && ev.what != kind::lost) return;
        auto* s = slot_of(ev.name);
        if (s == nullptr) return;
        if (ev.what == kind::lost) {
            s->lost = true;
            return;
        }
        auto const t = now_ns();
        auto const previous = s->last_ns.exchange(t);
        if (ev.what != kind::renewed || previous < 0 || !recording.load(std::memory_order_relaxed)) return;
        double const lag_ms = static_cast<double>(t - (previous + period_ns)) / 1e6;
        std::lock_guard lock(lag_mutex);
        lags.emplace_back(static_cast<double>(t) / 1e9, lag_ms);
    };

    sqlock::store db(a.url, {.pool_size = threads + 4, .create_schema = true});
    auto locks = sqlock::table_locker(db, options);
    error_log errors;
    std::vector<std::optional<sqlock::lease>> held(n);
    auto in_parallel = [&](auto&& body) {
        std::vector<std::thread> workers;
        for (std::size_t t = 0; t < threads; ++t)
            workers.emplace_back([&, t] {
                for (std::size_t i = t; i < n; i += threads) body(i);
            });
        for (auto& w : workers) w.join();
    };

    double const cpu0 = cpu_us();
    auto const start = steady::now();
    in_parallel([&](std::size_t i) {
        std::string const name = prefix + std::to_string(i);
        try {
            held[i] = locks.try_acquire(name);
            if (!held[i]) std::cerr << "sqlock-grid: " << name << " was busy\n";
        } catch (std::exception const& ex) {
            errors.add("renewal acquire", ex);
        }
    });
    auto const acquired = steady::now();
    auto const count_held =
        static_cast<long long>(std::count_if(held.begin(), held.end(), [](auto const& l) { return l.has_value(); }));
    std::cerr << "sqlock-grid renewal: " << db.url() << ": " << count_held << " leases acquired in "
              << seconds_between(start, acquired) << " s; holding until " << a.seconds << " s\n";
    std::this_thread::sleep_until(std::max(acquired, start + std::chrono::duration_cast<steady::duration>(
                                                                 std::chrono::duration<double>(a.seconds))));
    recording = false;
    auto const stop = steady::now();
    double const cpu1 = cpu_us();
    in_parallel([&](std::size_t i) {
        try {
            if (held[i]) held[i]->release();
        } catch (std::exception const& ex) {
            errors.add("renewal release", ex);
        }
    });
    std::cerr << "sqlock-grid renewal: released in " << seconds_between(stop, steady::now()) << " s\n";

    long long lost = 0;
    for (std::size_t i = 0; i < n; ++i) lost += slots[i].lost.load() ? 1 : 0;
    std::vector<std::pair<double, double>> timeline;
    {
        std::lock_guard lock(lag_mutex);
        timeline = lags;
    }
    // The lag over time, by 10 s slices of completion time: does the renewer keep up?
    std::sort(timeline.begin(), timeline.end());
    double const origin_offset = seconds_between(origin, start);
    for (double from = 0; from + 0.5 < seconds_between(start, stop); from += 10) {
        std::vector<double> slice;
        for (auto const& [t, lag] : timeline)
            if (t - origin_offset >= from && t - origin_offset < from + 10) slice.push_back(lag);
        std::sort(slice.begin(), slice.end());
        std::cerr << "  t " << from << "-" << from + 10 << " s: " << slice.size() << " renewals, lag p50 "
                  << percentile(slice, 0.5) << " ms, p99 " << percentile(slice, 0.99) << " ms, max "
                  << (slice.empty() ? 0.0 : slice.back()) << " ms\n";
    }
    std::vector<double> all;
    all.reserve(timeline.size());
    for (auto const& [t, lag] : timeline) all.push_back(lag);
    std::sort(all.begin(), all.end());
    double const secs = seconds_between(start, stop);
    std::cerr << "sqlock-grid renewal: process CPU " << (cpu1 - cpu0) / 1e6 << " s over " << secs
              << " s; renew_failed events " << renew_failed.load() << "; expected about "
              << static_cast<long long>(static_cast<double>(count_held) *
                                        (secs - std::chrono::duration<double>(period).count()) /
                                        std::chrono::duration<double>(period).count())
              << " renewals if the renewer kept up\n";

    auto j = line_head("renewal", db, "sqlock-table", secs);
    j["leases"] = a.leases;
    j["ttl_ms"] = ttl.count();
    j["renewals"] = all.size();
    j["lag_p50_ms"] = r1(percentile(all, 0.50));
    j["lag_p99_ms"] = r1(percentile(all, 0.99));
    j["lag_max_ms"] = r1(all.empty() ? 0.0 : all.back());
    j["lost"] = lost;
    j["errors"] = errors.count();
    print_line(j);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "sqlock-grid: sqlock's side of the benchmark grid; one JSON line per run on stdout "
        "(bench/results-format.md)"};
    app.require_subcommand(1);

    cycle_args cycle;
    auto* c = app.add_subcommand("cycle", "acquire + release loops of N clients");
    c->add_option("--url", cycle.url, "database URL (postgresql://, mysql://, sqlite:)")->required();
    c->add_option("--lock", cycle.lock,
                  "table, row, semaphore, rw-shared or rw-exclusive (the last three over a table locker)")
        ->check(CLI::IsMember({"table", "row", "semaphore", "rw-shared", "rw-exclusive"}))
        ->capture_default_str();
    c->add_option("--permits", cycle.permits, "--lock semaphore: permits per name")
        ->check(CLI::Range(1, 10000))
        ->capture_default_str();
    c->add_option("--clients", cycle.clients, "concurrent threads")->check(CLI::Range(1, 1000))->capture_default_str();
    c->add_option("--names", cycle.names, "distinct or shared")
        ->check(CLI::IsMember({"distinct", "shared"}))
        ->capture_default_str();
    c->add_option("--seconds", cycle.seconds, "measured seconds (after 1 s of warm-up)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    c->add_option("--ttl", cycle.ttl, "lease TTL")->capture_default_str();
    c->add_option("--metrics", cycle.metrics,
                  "on (the process's metrics, the default) or off (record nothing: "
                  "the impl is reported with -nometrics)")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();

    handoff_args handoff;
    auto* h = app.add_subcommand("handoff", "from a release to the parked waiter holding the lock");
    h->add_option("--url", handoff.url, "database URL")->required();
    h->add_option("--path", handoff.path, "notify, row-queue, poll or in-process")
        ->check(CLI::IsMember({"notify", "row-queue", "poll", "in-process"}))
        ->capture_default_str();
    h->add_option("--samples", handoff.samples, "measured hand-offs")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();

    renewal_args renewal;
    auto* r = app.add_subcommand("renewal", "renewal lag of many leases held by one locker");
    r->add_option("--url", renewal.url, "database URL")->required();
    r->add_option("--leases", renewal.leases, "leases held")->check(CLI::Range(1, 10000000))->capture_default_str();
    r->add_option("--ttl", renewal.ttl, "lease TTL (renewed every ttl/3)")->capture_default_str();
    r->add_option("--seconds", renewal.seconds, "from the first acquire to the release")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    r->add_option("--threads", renewal.threads, "threads that acquire and release")
        ->check(CLI::Range(1, 256))
        ->capture_default_str();

    CLI11_PARSE(app, argc, argv);
    try {
        if (c->parsed()) return run_cycle(cycle);
        if (h->parsed()) return run_handoff(handoff);
        return run_renewal(renewal);
    } catch (sqlock::usage_error const& e) {
        std::cerr << "sqlock-grid: " << e.what() << "\n";
        return 2;
    } catch (std::exception const& e) {
        std::cerr << "sqlock-grid: " << e.what() << "\n";
        return 1;
    }
}
