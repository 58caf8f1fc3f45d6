// sqlock tests — a process whose metrics are scraped over HTTP, for
// Engines/MetricsScrape.*.
//
//   sqlock_metrics_probe URL PREFIX TTL_MS [KEEP [wait]]
//       Serves the process's metrics (sqlock::prometheus through prometheus-cpp's
//       Exposer on 127.0.0.1, a free port) and prints "port <N>". Then, with a
//       table locker of TTL_MS: three grants (PREFIX a, b, c), one busy attempt
//       (a again, held), releases a and b and keeps c, renewed by the watchdog,
//       and KEEP - 1 more (PREFIX c1, c2, ...; KEEP defaults to 1). With `wait`,
//       a second locker waits (up to 10 minutes) for PREFIX w, which the test
//       holds. Prints "ready <token of c>" and waits for its stdin to close,
//       then stops the waiter, prints "state <held|in_doubt|lost>" of c and exits 0.
//
// Exit 0 on success; on any error, a message on stderr and exit 2.
#include <sqlock/prometheus.hpp>
#include <sqlock/sqlock.hpp>

#include <prometheus/exposer.h>

#include <chrono>
#include <exception>
#include <iostream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 4 || argc > 6) {
        std::cerr << "usage: " << argv[0] << " URL PREFIX TTL_MS [KEEP [wait]]\n";
        return 2;
    }
    try {
        std::string const url = argv[1], prefix = argv[2];
        prometheus::Exposer exposer("127.0.0.1:0", 1);
        auto metrics = sqlock::prometheus::make_collectable();
        exposer.RegisterCollectable(metrics);
        std::cout << "port " << exposer.GetListeningPorts().at(0) << std::endl;

        sqlock::store db(url, {.create_schema = true});
        auto locks = sqlock::table_locker(db, {.ttl = std::chrono::milliseconds(std::stoll(argv[3]))});
        auto a = locks.try_acquire(prefix + "a");
        auto b = locks.try_acquire(prefix + "b");
        auto c = locks.try_acquire(prefix + "c");
        if (!a || !b || !c) throw std::runtime_error("a grant was refused: another holder?");
        if (locks.try_acquire(prefix + "a")) throw std::runtime_error("a second grant of a held name");
        a->release();
        b->release();
        std::vector<sqlock::lease> more;
        for (int i = 1; i < (argc >= 5 ? std::stoi(argv[4]) : 1); ++i) {
            auto l = locks.try_acquire(prefix + "c" + std::to_string(i));
            if (!l) throw std::runtime_error("a grant was refused: another holder?");
            more.push_back(std::move(*l));
        }
        auto waiters = sqlock::table_locker(db, {.ttl = std::chrono::seconds(30)});
        std::jthread waiter;
        if (argc == 6 && std::string(argv[5]) == "wait")
            waiter = std::jthread([&](std::stop_token stop) {
                try {
                    (void)waiters.acquire(prefix + "w", std::chrono::minutes(10), stop);
                } catch (sqlock::error const&) {  // cancelled at exit
                }
            });
        std::cout << "ready " << c->token() << std::endl;
        std::string line;
        while (std::getline(std::cin, line)) {}
        waiter = {};  // cancelled and joined
        std::cout << "state " << sqlock::to_string(c->state()) << std::endl;
        return 0;
    } catch (std::exception const& e) {
        std::cerr << "sqlock_metrics_probe: " << e.what() << "\n";
        return 2;
    }
}
