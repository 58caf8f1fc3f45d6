// sqlock-majority-bench: what a majority lock over three databases costs next
// to a table lock on one, and what a member that is down or stopped adds.
//
// One cycle = try_acquire + release of a free name, timed on the steady clock.
// Each configuration runs CYCLES cycles (default 200) on a name of its own and
// prints one JSON line on stdout (bench/results-format.md, suite "majority";
// p50/p99 of the successful cycles, cycles_per_s = cycles / wall time of the
// configuration); a human line (median, p90, p99, max, mean in ms, busy,
// errors) goes to stderr. Configurations (impl / variant):
//
//   sqlock-table    / ""                  table_locker on member 1 (no proxy): the one-member baseline
//   sqlock-table    / "through-proxy"     table_locker on member 1, through its fault proxy
//   sqlock-majority / ""                  majority_locker over the three members, each through its proxy
//   sqlock-majority / "one-member-down"   the same with member 3's proxy refusing connections (a
//                                         crashed server: connection refused)
//   sqlock-majority / "one-member-stopped"  the same with member 3's proxy silent: connections stay
//                                         open, nothing is relayed (a SIGSTOPped server, a silent network)
//
// `members` is 1 for the table lock, 3 for the majority. `engine`: the members'
// engine, or their engines joined by "+" when they differ (the default
// members: "postgresql+postgresql+mysql"); the table lock's line has member 1's.
//
// Members: $SQLOCK_BENCH_MAJORITY_URLS (three URLs, space- or comma-separated),
// otherwise SQLOCK_TEST_PG_URL, SQLOCK_TEST_PG2_URL and SQLOCK_TEST_MYSQL_URL
// (scripts/test-servers.sh). The member lockers' ttl is 10 s and member_timeout
// MS (default 200 ms). Default tables (created if missing); lock names start
// with "bench-majority:<pid>:". Not a test: nothing is asserted.
//
// Usage: sqlock-majority-bench [--cycles N] [--member-timeout MS] > majority.jsonl
#include "fault_proxy.hpp"  // tests/: the TCP proxy that refuses or stalls a member

#include <sqlock/majority.hpp>
#include <sqlock/sqlock.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <list>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string const name_prefix = "bench-majority:" + std::to_string(::getpid()) + ":";

std::vector<std::string> member_urls() {
    std::vector<std::string> urls;
    if (char const* v = std::getenv("SQLOCK_BENCH_MAJORITY_URLS"); v != nullptr && *v != '\0') {
        std::string s(v);
        std::replace(s.begin(), s.end(), ',', ' ');
        std::istringstream in(s);
        for (std::string u; in >> u;) urls.push_back(u);
    } else {
        for (char const* var : {"SQLOCK_TEST_PG_URL", "SQLOCK_TEST_PG2_URL", "SQLOCK_TEST_MYSQL_URL"}) {
            char const* u = std::getenv(var);
            if (u == nullptr || *u == '\0')
                throw std::runtime_error(std::string(var) +
                                         " is not set (and SQLOCK_BENCH_MAJORITY_URLS neither): "
                                         "source the env.sh of scripts/test-servers.sh start");
            urls.emplace_back(u);
        }
    }
    if (urls.size() != 3) throw std::runtime_error("need exactly three member URLs");
    return urls;
}

/// Scheme and path of a URL without its credentials, for the report.
std::string shown(std::string const& url) {
    auto const [host_start, end] = sqlock_test::host_port_span(url);
    return url.substr(0, url.find("://") + 3) + url.substr(host_start);
}

double ms(steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

/// What a configuration is, for its JSON line.
struct config {
    std::string_view impl;
    std::string_view variant;
    std::string engine;
    int members;
};

/// CYCLES timed try_acquire + release cycles of one name: a human line on stderr and, unless
/// `json` is empty (warm-up), one JSON line on stdout.
void run(std::string const& label, sqlock::locker& locks, int cycles, std::optional<config> const& json) {
    std::string const name = name_prefix + label;
    std::vector<double> t;   // every cycle, ms (the human line)
    std::vector<double> ok;  // successful cycles, ms (the JSON line)
    t.reserve(static_cast<std::size_t>(cycles));
    int busy = 0, errors = 0;
    std::string last_error;
    auto const begin = steady::now();
    for (int i = 0; i < cycles; ++i) {
        auto const start = steady::now();
        bool got = false;
        try {
            if (auto l = locks.try_acquire(name)) {
                l->release();
                got = true;
            } else {
                ++busy;
            }
        } catch (std::exception const& e) {
            ++errors;
            last_error = e.what();
        }
        t.push_back(ms(steady::now() - start));
        if (got) ok.push_back(t.back());
    }
    double const seconds = std::chrono::duration<double>(steady::now() - begin).count();
    std::sort(t.begin(), t.end());
    std::sort(ok.begin(), ok.end());
    auto const at = [](std::vector<double> const& v, double q) {
        if (v.empty()) return 0.0;
        auto const rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
        return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
    };
    double const mean = std::accumulate(t.begin(), t.end(), 0.0) / static_cast<double>(t.size());
    std::fprintf(stderr,
                 "%-24s cycles %4d  median %8.2f ms  p90 %8.2f ms  p99 %8.2f ms  max %8.2f ms  mean %8.2f ms  busy %d"
                 "  errors %d\n",
                 label.c_str(), cycles, at(t, 0.5), at(t, 0.9), at(t, 0.99), t.back(), mean, busy, errors);
    if (errors > 0) std::fprintf(stderr, "%-24s last error: %s\n", "", last_error.c_str());
    if (json) {
        std::printf(
            "{\"suite\":\"majority\",\"engine\":\"%s\",\"impl\":\"%.*s\",\"variant\":\"%.*s\","
            "\"seconds\":%.3f,\"members\":%d,\"cycles\":%zu,\"cycles_per_s\":%.1f,\"p50_us\":%.1f,"
            "\"p99_us\":%.1f,\"errors\":%d}\n",
            json->engine.c_str(), static_cast<int>(json->impl.size()), json->impl.data(),
            static_cast<int>(json->variant.size()), json->variant.data(), seconds, json->members, ok.size(),
            static_cast<double>(ok.size()) / seconds, at(ok, 0.5) * 1000.0, at(ok, 0.99) * 1000.0, errors);
        std::fflush(stdout);
    }
}

}  // namespace

