// sqlock-metrics-bench: what the metrics add to one lock cycle, in nanoseconds,
// without a database: the recording a granted try_acquire + release makes
// (src/locker.cpp counted_attempt and adopt, src/lease.cpp count_in and
// count_end): the series' lookup, four clock reads, the attempt and hold
// histograms and the counters. One JSON line per configuration
// (bench/results-format.md: suite "metrics"); bench/report.py divides it by
// the cycle times measured in the same run.
//   sqlock-metrics-bench [--iterations N]
// Configurations: 1 and 4 threads recording into one series (4 clients of one
// locker share it: the counters' cache line moves between cores), with an empty
// allow-list and with 1000 allow-listed names (one hash lookup per cycle).
#include "detail/metrics.hpp"  // src/: the library's own recording

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using namespace sqlock::detail;

/// One granted cycle's recording, as the library does it.
void record_cycle(metrics_impl& m, std::string const& name) {
    auto* s = m.find(engine_label::sqlite, kind_label::table, name);  // counted_attempt
    auto const start = clock_type::now();
    s->attempt.observe(clock_type::now() - start);
    s->count(attempt_outcome::granted);   // adopt
    auto const held = clock_type::now();  // count_in
    s->leases.fetch_add(1, std::memory_order_relaxed);
    s->leases.fetch_sub(1, std::memory_order_relaxed);  // count_end
    s->hold.observe(clock_type::now() - held);
}

/// Nanoseconds per cycle per thread, the best of five runs of `iterations` cycles on each of `threads`.
double measure(metrics_impl& m, int threads, long iterations, std::string const& name) {
    double best = 1e18;
    for (int run = 0; run < 5; ++run) {
        std::atomic<int> ready{0};
        std::atomic<bool> go{false};
        std::vector<double> ns(static_cast<std::size_t>(threads));
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t)
            pool.emplace_back([&, t] {
                ready.fetch_add(1);
                while (!go.load()) {}
                auto const t0 = clock_type::now();
                for (long i = 0; i < iterations; ++i) record_cycle(m, name);
                ns[static_cast<std::size_t>(t)] =
                    static_cast<double>(
                        std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count()) /
                    static_cast<double>(iterations);
            });
        while (ready.load() < threads) {}
        go.store(true);
        for (auto& th : pool) th.join();
        best = std::min(best, *std::max_element(ns.begin(), ns.end()));
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    long iterations = 2'000'000;
    for (int i = 1; i + 1 < argc; i += 2)
        if (std::string(argv[i]) == "--iterations") iterations = std::atol(argv[i + 1]);
    if (iterations <= 0) {
        std::fprintf(stderr, "usage: sqlock-metrics-bench [--iterations N]  (N > 0)\n");
        return 64;
    }
    std::vector<std::string> many;
    for (int i = 0; i < 1000; ++i) many.push_back("job:" + std::to_string(i));
    for (bool listed : {false, true}) {
        for (int threads : {1, 4}) {
            metrics_impl m(sqlock::metrics_options{.lock_names = listed ? many : std::vector<std::string>{}});
            double const ns = measure(m, threads, iterations, "job:500");
            std::printf(
                "{\"suite\":\"metrics\",\"impl\":\"sqlock-metrics\",\"variant\":\"%s\",\"clients\":%d,"
                "\"ns_per_cycle\":%.1f,\"iterations\":%ld}\n",
                listed ? "allow-list-1000" : "no-allow-list", threads, ns, iterations);
            std::fflush(stdout);
        }
    }
    return 0;
}
