// sqlock-refund-once-majority: refund an order once, with the lock on three databases.
//
// A refund request for order 1001 arrives twice, at two workers at once. Each
// worker locks "refund:1001" with a majority lock over three independent
// databases (any one of them may be down), checks that the order is still
// paid, and refunds it. Exactly one refunds: the other sees the lock busy, or,
// had it come later, the order already refunded. The refund is written with
// the lease's fencing token (sqlock::fence), so a worker that paused past its
// lease could not refund after a newer holder.
//
//   sqlock-refund-once-majority                        three SQLite files in a temporary directory
//   sqlock-refund-once-majority --db URL --db URL --db URL [--shop FILE]
//
// The shop (orders, refunds and the fence table) is a SQLite file here; in a
// real service it is the application's own database.
#include <sqlock/sqlock.hpp>

#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

using namespace std::chrono_literals;

namespace {

constexpr int order_id = 1001;

void say(std::string const& line) {
    static std::mutex m;
    std::lock_guard lock(m);
    std::cout << line << std::endl;
}

soci::session open_shop(std::string const& path) {
    return soci::session(*soci::factory_sqlite3(), "db=" + path + " timeout=5");
}

// The protected write: refund the order if it is still paid, in one
// transaction that first checks the lease's token.
void refund(std::string const& shop, sqlock::fence const& fence, sqlock::lease const& lease, std::string const& who) {
    auto s = open_shop(shop);
    soci::transaction tx(s);
    fence.check_and_set(s, "order:" + std::to_string(order_id), lease.token());  // throws sqlock::stale_token
    std::string status;
    s << "SELECT status FROM orders WHERE id = :id", soci::use(order_id), soci::into(status);
    if (status != "paid") {
        say(who + ": order is already " + status + ", nothing to do");
        return;  // ~transaction rolls back
    }
    std::this_thread::sleep_for(200ms);  // the payment provider's refund call
    s << "INSERT INTO refunds (order_id, token) VALUES (:id, :token)", soci::use(order_id),
        soci::use(static_cast<long long>(lease.token()));
    s << "UPDATE orders SET status = 'refunded' WHERE id = :id", soci::use(order_id);
    tx.commit();
    say(who + ": refunded order " + std::to_string(order_id) + " with token " + std::to_string(lease.token()));
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"sqlock-refund-once-majority: two workers race to refund one order; a majority lock lets one"};
    std::vector<std::string> urls;
    std::string shop;
    app.add_option("--db", urls, "a member database URL (give three; default: three SQLite files)");
    app.add_option("--shop", shop, "the shop's SQLite file (default: in the temporary directory)");
    CLI11_PARSE(app, argc, argv);

    auto const dir = std::filesystem::temp_directory_path() / ("sqlock-refund-" + std::to_string(::getpid()));
    struct remove_dir {
        std::filesystem::path path;
        ~remove_dir() { std::filesystem::remove_all(path); }  // after the stores closed their files
    } temporary{dir};
    try {
        std::filesystem::create_directories(dir);
        if (urls.empty())
            for (char const* member : {"a", "b", "c"}) urls.push_back("sqlite://" + (dir / member).string() + ".db");
        if (shop.empty()) shop = (dir / "shop.db").string();

        // One store and one locker per member; the majority locker over them.
        std::vector<sqlock::store> stores;
        std::vector<sqlock::locker> members;
        stores.reserve(urls.size());
        for (auto const& url : urls) {
            stores.emplace_back(url, sqlock::store_options{.create_schema = true});
            members.push_back(sqlock::table_locker(stores.back(), {.ttl = 10s}));
            std::cout << "member: " << stores.back().url() << "\n";
        }
        auto locks = sqlock::majority_locker(members);

        // The shop: the order, its refunds, and the fence table (sqlock_fences).
        sqlock::store shop_store{"sqlite://" + std::filesystem::absolute(shop).string(), {.create_schema = true}};
        sqlock::fence fence{shop_store};
        {
            auto s = open_shop(shop);
            s << "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL)";
            s << "CREATE TABLE IF NOT EXISTS refunds (order_id INTEGER NOT NULL, token INTEGER NOT NULL)";
            s << "DELETE FROM refunds WHERE order_id = :id", soci::use(order_id);
            s << "INSERT OR REPLACE INTO orders (id, status) VALUES (:id, 'paid')", soci::use(order_id);
        }

        // Two workers receive the same refund request at the same moment.
        std::latch go{2};
        bool failed = false;
        auto worker = [&](std::string const& who) {
            go.arrive_and_wait();
            try {
                if (auto lease = locks.try_acquire("refund:" + std::to_string(order_id))) {
                    refund(shop, fence, *lease, who);
                } else {
                    say(who + ": refund:" + std::to_string(order_id) + " is locked: another worker is refunding it");
                }
            } catch (std::exception const& e) {
                failed = true;
                say(who + ": " + e.what());
            }
        };
        {
            std::jthread w1(worker, "worker 1");
            std::jthread w2(worker, "worker 2");
        }

        int refunds = 0;
        auto s = open_shop(shop);
        s << "SELECT COUNT(*) FROM refunds WHERE order_id = :id", soci::use(order_id), soci::into(refunds);
        bool const ok = refunds == 1 && !failed;
        std::cout << "refunds of order " << order_id << ": " << refunds << " (expected 1)\n"
                  << (ok ? "OK" : "FAILED") << "\n";
        return ok ? 0 : 1;
    } catch (std::exception const& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    }
}
