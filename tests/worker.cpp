// sqlock tests — a table-lock worker process.
//
//   sqlock_test_worker URL LOCK_NAME COUNTER_FILE RECORD_FILE ITERATIONS READY_FILE GO_FILE
//       One contender of Engines/TableLock.ProcessContentionIsExclusive. Creates
//       READY_FILE, waits for GO_FILE (the start barrier: every contender is
//       connected before any of them starts), then ITERATIONS times: note the
//       time, acquire(LOCK_NAME, 60s); read the integer in COUNTER_FILE, pause a
//       little, write it back plus one (plain file I/O, no file locking: only
//       the lock protects it); append "token enter_ns exit_ns pid invoke_ns" to
//       RECORD_FILE (steady_clock = CLOCK_MONOTONIC, comparable across processes
//       on one host); release; pause 0-2 ms.
//
//   sqlock_test_worker skew URL NAME_PREFIX COUNT [DB_CLOCK_SHIFT_MS]
//       For Engines/Lifecycle.ClockSkewMatchesAKnownOffset: COUNT times acquire
//       and release NAME_PREFIX<i>, then print "skew_us <S> samples <N>" (the
//       store's clock-skew telemetry). The test runs it under libfaketime to
//       shift this process's clock. On SQLite the database's clock is this
//       process's own, so libfaketime would move both: DB_CLOCK_SHIFT_MS shifts
//       SQLite's clock alone (a default VFS whose current time is shifted).
//
//   sqlock_test_worker hold URL NAME TTL_MS HOLD_MS
//       For Engines/ClientClock.WallClockJumpsDoNotMoveTheRenewalSchedule (C06): acquire NAME with
//       a TTL_MS lease that the watchdog renews, print "held <token>", keep it HOLD_MS (steady
//       clock) checking every 20 ms that it is still held, then print "renewed <N>" (the locker's
//       renewal count) and release it. The test jumps this process's wall clock meanwhile. A lease
//       that stops being held prints "lost after <ms> ms: <state>" and exits 3.
//
// Exit 0 on success; on any error, a message on stderr and exit 2.
#include "worker_common.hpp"

#include <sqlock/sqlock.hpp>

#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

using namespace sqlock_test;
using namespace std::chrono_literals;

namespace {

int usage(char const* self) {
    std::cerr << "usage: " << self << " URL LOCK_NAME COUNTER_FILE RECORD_FILE ITERATIONS READY_FILE GO_FILE\n"
              << "       " << self << " skew URL NAME_PREFIX COUNT [DB_CLOCK_SHIFT_MS]\n"
              << "       " << self << " hold URL NAME TTL_MS HOLD_MS\n";
    return 2;
}

void contend(std::string const& url, std::string const& name, std::string const& counter_file,
             std::string const& record_file, int iterations, std::string const& ready_file,
             std::string const& go_file) {
    long const pid = static_cast<long>(::getpid());
    sqlock::store db{url, {.pool_size = 2}};
    sqlock::locker locks = sqlock::table_locker(db, {.ttl = 30s, .backoff_min = 1ms, .backoff_max = 20ms});
    std::ofstream records = open_records(record_file);
    std::minstd_rand rng(static_cast<unsigned>(pid));
    start_barrier(ready_file, go_file);

    for (int i = 0; i < iterations; ++i) {
        std::int64_t const invoke = steady_ns();
        sqlock::lease l = locks.acquire(name, 60s);
        std::int64_t const enter = steady_ns();

        bump_counter(counter_file, [&] {
            if (auto us = rng() % 200; us == 0) {
                std::this_thread::yield();
            } else {
                std::this_thread::sleep_for(std::chrono::microseconds(us));
            }
        });

        std::int64_t const exit = steady_ns();
        write_record(records, l.token(), enter, exit, pid, invoke);
        l.release();
        // A pause outside the lock, so other processes get it too (the
        // releasing process would otherwise win again at once).
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    }
}

// ---- a SQLite clock shifted by a known offset

std::int64_t shift_ms = 0;
sqlite3_vfs* real_vfs = nullptr;
sqlite3_vfs shifted_vfs;

int shifted_time_int64(sqlite3_vfs*, sqlite3_int64* out) {
    int rc = real_vfs->xCurrentTimeInt64(real_vfs, out);  // Julian day in ms
    *out += shift_ms;
    return rc;
}

int shifted_time(sqlite3_vfs*, double* out) {
    sqlite3_int64 ms = 0;
    int rc = shifted_time_int64(nullptr, &ms);
    *out = static_cast<double>(ms) / 86400000.0;
    return rc;
}

// Registers, as the default VFS, a copy of the default one whose clock (what
// julianday('now') reads) runs `ms` ahead of this host's.
void shift_sqlite_clock(std::int64_t ms) {
    real_vfs = sqlite3_vfs_find(nullptr);
    if (real_vfs == nullptr || real_vfs->iVersion < 2 || real_vfs->xCurrentTimeInt64 == nullptr)
        throw std::runtime_error("the default SQLite VFS has no xCurrentTimeInt64: cannot shift its clock");
    shift_ms = ms;
    shifted_vfs = *real_vfs;
    shifted_vfs.zName = "sqlock-test-shifted-clock";
    shifted_vfs.xCurrentTime = shifted_time;
    shifted_vfs.xCurrentTimeInt64 = shifted_time_int64;
    if (sqlite3_vfs_register(&shifted_vfs, 1) != SQLITE_OK)
        throw std::runtime_error("cannot register the shifted-clock SQLite VFS");
}

void skew(std::string const& url, std::string const& prefix, int count) {
    sqlock::store db{url};
    sqlock::locker locks = sqlock::table_locker(db, {.ttl = 60s});
    for (int i = 0; i < count; ++i) {
        sqlock::lease l = locks.acquire(prefix + std::to_string(i), 10s);
        l.release();
    }
    auto const st = db.stats();
    std::cout << "skew_us " << st.clock_skew.count() << " samples " << st.clock_samples << std::endl;
}

int hold(std::string const& url, std::string const& name, std::chrono::milliseconds ttl,
         std::chrono::milliseconds hold_for) {
    sqlock::store db{url};
    sqlock::locker locks = sqlock::table_locker(db, {.ttl = ttl});
    sqlock::lease l = locks.acquire(name, 10s);
    std::cout << "held " << l.token() << std::endl;
    auto const start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < hold_for) {
        if (l.state() != sqlock::lease_state::held) {
            auto const after =
                std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
            std::cout << "lost after " << after.count() << " ms: " << sqlock::to_string(l.state()) << std::endl;
            return 3;
        }
        std::this_thread::sleep_for(20ms);
    }
    std::cout << "renewed " << locks.stats().renewed << std::endl;
    l.release();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) return usage(argv[0]);
    try {
        if (std::string(argv[1]) == "skew") {
            if (argc != 5 && argc != 6) return usage(argv[0]);
            if (argc == 6) shift_sqlite_clock(std::atoll(argv[5]));
            skew(argv[2], argv[3], std::atoi(argv[4]));
        } else if (std::string(argv[1]) == "hold") {
            if (argc != 6) return usage(argv[0]);
            return hold(argv[2], argv[3], std::chrono::milliseconds(std::atoll(argv[4])),
                        std::chrono::milliseconds(std::atoll(argv[5])));
        } else if (argc == 8) {
            contend(argv[1], argv[2], argv[3], argv[4], std::atoi(argv[5]), argv[6], argv[7]);
        } else {
            return usage(argv[0]);
        }
    } catch (std::exception const& e) {
        return report_failure("sqlock_test_worker", e);
    }
    return 0;
}
