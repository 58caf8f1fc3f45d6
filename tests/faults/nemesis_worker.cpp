// sqlock reliability battery — the partitioned holder of D07 (tests/faults/server_nemesis_suite.cpp).
//
// Usage: sqlock_nemesis_worker URL FENCE_CONNINFO NAME HEAL_FILE [table|row]
// Run inside a network namespace (`ip netns exec NS sqlock_nemesis_worker ...`). It takes NAME with
// the table lock (default) or the row lock (`row`: SELECT ... FOR UPDATE in an open transaction), with
// a 2 s TTL (auto-renewed, io_timeout 500 ms), then waits until the lease is reported lost (the test
// partitions it away from the server meanwhile), then until HEAL_FILE exists (the test healed the
// partition and the new holder has written through the fence), then tries, with its old lease:
// renew(), release() and a fenced write (sqlock::fence on a SOCI session opened with
// FENCE_CONNINFO: libpq keywords, or SOCI MySQL keywords when URL is a mysql:// one). Every step and every lease event
// is one line on stdout, flushed at once:
//   <steady ns> <what> [details]
// with what = acquired <token> | deadline <steady ns of the lease's safe deadline, when it moves> | event <kind>
// <token> <detail> | lost-seen <state> | renew <outcome> | release <outcome> | fence <accepted|stale|error ...> | done.
// Exit 0 after "done", 2 on a setup error.
#include "worker_common.hpp"

#include <sqlock/sqlock.hpp>

#include <soci/mysql/soci-mysql.h>
#include <soci/postgresql/soci-postgresql.h>
#include <soci/soci.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;
using sqlock_test::steady_ns;

std::mutex out_mutex;

void say(std::string const& line) {
    std::lock_guard lock(out_mutex);
    std::cout << steady_ns() << ' ' << line << '\n' << std::flush;
}

// One word for how a call on the old lease ended.
template <class Call>
std::string outcome(Call&& call) {
    try {
        call();
        return "ok";
    } catch (sqlock::lease_lost const&) {
        return "lease_lost";
    } catch (sqlock::stale_token const& e) {
        return "stale seen=" + std::to_string(e.seen());
    } catch (std::exception const& e) {
        return std::string("error ").append(typeid(e).name()).append(": ").append(e.what());
    }
}

template <class Cond>
bool wait_for(Cond cond, std::chrono::seconds limit) {
    auto const end = std::chrono::steady_clock::now() + limit;
    while (!cond()) {
        if (std::chrono::steady_clock::now() >= end) return cond();
        std::this_thread::sleep_for(5ms);
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5 && argc != 6) {
        std::cerr << "usage: sqlock_nemesis_worker URL FENCE_CONNINFO NAME HEAL_FILE [table|row]\n";
        return 2;
    }
    std::string const url = argv[1], conninfo = argv[2], name = argv[3];
    std::filesystem::path const heal_file = argv[4];
    std::string const kind = argc == 6 ? argv[5] : "table";
    if (kind != "table" && kind != "row") {
        std::cerr << "sqlock_nemesis_worker: the lock kind must be table or row, not '" << kind << "'\n";
        return 2;
    }
    bool const mysql = url.rfind("mysql://", 0) == 0;
    try {
        sqlock::store db(url, {.pool_size = 4, .create_schema = true, .connect_timeout = 2s, .io_timeout = 500ms});
        sqlock::locker_options options{.ttl = 2s, .on_event = [](sqlock::lease_event const& e) {
                                           say(std::string("event ")
                                                   .append(sqlock::to_string(e.what))
                                                   .append(" ")
                                                   .append(std::to_string(e.token))
                                                   .append(" ")
                                                   .append(e.detail));
                                       }};
        auto locks = kind == "row" ? sqlock::row_locker(db, options) : sqlock::table_locker(db, options);
        sqlock::lease held = locks.acquire(name, 10s);
        say("acquired " + std::to_string(held.token()));

        // The test partitions us now; the lease must be reported lost while we cannot reach the server.
        // Meanwhile our safe deadline (now + remaining()) is printed whenever it moves, so the test can
        // compare the last one with the time another client was granted the lock.
        std::int64_t deadline = 0;
        if (!wait_for(
                [&] {
                    auto const now = steady_ns();
                    auto const left = std::chrono::duration_cast<std::chrono::nanoseconds>(held.remaining()).count();
                    if (held.stop_token().stop_requested()) return true;
                    if (left > 0 && std::llabs(now + left - deadline) > 1000000) {
                        deadline = now + left;
                        say("deadline " + std::to_string(deadline));
                    }
                    return false;
                },
                60s)) {
            say("never-lost " + std::string(sqlock::to_string(held.state())));
            return 1;
        }
        say("lost-seen " + std::string(sqlock::to_string(held.state())));

        if (!wait_for([&] { return std::filesystem::exists(heal_file); }, 60s)) {
            say("never-healed");
            return 1;
        }
        say("renew " + outcome([&] { held.renew(); }));
        say("release " + outcome([&] { held.release(); }));
        say("fence " + outcome([&] {
                soci::session s(mysql ? *soci::factory_mysql() : *soci::factory_postgresql(), conninfo);
                soci::transaction tx(s);
                sqlock::fence(db).check_and_set(s, name, held.token());
                tx.commit();
            }));
        say("done");
        return 0;
    } catch (std::exception const& e) {
        say(std::string("setup-error ").append(e.what()));
        std::cerr << "sqlock_nemesis_worker: " << e.what() << '\n';
        return 2;
    }
}