int main(int argc, char** argv) {
    int cycles = 200;
    milliseconds member_timeout = 200ms;
    for (int i = 1; i < argc; ++i) {
        std::string const a = argv[i];
        if (a == "--cycles" && i + 1 < argc) {
            cycles = std::max(1, std::atoi(argv[++i]));
        } else if (a == "--member-timeout" && i + 1 < argc) {
            member_timeout = milliseconds(std::atoi(argv[++i]));
        } else {
            std::cerr << "usage: " << argv[0] << " [--cycles N] [--member-timeout MS]\n";
            return 2;
        }
    }
    try {
        auto const urls = member_urls();
        std::vector<std::unique_ptr<sqlock_test::fault_proxy>> proxies;
        std::list<sqlock::store> stores;  // through the proxies; stable addresses
        // io_timeout 1 s: a stalled member's statements give up soon after the
        // majority stopped waiting for them (it never waits past member_timeout).
        sqlock::store_options const options{
            .pool_size = 8, .create_schema = true, .connect_timeout = 2s, .pool_wait = 2s, .io_timeout = 1s};
        for (auto const& url : urls) {
            proxies.push_back(sqlock_test::fault_proxy::for_url(url));
            stores.emplace_back(proxies.back()->proxied_url(url), options);
        }
        sqlock::store direct(urls[0], options);
        sqlock::locker_options const member_options{.ttl = 10s, .auto_renew = false};

        std::fprintf(stderr, "members: %s, %s, %s; ttl 10 s, member_timeout %lld ms, %d cycles each\n",
                     shown(urls[0]).c_str(), shown(urls[1]).c_str(), shown(urls[2]).c_str(),
                     static_cast<long long>(member_timeout.count()), cycles);

        auto single_direct = sqlock::table_locker(direct, member_options);
        auto single_proxy = sqlock::table_locker(stores.front(), member_options);
        std::vector<sqlock::locker> members;
        std::string engines;
        bool mixed = false;
        for (auto& s : stores) {
            members.push_back(sqlock::table_locker(s, member_options));
            mixed = mixed || s.engine() != stores.front().engine();
            if (!engines.empty()) engines += '+';  // appended, not "lit" + string&&: GCC 12 bug 105329
            engines += sqlock::to_string(s.engine());
        }
        if (!mixed) engines = sqlock::to_string(stores.front().engine());
        std::string const first(sqlock::to_string(direct.engine()));
        auto majority = sqlock::majority_locker(members, {.member_timeout = member_timeout, .auto_renew = false});

        // Warm every pool (and the schema checks) before timing.
        run("warm-up", majority, std::min(cycles, 20), std::nullopt);
        run("single/direct", single_direct, cycles, config{"sqlock-table", "", first, 1});
        run("single/proxy", single_proxy, cycles, config{"sqlock-table", "through-proxy", first, 1});
        run("majority3/healthy", majority, cycles, config{"sqlock-majority", "", engines, 3});
        proxies[2]->block();
        run("majority3/one-down", majority, cycles, config{"sqlock-majority", "one-member-down", engines, 3});
        proxies[2]->unblock();
        run("majority3/healthy-again", majority, std::min(cycles, 20), std::nullopt);
        proxies[2]->stall();
        run("majority3/one-stalled", majority, cycles, config{"sqlock-majority", "one-member-stopped", engines, 3});
        proxies[2]->resume();
        // Let the stalled member's late answers and time-outs drain before the
        // stores and proxies go away.
        std::this_thread::sleep_for(3s);
    } catch (std::exception const& e) {
        std::cerr << "sqlock-majority-bench: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
