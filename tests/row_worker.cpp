// sqlock tests — a row-lock (sqlock::row_locker) holder or contender in its own
// process, for the process-contention, kill -9 and crash-token tests of
// tests/row_lock_suite.cpp.
//
//   sqlock_row_worker loop URL LOCK_NAME COUNTER_FILE RECORD_FILE ITERATIONS READY_FILE GO_FILE
//       Creates READY_FILE and waits for GO_FILE (the start barrier: every
//       contender is connected before any starts), then ITERATIONS times: note
//       the time, acquire(LOCK_NAME, 60s); read the integer in COUNTER_FILE,
//       pause a little, write it back plus one (plain file I/O: only the lock
//       protects it); append "token enter_ns exit_ns pid invoke_ns" to
//       RECORD_FILE (steady_clock = CLOCK_MONOTONIC, comparable across
//       processes); release; pause 0-2 ms.
//
//   sqlock_row_worker hold URL LOCK_NAME TTL_MS
//       acquire(LOCK_NAME, 30s) with the renewer on, print "token <T>" on
//       stdout, then hold until killed (the tests kill -9 it).
//
// Exit 0 on success; on any error, a message on stderr and exit 2.
#include "worker_common.hpp"

#include <sqlock/sqlock.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;

int usage(char const* self) {
    std::cerr << "usage: " << self << " loop URL LOCK_NAME COUNTER_FILE RECORD_FILE ITERATIONS READY_FILE GO_FILE\n"
              << "       " << self << " hold URL LOCK_NAME TTL_MS\n";
    return 2;
}

void loop(std::string const& url, std::string const& name, std::string const& counter_file,
          std::string const& record_file, int iterations, std::string const& ready_file, std::string const& go_file) {
    long const pid = static_cast<long>(::getpid());
    // One connection held by a lease or a waiting acquire, one for the short
    // statements around it (the first use of a name creates its row).
    sqlock::store db{url, {.pool_size = 3}};
    sqlock::locker locks = sqlock::row_locker(db, {.ttl = 30s});
    std::ofstream records = open_records(record_file);
    std::minstd_rand rng(static_cast<unsigned>(pid));
    start_barrier(ready_file, go_file);

    for (int i = 0; i < iterations; ++i) {
        std::int64_t const invoke = steady_ns();
        sqlock::lease l = locks.acquire(name, 60s);
        std::int64_t const enter = steady_ns();
        bump_counter(counter_file, [&] { std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200)); });
        std::int64_t const exit = steady_ns();
        write_record(records, l.token(), enter, exit, pid, invoke);
        l.release();
        // Outside the lock, so the other processes get it too.
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    }
}

[[noreturn]] void hold(std::string const& url, std::string const& name, std::chrono::milliseconds ttl) {
    sqlock::store db{url, {.pool_size = 3}};
    sqlock::locker locks = sqlock::row_locker(db, {.ttl = ttl});
    sqlock::lease l = locks.acquire(name, 30s);
    std::cout << "token " << l.token() << std::endl;
    for (;;) std::this_thread::sleep_for(1h);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) return usage(argv[0]);
    std::string const mode = argv[1];
    try {
        if (mode == "loop" && argc == 9) {
            loop(argv[2], argv[3], argv[4], argv[5], std::atoi(argv[6]), argv[7], argv[8]);
        } else if (mode == "hold" && argc == 5) {
            hold(argv[2], argv[3], std::chrono::milliseconds(std::atol(argv[4])));
        } else {
            return usage(argv[0]);
        }
    } catch (std::exception const& e) {
        return report_failure("sqlock_row_worker", e);
    }
    return 0;
}
