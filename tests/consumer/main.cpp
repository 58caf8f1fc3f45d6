// A user of an installed sqlock: takes a lock on an SQLite file and prints its token; then catches
// the exceptions the library throws (with a shared libsqlock, from inside libsqlock.so: their
// typeinfo must match the one the program's handlers name, or the exception escapes them and the
// program ends in std::terminate). Exits 2 when an expected exception is not thrown.
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

    // usage_error (a std::logic_error): an empty lock name, refused before any I/O.
    bool caught = false;
    try {
        (void)locks.try_acquire("");
    } catch (sqlock::usage_error const&) {
        caught = true;
    }
    // lease_lost (a sqlock::error): a lease force-released by an operator, then released by its holder.
    auto held = locks.try_acquire("consumer:lost");
    if (!caught || !held) {
        std::cerr << "consumer: " << (caught ? "consumer:lost is busy" : "usage_error was not thrown") << '\n';
        return 2;
    }
    (void)sqlock::force_release(db, "consumer:lost");
    try {
        held->release();
        std::cerr << "consumer: lease_lost was not thrown\n";
        return 2;
    } catch (sqlock::lease_lost const& e) {
        if (e.message().empty()) return 2;
    }
    return 0;
}
