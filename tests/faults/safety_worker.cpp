// sqlock tests — the acquiring process of Engines/SafetyMariaDB.PausedAcquireDoesNotBlockTheName and
// Engines/SafetyEveryEngine.WaitingAcquireNeverReturnsALeaseThatRanOut.
//
//   sqlock_safety_worker URL LOCK_NAME LOCK_WAIT_MS [TTL_MS [WAIT_MS]]
//
// Opens a store on URL (lock_wait_timeout LOCK_WAIT_MS) and takes LOCK_NAME
// once with a table locker (ttl TTL_MS, default 30 s): try_acquire, or with
// WAIT_MS a waiting acquire. The tests start it with a failpoint set to `stop`
// (SQLOCK_FAILPOINTS=mysql.acquire.after_call=stop or
// acquire.after_commit_before_return=stop), so it stops itself inside the
// acquire, after the server committed the grant and before the caller hears
// of it. When it goes on: prints "acquired TOKEN" or "busy" and exits 0; on an
// error, a message on stderr and exit 2.
#include "worker_common.hpp"

#include <sqlock/sqlock.hpp>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>

using namespace sqlock_test;

int main(int argc, char** argv) {
    using namespace std::chrono_literals;
    if (argc < 4 || argc > 6) {
        std::cerr << "usage: " << argv[0] << " URL LOCK_NAME LOCK_WAIT_MS [TTL_MS [WAIT_MS]]\n";
        return 2;
    }
    std::string const url = argv[1];
    std::string const name = argv[2];
    auto const lock_wait = std::chrono::milliseconds(std::atol(argv[3]));
    auto const ttl = argc > 4 ? std::chrono::milliseconds(std::atol(argv[4])) : std::chrono::milliseconds(30s);
    try {
        sqlock::store db{url, {.pool_size = 1, .lock_wait_timeout = lock_wait}};
        sqlock::locker locks = sqlock::table_locker(db, {.ttl = ttl, .auto_renew = false});
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
