// sqlock tests — the acquiring process of Engines/SafetyMariaDB.PausedAcquireDoesNotBlockTheName,
// Engines/SafetyMariaDB.ReleaseBeforeTheMarkIsNotMissed and
// Engines/SafetyEveryEngine.WaitingAcquireNeverReturnsALeaseThatRanOut.
//
//   sqlock_safety_worker URL LOCK_NAME LOCK_WAIT_MS [TTL_MS [WAIT_MS [BACKOFF_MS [TABLE_PREFIX GO_FILE]]]]
//
// Opens a store on URL (lock_wait_timeout LOCK_WAIT_MS) and takes LOCK_NAME
// once with a table locker (ttl TTL_MS, default 30 s): try_acquire, or with
// WAIT_MS a waiting acquire (backoff_min = backoff_max = BACKOFF_MS if given).
// The tests start it with a failpoint set to `stop`, so it stops itself inside
// the acquire: after the server committed the grant and before the caller
// hears of it (SQLOCK_FAILPOINTS=mysql.acquire.after_call=stop or
// acquire.after_commit_before_return=stop), or between a busy answer and its
// mark of the row (mysql.acquire.before_mark=stop). When it goes on: prints
// "acquired TOKEN" or "busy" and exits 0; on an error, a message on stderr and
// exit 2. With TABLE_PREFIX (its tables) and GO_FILE: a waiting acquire of
// LOCK_NAME-warm first starts the store's listener; then it prints "warm" and
// takes LOCK_NAME once GO_FILE exists (the test makes it when it sees the
// listener parked), so no wake-up of a listener just up reaches that acquire.
#include "worker_common.hpp"

#include <sqlock/sqlock.hpp>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

using namespace sqlock_test;

int main(int argc, char** argv) {
    using namespace std::chrono_literals;
    if (argc < 4 || argc > 9 || argc == 8) {
        std::cerr << "usage: " << argv[0]
                  << " URL LOCK_NAME LOCK_WAIT_MS [TTL_MS [WAIT_MS [BACKOFF_MS [TABLE_PREFIX GO_FILE]]]]\n";
        return 2;
    }
    std::string const url = argv[1];
    std::string const name = argv[2];
    auto const lock_wait = std::chrono::milliseconds(std::atol(argv[3]));
    auto const ttl = argc > 4 ? std::chrono::milliseconds(std::atol(argv[4])) : std::chrono::milliseconds(30s);
    try {
        sqlock::store_options store_options{.pool_size = 1, .lock_wait_timeout = lock_wait};
        if (argc > 8) store_options.table_prefix = argv[7];
        sqlock::store db{url, store_options};
        sqlock::locker_options options{.ttl = ttl, .auto_renew = false};
        if (argc > 6) options.backoff_min = options.backoff_max = std::chrono::milliseconds(std::atol(argv[6]));
        sqlock::locker locks = sqlock::table_locker(db, options);
        if (argc > 8) {
            locks.acquire(name + "-warm", 60s).release();
            std::cout << "warm" << std::endl;
            auto const give_up = std::chrono::steady_clock::now() + 60s;
            while (!std::filesystem::exists(argv[8]) && std::chrono::steady_clock::now() < give_up)
                std::this_thread::sleep_for(10ms);
        }
        std::optional<sqlock::lease> l;
        if (argc > 5) l = locks.acquire(name, std::chrono::milliseconds(std::atol(argv[5])));
        else l = locks.try_acquire(name);
        if (l) {
            std::cout << "acquired " << l->token() << std::endl;
        } else {
            std::cout << "busy" << std::endl;
        }
    } catch (std::exception const& e) {
        return report_failure("sqlock_safety_worker", e);
    }
    return 0;
}
