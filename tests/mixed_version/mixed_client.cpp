// sqlock tests — one client of the mixed-version storm (tests/faults/mixed_version_suite.cpp).
//
// Built twice from this one file: against this tree's library (target sqlock_mixed_client), and by
// scripts/old-client.sh against an older release's installed library (find_package(sqlock), as a
// user builds), so that clients of both take the same locks on the same tables. It uses only the
// API both releases have.
//
//   [SQLOCK_MIXED_CREATE_SCHEMA=1] mixed_client URL TABLE_PREFIX table|row OWNER SECONDS NAME...
//
// Until SECONDS have passed: picks one of the NAMEs at random, takes it (a waiting acquire of up to
// 2 s, or now and then a try), holds it for up to 2 ms, releases it, and pauses for up to 3 ms.
// Prints one line at the end, "grants N busy N timeouts N", and exits 0; any other error is printed
// on stderr and exits 1.
// Positional arguments: the older build has no dependency beyond sqlock itself.
#include <sqlock/sqlock.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) try {
    using namespace std::chrono;
    if (argc < 7) {
        std::fprintf(stderr, "usage: mixed_client URL TABLE_PREFIX table|row OWNER SECONDS NAME...\n");
        return 64;
    }
    std::string const url = argv[1], prefix = argv[2], strategy = argv[3], owner = argv[4];
    auto const until = steady_clock::now() + seconds(std::stoi(argv[5]));
    std::vector<std::string> const names(argv + 6, argv + argc);

    // SQLOCK_MIXED_CREATE_SCHEMA=1: the tables are made by this client's own schema.
    char const* create = std::getenv("SQLOCK_MIXED_CREATE_SCHEMA");
    sqlock::store db(url, {.create_schema = create != nullptr && std::string(create) == "1", .table_prefix = prefix});
    sqlock::locker_options const options{.ttl = seconds(10), .owner = owner};
    auto locks = strategy == "row" ? sqlock::row_locker(db, options) : sqlock::table_locker(db, options);

    std::mt19937 random(std::random_device{}());
    long grants = 0, busy = 0, timeouts = 0;
    while (steady_clock::now() < until) {
        auto const& name = names[random() % names.size()];
        std::optional<sqlock::lease> held;
        if (random() % 4 == 0) {
            held = locks.try_acquire(name);
            if (!held) ++busy;
        } else {
            try {
                held.emplace(locks.acquire(name, seconds(2)));
            } catch (sqlock::timeout const&) {
                ++timeouts;
            }
        }
        if (!held) continue;
        ++grants;
        std::this_thread::sleep_for(microseconds(random() % 2000));
        held->release();
        // Some work between two holds, as a service does: a waiter that polls (SQLite's row lock, a waiter
        // that an older release does not ring) gets its turn too.
        std::this_thread::sleep_for(microseconds(random() % 3000));
    }
    std::printf("grants %ld busy %ld timeouts %ld\n", grants, busy, timeouts);
    return 0;
} catch (std::exception const& e) {
    std::fprintf(stderr, "mixed_client: %s\n", e.what());
    return 1;
}
