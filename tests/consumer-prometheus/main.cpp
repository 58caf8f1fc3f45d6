// A user of sqlock's prometheus component: takes and releases a lock on an
// SQLite file, then serializes the process's metrics with prometheus-cpp and
// prints "metrics ok" when the grant is there.
#include <sqlock/prometheus.hpp>
#include <sqlock/sqlock.hpp>

#include <prometheus/text_serializer.h>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: " << argv[0] << " DB_FILE\n";
        return 2;
    }
    sqlock::store db(std::string("sqlite:") + argv[1], {.create_schema = true});
    auto locks = sqlock::table_locker(db);
    if (auto held = locks.try_acquire("consumer"); !held) {
        std::cerr << "the lock 'consumer' is held\n";
        return 1;
    }
    auto const text = prometheus::TextSerializer().Serialize(sqlock::prometheus::make_collectable()->Collect());
    if (text.find("sqlock_acquire_attempts_total{engine=\"sqlite\",kind=\"table\",outcome=\"granted\"} 1") ==
        std::string::npos) {
        std::cerr << "no grant in the metrics:\n" << text;
        return 1;
    }
    std::cout << "metrics ok\n";
    return 0;
}
