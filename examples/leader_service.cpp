// sqlock-leader-service: a service of which one replica at a time leads.
//
// Each replica campaigns for "service:leader" with its address as the value
// (sqlock::election). The leader does the leader-only work: it writes the
// service's state row once every --beat, each write fenced with its term
// (sqlock::fence), so a replica that lost its leadership while paused cannot
// write after its successor. Every replica follows who leads from a thread of
// its own (election::observe). On SIGTERM or SIGINT a replica stops campaigning,
// and a leader finishes its current write and then resigns, so the next
// replica takes over at once instead of after the lease's TTL.
//
//   sqlock-leader-service [--db URL] [--address HOST:PORT]   one replica, until SIGTERM
//   sqlock-leader-service --demo [--db URL]                  three replicas; the leader is sent
//                                                            SIGTERM twice; checks the terms
//
// The state row and the fence table live in the lock database here; in a real
// service they are in the service's own database (the fence table must be in
// the database of what it protects).
#include <sqlock/coordination.hpp>
#include <sqlock/sqlock.hpp>

#include <soci/mysql/soci-mysql.h>
#include <soci/postgresql/soci-postgresql.h>
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>
#include <CLI/CLI.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

std::string const election_name = "service:leader";

void say(std::string const& line) {
    static std::mutex m;
    std::lock_guard lock(m);
    std::cout << line << std::endl;
}

// The service's own connection, opened from the same URL as the store (as in
// account_balance.cpp: a sketch, no percent-decoding, no URL parameters).
void open_session(soci::session& s, std::string const& url) {
    if (url.starts_with("sqlite:")) {
        auto path = url.substr(7, url.find('?') - 7);
        if (path.starts_with("//")) path.erase(0, 2);
        s.open(*soci::factory_sqlite3(), "db=" + path + " timeout=5");
        return;
    }
    static std::regex const re(R"((\w+)://(?:([^:@/]*)(?::([^@/]*))?@)?([^:/?]+)(?::(\d+))?/([^?]+).*)");
    std::smatch m;
    if (!std::regex_match(url, m, re)) throw std::invalid_argument("cannot parse the URL " + url);
    std::string c = "host=" + m[4].str() + " dbname=" + m[6].str();
    if (m[5].matched) c += " port=" + m[5].str();
    if (m[2].matched) c += " user=" + m[2].str();
    if (m[3].matched) c += " password=" + m[3].str();
    if (m[1] == "postgresql" || m[1] == "postgres") {
        s.open(*soci::factory_postgresql(), c);
        s << "SET client_min_messages = warning";
    } else {
        s.open(*soci::factory_mysql(), c);
    }
}

void create_state(std::string const& url) {
    soci::session s;
    open_session(s, url);
    s << "CREATE TABLE IF NOT EXISTS service_state (id INTEGER PRIMARY KEY, term BIGINT NOT NULL, "
         "leader VARCHAR(200) NOT NULL, beats BIGINT NOT NULL)";
    s << "DELETE FROM service_state";
    s << "INSERT INTO service_state (id, term, leader, beats) VALUES (1, 0, '', 0)";
}

std::string describe(std::optional<sqlock::leader_info> const& l) {
    if (!l) return "no leader";
    return l->value + " (term " + std::to_string(l->term) + ")";
}

// A leader-only write: the fence first, in the write's own transaction. A
// higher term already recorded throws sqlock::stale_token and ~transaction
// rolls the write back.
void beat(soci::session& s, sqlock::fence const& fence, sqlock::leadership const& lead) {
    soci::transaction tx(s);
    fence.check_and_set(s, election_name, lead.term());
    s << "UPDATE service_state SET term = :t, leader = :l, beats = beats + 1 WHERE id = 1", soci::use(lead.term()),
        soci::use(lead.value());
    tx.commit();
}

