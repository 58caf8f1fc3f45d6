// sqlock tests — one contender of the multi-process contention test.
//
//   sqlock_test_worker URL LOCK_NAME COUNTER_FILE RECORD_FILE ITERATIONS
//
// ITERATIONS times: acquire(LOCK_NAME, 60s); read the integer in COUNTER_FILE,
// pause a little, write it back plus one (plain file I/O, no file locking: only
// the lock protects it); append "token enter_ns exit_ns pid" to RECORD_FILE
// (steady_clock = CLOCK_MONOTONIC, comparable across processes on one host);
// release; pause 0-2 ms. Exit 0 on success; on any error, a message on stderr and exit 2.
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

using namespace sqlock_test;

int main(int argc, char** argv) {
    using namespace std::chrono_literals;
    if (argc != 6) {
        std::cerr << "usage: " << argv[0] << " URL LOCK_NAME COUNTER_FILE RECORD_FILE ITERATIONS\n";
        return 2;
    }
    std::string const url = argv[1];
    std::string const name = argv[2];
    std::string const counter_file = argv[3];
    std::string const record_file = argv[4];
    int const iterations = std::atoi(argv[5]);
    long const pid = static_cast<long>(::getpid());

    try {
        sqlock::store db{url, {.pool_size = 2}};
        sqlock::locker locks =
            sqlock::table_locker(db, {.ttl = 30s, .backoff_min = 1ms, .backoff_max = 20ms});
        std::ofstream records = open_records(record_file);
        std::minstd_rand rng(static_cast<unsigned>(pid));

        for (int i = 0; i < iterations; ++i) {
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
            write_record(records, l.token(), enter, exit, pid);
            l.release();
            // A pause outside the lock, so other processes get it too (the
            // releasing process would otherwise win again at once).
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
        }
    } catch (std::exception const& e) {
        return report_failure("sqlock_test_worker", e);
    }
    return 0;
}
