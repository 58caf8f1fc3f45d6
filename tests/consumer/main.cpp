// A user of an installed sqlock: takes a lock on an SQLite file and prints its token.
// Built by scripts/check-install.sh through find_package (CMakeLists.txt) and through
// pkg-config (Makefile), against a `cmake --install` prefix.
//   sqlock-consumer [DB-FILE]     (default: ./consumer.db)
#include <sqlock/sqlock.hpp>

#include <chrono>
#include <iostream>
#include <string>

using namespace std::chrono_literals;

int main(int argc, char** argv) {
    std::string const file = argc > 1 ? argv[1] : "consumer.db";
    sqlock::store db{"sqlite:" + file, {.create_schema = true}};
    auto locks = sqlock::table_locker(db, {.ttl = 30s});
    auto lease = locks.try_acquire("consumer:example");
    if (!lease) {
        std::cerr << "consumer: the lock is busy\n";
        return 1;
    }
    // std::chrono::sys_time and std::stop_token come from sqlock's headers: C++20 is required,
    // and the sqlock::sqlock target asks for it.
    std::stop_token const stop = lease->stop_token();
    std::cout << "token " << lease->token() << (stop.stop_requested() ? " (lost)" : "") << '\n';
    lease->release();
    return 0;
}