// One replica: campaign, lead while leader, follow meanwhile; returns when `stop` is requested.
int replica(std::string const& url, std::string const& address, std::chrono::milliseconds ttl,
            std::chrono::milliseconds beat_every, std::stop_token stop) {
    sqlock::store db{url};
    sqlock::fence fence{db};
    sqlock::election election{sqlock::table_locker(db, {.ttl = ttl}), {.observe_interval = 100ms}};
    std::string const me = "[" + address + "] ";

    // The follower's view: every change of leader, from the database, until we stop.
    std::jthread follower([&](std::stop_token following) {
        try {
            election.observe(
                election_name, [&](std::optional<sqlock::leader_info> const& l) { say(me + "sees " + describe(l)); },
                following);
        } catch (std::exception const& e) {
            say(me + "stopped following: " + e.what());
        }
    });
    std::stop_callback stop_following(stop, [&] { follower.request_stop(); });

    soci::session s;
    open_session(s, url);
    int stale = 0;
    while (!stop.stop_requested()) {
        try {
            // lead() resigns only after the work below has returned, whatever happens to `stop`.
            election.lead(
                election_name, address, 1h,
                [&](sqlock::leadership& lead, std::stop_token leading) {
                    say(me + "leads, term " + std::to_string(lead.term()));
                    while (!leading.stop_requested()) {
                        try {
                            beat(s, fence, lead);
                        } catch (sqlock::stale_token const& e) {
                            ++stale;  // a newer leader wrote first: we are no longer leader
                            say(me + "write refused: " + e.what());
                            return;
                        }
                        std::condition_variable_any cv;
                        std::mutex m;
                        std::unique_lock lock(m);
                        cv.wait_for(lock, leading, beat_every, [] { return false; });
                    }
                    say(me + (lead.held() ? "steps down, term " : "lost its leadership, term ") +
                        std::to_string(lead.term()));
                },
                stop);
        } catch (sqlock::cancelled const&) {
            break;  // stopped while campaigning
        } catch (sqlock::timeout const&) {
            continue;  // nobody stepped down within the hour: campaign again
        } catch (sqlock::lease_lost const& e) {
            say(me + "lost its leadership, campaigning again: " + e.what());
        } catch (sqlock::backend_unavailable const& e) {
            say(me + "database unavailable, campaigning again: " + e.what());
            std::this_thread::sleep_for(1s);
        }
    }
    say(me + "stopped" + (stale ? " (" + std::to_string(stale) + " fenced-out write)" : ""));
    return 0;
}

// SIGTERM and SIGINT, blocked in every thread, turn into a stop request.
std::jthread stop_on_signals(std::stop_source stopping) {  // a copy shares the stop state
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    return std::jthread([set, stopping](std::stop_token st) mutable {
        // sigtimedwait, so that the thread also notices a stop from elsewhere.
        while (!st.stop_requested()) {
            timespec tick{0, 100'000'000};
            if (sigtimedwait(&set, nullptr, &tick) > 0) {
                stopping.request_stop();
                return;
            }
        }
    });
}

int run_one(std::string const& url, std::string const& address, std::chrono::milliseconds ttl,
            std::chrono::milliseconds beat_every) {
    // On the heap: GCC 12 warns (-Wmaybe-uninitialized) about a std::stop_source built on this stack.
    auto const stopping = std::make_unique<std::stop_source>();
    auto signals = stop_on_signals(*stopping);
    int rc = replica(url, address, ttl, beat_every, stopping->get_token());
    signals.request_stop();
    return rc;
}

