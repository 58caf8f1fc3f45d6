// sqlock tests — one contender of Majority.ProcessContentionIsExclusive.
//
//   sqlock_majority_worker TABLE_PREFIX LOCK_NAME COUNTER_FILE RECORD_FILE GRANTS READY_FILE GO_FILE URL...
//
// A majority locker over one table_locker per URL (tables TABLE_PREFIX_*).
// Creates READY_FILE, then waits for GO_FILE (the start barrier: every worker
// is connected before any of them tries). Then until it was granted GRANTS
// times: try_acquire(LOCK_NAME); when busy, count it and pause 0-2 ms; when
// granted, read the integer in COUNTER_FILE, pause a little, write it back plus
// one (plain file I/O: only the lock protects it), append "token enter_ns
// exit_ns pid invoke_ns" to RECORD_FILE (CLOCK_MONOTONIC, comparable across
// processes; invoke_ns is the first try of the tries that ended in this grant),
// release, pause 0-2 ms. Prints "granted N busy M" on stdout and exits 0; on
// any error (or no GRANTS grants within 120 s), a message on stderr and exit 2.
#include "worker_common.hpp"

#include <sqlock/sqlock.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <list>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace sqlock_test;

int main(int argc, char** argv) {
    using namespace std::chrono_literals;
    if (argc < 9) {
        std::cerr << "usage: " << argv[0]
                  << " TABLE_PREFIX LOCK_NAME COUNTER_FILE RECORD_FILE GRANTS READY_FILE GO_FILE URL...\n";
        return 2;
    }
    std::string const tables = argv[1];
    std::string const name = argv[2];
    std::string const counter_file = argv[3];
    std::string const record_file = argv[4];
    int const grants = std::atoi(argv[5]);
    std::filesystem::path const ready_file = argv[6];
    std::filesystem::path const go_file = argv[7];
    long const pid = static_cast<long>(::getpid());

    try {
        std::list<sqlock::store> stores;  // stable addresses; outlive the lockers
        std::vector<sqlock::locker> members;
        for (int i = 8; i < argc; ++i) {
            stores.emplace_back(argv[i], sqlock::store_options{.pool_size = 4, .table_prefix = tables});
            members.push_back(sqlock::table_locker(stores.back(), {.ttl = 30s, .auto_renew = false}));
        }
        // member_timeout well above a local answer even on a loaded machine (the default, ttl / 10, is 3 s): a
        // member that misses it fails the attempt, and the late row it may leave lives until its 30 s TTL, which
        // the test's final "no rows left" check would see. Exclusion does not depend on it.
        sqlock::locker locks =
            sqlock::majority_locker(std::move(members), {.member_timeout = 10s, .auto_renew = false});
        std::ofstream records = open_records(record_file);
        std::minstd_rand rng(static_cast<unsigned>(pid));

        start_barrier(ready_file, go_file);

        long granted = 0, busy = 0;
        std::int64_t invoke = -1;  // the first try towards the next grant
        auto const limit = std::chrono::steady_clock::now() + 120s;
        while (granted < grants) {
            if (std::chrono::steady_clock::now() > limit)
                throw std::runtime_error("only " + std::to_string(granted) + " of " + std::to_string(grants) +
                                         " grants in 120 s (" + std::to_string(busy) + " busy)");
            if (invoke < 0) invoke = steady_ns();
            auto l = locks.try_acquire(name);
            if (!l) {
                ++busy;
                std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
                continue;
            }
            std::int64_t const enter = steady_ns();
            bump_counter(counter_file, [&] { std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500)); });
            std::int64_t const exit = steady_ns();
            write_record(records, l->token(), enter, exit, pid, invoke);
            invoke = -1;
            // On a loaded machine a member may miss member_timeout in the release round: the lease is then
            // in doubt, not released, and the error says to call release() again. Do what it says.
            for (int tries = 1;; ++tries) {
                try {
                    l->release();
                    break;
                } catch (sqlock::in_doubt const&) {
                    if (tries >= 5) throw;
                }
            }
            ++granted;
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
        }
        std::cout << "granted " << granted << " busy " << busy << "\n";
    } catch (std::exception const& e) {
        return report_failure("sqlock_majority_worker", e);
    }
    return 0;
}