// Three replicas as processes; SIGTERM to the leader, twice; the terms must increase.
int demo(std::string const& url, std::chrono::milliseconds ttl, std::chrono::milliseconds beat_every) {
    {
        sqlock::store db{url, {.create_schema = true}};  // the tables, once, before forking
        create_state(url);
    }
    std::map<std::string, pid_t> pids;
    for (int i = 0; i < 3; ++i) {
        std::string address = "127.0.0.1:" + std::to_string(8081 + i);
        pid_t pid = ::fork();
        if (pid == 0) {
            int rc = 1;
            try {
                rc = run_one(url, address, ttl, beat_every);
            } catch (std::exception const& e) {
                say("[" + address + "] " + e.what());
            }
            std::cout.flush();
            ::_exit(rc);
        }
        pids[address] = pid;
    }

    sqlock::store db{url};
    sqlock::election election{sqlock::table_locker(db), {.observe_interval = 50ms}};
    std::vector<std::int64_t> terms;
    std::vector<pid_t> stopped;
    std::int64_t last_term = 0;
    bool increasing = true;
    auto const give_up = std::chrono::steady_clock::now() + 60s;
    while (terms.size() < 3 && std::chrono::steady_clock::now() < give_up) {
        auto l = election.leader(election_name);
        if (!l || l->term == last_term) {
            std::this_thread::sleep_for(50ms);
            continue;
        }
        increasing = increasing && l->term > last_term;
        last_term = l->term;
        terms.push_back(l->term);
        say("demo: leader " + describe(l));
        std::this_thread::sleep_for(3 * beat_every);  // let it write a few times
        if (terms.size() < 3) {
            say("demo: SIGTERM to the leader " + l->value);
            ::kill(pids.at(l->value), SIGTERM);
            stopped.push_back(pids.at(l->value));
        }
    }
    for (auto const& [address, pid] : pids) ::kill(pid, SIGTERM);
    int failed = 0;
    for (auto const& [address, pid] : pids) {
        int status = 0;
        ::waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
    }
    std::int64_t written_term = 0;
    long long beats = 0;
    {
        soci::session s;
        open_session(s, url);
        s << "SELECT term, beats FROM service_state WHERE id = 1", soci::into(written_term), soci::into(beats);
    }
    say("demo: terms " +
        [&] {
            std::string t;
            for (auto x : terms) t += (t.empty() ? "" : ", ") + std::to_string(x);
            return t;
        }() +
        "; last fenced write by term " + std::to_string(written_term) + ", " + std::to_string(beats) + " writes");
    bool ok = terms.size() == 3 && increasing && written_term == last_term && beats > 0 && failed == 0;
    std::cout << (ok ? "OK: three leaders in turn, terms strictly increasing, the last one's writes last" : "FAILED")
              << std::endl;
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"sqlock-leader-service: one replica of a service leads; the others follow and take over"};
    std::string url = "sqlite:leader.db";
    std::string address = "127.0.0.1:" + std::to_string(8000 + ::getpid() % 1000);
    std::string ttl_text = "5s", beat_text = "500ms";
    bool run_demo = false;
    app.add_option("--db", url, "database URL")->capture_default_str();
    app.add_option("--address", address, "this replica's address: the value it campaigns with");
    app.add_option("--ttl", ttl_text, "leadership lease TTL, in ms or s (e.g. 5s)")->capture_default_str();
    app.add_option("--beat", beat_text, "how often the leader writes (e.g. 500ms)")->capture_default_str();
    app.add_flag("--demo", run_demo, "three replicas; SIGTERM the leader twice; check the terms");
    CLI11_PARSE(app, argc, argv);

    auto parse = [](std::string const& t) {
        std::size_t end = 0;
        long long n = std::stoll(t, &end);
        std::string unit = t.substr(end);
        if (unit == "ms") return std::chrono::milliseconds(n);
        if (unit == "s" || unit.empty()) return std::chrono::milliseconds(n * 1000);
        throw std::invalid_argument("a duration is <n>ms or <n>s: " + t);
    };
    try {
        auto ttl = parse(ttl_text);
        auto beat_every = parse(beat_text);
        if (run_demo) return demo(url, ttl, beat_every);
        { sqlock::store db{url, {.create_schema = url.starts_with("sqlite:")}}; }
        soci::session s;
        open_session(s, url);
        s << "CREATE TABLE IF NOT EXISTS service_state (id INTEGER PRIMARY KEY, term BIGINT NOT NULL, "
             "leader VARCHAR(200) NOT NULL, beats BIGINT NOT NULL)";
        int rows = 0;
        s << "SELECT COUNT(*) FROM service_state", soci::into(rows);
        if (rows == 0) s << "INSERT INTO service_state (id, term, leader, beats) VALUES (1, 0, '', 0)";
        s.close();
        return run_one(url, address, ttl, beat_every);
    } catch (std::exception const& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    }
}
