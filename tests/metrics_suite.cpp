// sqlock tests — the metrics (include/sqlock/metrics.hpp, docs/operations.md):
//   Metrics.*                  the text format and the allow-list's checks, without a database
//   Engines/Metrics.*          what a store's lockers, fences and reapers record, after known operations
//   Engines/MetricsScrape.*    a process's metrics scraped over HTTP (sqlock::prometheus), across a
//                              SIGSTOP past its TTL: three grants, one busy attempt, one loss by expiry
//   Engines/MetricsAlerts.*    contrib/prometheus's rules on a real Prometheus scraping a probe and a reaper
#include "metrics_text.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;
using sqlock::metric_family;
using sqlock::metric_type;

std::string text_of(sqlock::metrics const& m) {
    std::ostringstream out;
    m.write_text(out);
    return out.str();
}

/// promtool's verdict on an exposition (empty when it accepts it); promtool is
/// required under CI (scripts/deps.sh --servers installs it).
std::optional<std::string> promtool_rejects(std::string const& text, temp_dir const& dir) {
    if (std::system("command -v promtool > /dev/null 2>&1") != 0) {
        if (in_ci()) return "promtool is missing: install it (bash scripts/deps.sh --servers)";
        return std::nullopt;
    }
    auto const file = dir.path() / "scrape.prom";
    std::ofstream(file) << text;
    auto const out = dir.path() / "promtool.out";
    // `check metrics` also lints names and help; an exit of 0 is what matters.
    if (std::system(("promtool check metrics < " + file.string() + " > " + out.string() + " 2>&1").c_str()) != 0)
        return slurp(out);
    return std::nullopt;
}

TEST(Metrics, TextFormatEscapesLabelsAndWritesCumulativeBuckets) {
    std::vector<metric_family> families{
        {"t_total", "help with \\ and\nnewline", metric_type::counter, {}, {{{{"l", "a\"b\\c\nd"}}, 3, {}, 0, 0}}},
        {"t_seconds", "a histogram", metric_type::histogram, {0.1, 1}, {{{{"k", "v"}}, 0, {1, 3}, 2.5, 4}}}};
    std::ostringstream out;
    sqlock::write_text(out, families);
    EXPECT_EQ(out.str(),
              "# HELP t_total help with \\\\ and\\nnewline\n"
              "# TYPE t_total counter\n"
              "t_total{l=\"a\\\"b\\\\c\\nd\"} 3\n"
              "# HELP t_seconds a histogram\n"
              "# TYPE t_seconds histogram\n"
              "t_seconds_bucket{k=\"v\",le=\"0.1\"} 1\n"
              "t_seconds_bucket{k=\"v\",le=\"1\"} 3\n"
              "t_seconds_bucket{k=\"v\",le=\"+Inf\"} 4\n"
              "t_seconds_sum{k=\"v\"} 2.5\n"
              "t_seconds_count{k=\"v\"} 4\n");
    auto const back = parse_exposition(out.str());
    EXPECT_EQ(value_of(back, "t_total", {{"l", "a\"b\\c\nd"}}), 3);
}

TEST(Metrics, AllowListIsChecked) {
    EXPECT_THROW(sqlock::metrics({.lock_names = {""}}), sqlock::usage_error);
    EXPECT_THROW(sqlock::metrics({.lock_names = {std::string("a\0b", 3)}}), sqlock::usage_error);
    EXPECT_THROW(sqlock::metrics({.lock_names = std::vector<std::string>(1001, "x")}), sqlock::usage_error);
    try {
        sqlock::metrics({.lock_names = std::vector<std::string>(1001, "x")});
    } catch (sqlock::usage_error const& e) {
        EXPECT_NE(std::string(e.what()).find("at most 1000"), std::string::npos) << e.what();
    }
    sqlock::metrics empty;
    EXPECT_EQ(text_of(empty), "");  // nothing recorded: no family
}

class Metrics : public engine_fixture {
protected:
    void open_store() override {
        metrics_ = std::make_shared<sqlock::metrics>(sqlock::metrics_options{.lock_names = {n("named"), n("leader")}});
        db_.emplace(url_, sqlock::store_options{.create_schema = true, .metrics = metrics_});
    }
    std::vector<text_sample> now() { return parse_exposition(text_of(*metrics_)); }
    /// A series' value, 0 when it is absent.
    double v(std::string const& name, std::map<std::string, std::string> labels) {
        return value_of(now(), name, labels).value_or(0);
    }
    std::map<std::string, std::string> table(std::map<std::string, std::string> more = {}) {
        more.emplace("engine", engine_name(e_));
        more.emplace("kind", "table");
        return more;
    }
    std::shared_ptr<sqlock::metrics> metrics_;
};

TEST_P(Metrics, CountsWhatTheLockersFencesAndReapersOfAStoreDid) {
    auto locks = sqlock::table_locker(*db_, {.ttl = 30s});
    auto a = locks.try_acquire(n("a"));
    auto b = locks.try_acquire(n("b"));
    auto named = locks.try_acquire(n("named"));
    ASSERT_TRUE(a && b && named);
    EXPECT_FALSE(locks.try_acquire(n("a")));  // busy
    EXPECT_THROW((void)locks.acquire(n("a"), 60ms), sqlock::timeout);

    auto const s = now();
    // The unlisted names are summed in a series without a lock label; the allow-listed one has its own.
    auto const series = [&](std::string const& outcome, std::optional<std::string> lock = std::nullopt) {
        double sum = 0;
        for (auto const& x : s)
            if (x.name == "sqlock_acquire_attempts_total" && x.labels.at("outcome") == outcome &&
                x.labels.at("kind") == "table" &&
                (lock ? x.labels.count("lock") && x.labels.at("lock") == *lock : x.labels.count("lock") == 0))
                sum += x.value;
        return sum;
    };
    EXPECT_EQ(series("granted"), 2);
    EXPECT_EQ(series("granted", n("named")), 1);
    EXPECT_GE(series("busy"), 2);  // the try, and at least one attempt of the waiting acquire
    EXPECT_EQ(series("timeout"), 1);
    double held = 0, waits = 0;
    for (auto const& x : s) {
        if (x.name == "sqlock_leases" && x.labels.at("state") == "held" && !x.labels.count("lock")) held += x.value;
        if (x.name == "sqlock_acquire_wait_seconds_count") waits += x.value;
    }
    EXPECT_EQ(held, 2);
    EXPECT_EQ(value_of(s, "sqlock_leases", table({{"state", "held"}, {"lock", n("named")}})), 1);
    EXPECT_EQ(waits, 1);  // the waiting acquire that timed out
    auto const offset = value_of(s, "sqlock_clock_offset_seconds", {{"database", db_->url()}});
    ASSERT_TRUE(offset.has_value()) << "a store that answered acquires shows its clock offset";
    EXPECT_LT(std::abs(*offset), 1.0) << "the database and this host share a clock";
    double waiting = 0;
    for (auto const& x : s)
        if (x.name == "sqlock_waiters") waiting += x.value;
    EXPECT_EQ(waiting, 0) << "the waiting acquire that timed out is no longer counted";

    // Renewal, release, and a loss the database refuses (the row deleted behind the lease's back).
    a->renew();
    a->release();
    b->release();
    delete_row(*raw_, named->name());
    EXPECT_THROW(named->renew(), sqlock::lease_lost);
    auto const after = now();
    double renewed = 0, holds = 0, in_use = 0;
    for (auto const& x : after) {
        if (x.name == "sqlock_renewals_total" && x.labels.at("outcome") == "ok") renewed += x.value;
        if (x.name == "sqlock_hold_duration_seconds_count") holds += x.value;
        if (x.name == "sqlock_leases") in_use += x.value;
    }
    EXPECT_GE(renewed, 1);
    EXPECT_EQ(holds, 3);  // a and b released, named lost
    EXPECT_EQ(in_use, 0);
    EXPECT_EQ(value_of(after, "sqlock_losses_total", table({{"cause", "refused"}, {"lock", n("named")}})), 1);
    EXPECT_EQ(value_of(after, "sqlock_losses_total", table({{"cause", "expired"}, {"lock", n("named")}})), 0);

    // Fencing on the resource side, in this store's metrics.
    sqlock::fence f(*db_);
    {
        soci::transaction tx(*raw_);
        f.check_and_set(*raw_, n("resource"), 5);
        tx.commit();
    }
    {
        soci::transaction tx(*raw_);
        EXPECT_THROW(f.check_and_set(*raw_, n("resource"), 4), sqlock::stale_token);
        tx.rollback();
    }
    EXPECT_EQ(v("sqlock_fence_checks_total", {{"engine", engine_name(e_)}, {"result", "accepted"}}), 1);
    EXPECT_EQ(v("sqlock_fence_checks_total", {{"engine", engine_name(e_)}, {"result", "rejected"}}), 1);

    // A reaper pass.
    sqlock::reaper r(*db_);
    (void)r.reap_once();
    EXPECT_EQ(v("sqlock_reaper_passes_total", {{"engine", engine_name(e_)}, {"outcome", "ok"}}), 1);
    EXPECT_GT(v("sqlock_reaper_last_success_timestamp_seconds", {{"engine", engine_name(e_)}}), 1.7e9);

    // The coordination kinds are labelled as such.
    sqlock::semaphore sem(locks, 2);
    auto permit = sem.try_acquire(n("sem"));
    ASSERT_TRUE(permit);
    sqlock::rw_locker rw(locks);
    auto reader = rw.try_acquire_shared(n("rw"));
    ASSERT_TRUE(reader);
    reader->release();
    auto writer = rw.try_acquire(n("rw"));
    ASSERT_TRUE(writer);
    sqlock::election election(locks);
    auto leading = election.try_campaign(n("leader"), "me");
    ASSERT_TRUE(leading);
    auto const coord = now();
    auto const kind = [&](char const* k, char const* outcome) {
        double sum = 0;
        for (auto const& x : coord)
            if (x.name == "sqlock_acquire_attempts_total" && x.labels.at("kind") == k &&
                x.labels.at("outcome") == outcome)
                sum += x.value;
        return sum;
    };
    EXPECT_EQ(kind("semaphore", "granted"), 1);
    EXPECT_EQ(kind("rw_shared", "granted"), 1);
    EXPECT_EQ(kind("election", "granted"), 1);
    EXPECT_EQ(kind("rw_exclusive", "granted"), 1);
    EXPECT_EQ(value_of(coord, "sqlock_leader", {{"election", n("leader")}}), 1);
    leading->resign();
    EXPECT_EQ(v("sqlock_leader", {{"election", n("leader")}}), 0);

    temp_dir dir;
    auto const rejected = promtool_rejects(text_of(*metrics_), dir);
    EXPECT_FALSE(rejected) << *rejected;
}

INSTANTIATE_TEST_SUITE_P(Engines, Metrics, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

#ifdef SQLOCK_METRICS_PROBE
/// sqlock_metrics_probe, its stdin a pipe this test closes to let it finish.
class probe {
public:
    /// `keep` leases held; `wait`: a waiter on PREFIX w; `env`: its environment (this process's if empty).
    probe(std::string const& url, std::string const& prefix, std::chrono::milliseconds ttl, fs::path const& dir,
          int keep = 1, bool wait = false, std::optional<std::vector<std::string>> env = std::nullopt)
        : out_(dir / "probe.out"), err_(dir / "probe.err") {
        int fds[2];
        // Close-on-exec: no other child (a server, a reaper) may keep its write end open.
        if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
        spawn_file_actions fa;
        fa.capture_to_files(out_, err_);
        posix_spawn_file_actions_adddup2(fa.get(), fds[0], 0);
        posix_spawn_file_actions_addclose(fa.get(), fds[1]);
        std::vector<std::string> args{SQLOCK_METRICS_PROBE, url, prefix, std::to_string(ttl.count()),
                                      std::to_string(keep)};
        if (wait) args.emplace_back("wait");
        pid_ = spawn_process(std::move(args), std::move(env), fa.get());
        ::close(fds[0]);
        stdin_ = fds[1];
    }
    ~probe() {
        if (stdin_ >= 0) ::close(stdin_);
        if (pid_ > 0) {
            ::kill(pid_, SIGCONT);
            ::kill(pid_, SIGKILL);
            int st = 0;
            ::waitpid(pid_, &st, 0);
        }
    }
    probe(probe const&) = delete;
    probe& operator=(probe const&) = delete;

    /// The value after `word ` on its stdout, once printed (empty if it exits or 60 s pass).
    std::optional<std::string> wait_for(std::string const& word) {
        std::regex const re("(^|\n)" + word + " (\\S+)\n");
        std::optional<std::string> found;
        eventually(
            [&] {
                std::smatch m;
                auto const text = slurp(out_);
                if (std::regex_search(text, m, re)) found = m[2];
                return found.has_value() || exited();
            },
            60s);
        return found;
    }
    void signal(int sig) const { ::kill(pid_, sig); }
    /// Close its stdin and wait for its exit code.
    int finish() {
        ::close(std::exchange(stdin_, -1));
        int st = 0;
        ::waitpid(std::exchange(pid_, -1), &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    std::string diag() const { return "\nprobe stdout:\n" + slurp(out_) + "probe stderr:\n" + slurp(err_); }

private:
    bool exited() {
        int st = 0;
        if (::waitpid(pid_, &st, WNOHANG) != pid_) return false;
        pid_ = -1;
        return true;
    }
    fs::path out_, err_;
    pid_t pid_ = -1;
    int stdin_ = -1;
};

class MetricsScrape : public engine_fixture {};

TEST_P(MetricsScrape, ThreeGrantsOneBusyAndALossBySigstopAreScraped) {
    temp_dir dir;
    auto const ttl = 1000ms;
    probe p(url_, prefix_, ttl, dir.path());
    auto const port = p.wait_for("port");
    ASSERT_TRUE(port) << p.diag();
    auto const token = p.wait_for("ready");
    ASSERT_TRUE(token) << p.diag();
    auto const endpoint = "http://127.0.0.1:" + *port + "/metrics";
    auto const labels = [&](std::map<std::string, std::string> more) {
        more.emplace("engine", engine_name(e_));
        more.emplace("kind", "table");
        return more;
    };

    auto const before = http_get(endpoint);
    ASSERT_FALSE(before.empty()) << "nothing answered " << endpoint << p.diag();
    auto s = parse_exposition(before);
    EXPECT_EQ(value_of(s, "sqlock_acquire_attempts_total", labels({{"outcome", "granted"}})), 3) << before;
    EXPECT_EQ(value_of(s, "sqlock_acquire_attempts_total", labels({{"outcome", "busy"}})), 1) << before;
    EXPECT_EQ(value_of(s, "sqlock_leases", labels({{"state", "held"}})), 1) << before;
    EXPECT_EQ(value_of(s, "sqlock_losses_total", labels({{"cause", "expired"}})), 0) << before;
    EXPECT_EQ(value_of(s, "sqlock_hold_duration_seconds_count", labels({})), 2) << before;

    // Paused past its TTL: its lease of c runs out, and another owner may take the lock.
    p.signal(SIGSTOP);
    auto other = sqlock::table_locker(*db_, {.ttl = 30s});
    std::optional<sqlock::lease> taken;
    ASSERT_TRUE(eventually([&] { return (taken = other.try_acquire(prefix_ + "c")).has_value(); }, 30s))
        << "the paused holder's row never expired";
    EXPECT_GT(taken->token(), std::stoll(*token));
    p.signal(SIGCONT);

    std::string after;
    EXPECT_TRUE(eventually(
        [&] {
            after = http_get(endpoint);
            auto const lost = value_of(parse_exposition(after), "sqlock_losses_total", labels({{"cause", "expired"}}));
            return lost && *lost == 1;
        },
        30s))
        << after << p.diag();
    s = parse_exposition(after);
    EXPECT_EQ(value_of(s, "sqlock_leases", labels({{"state", "held"}})), 0) << after;
    EXPECT_EQ(value_of(s, "sqlock_acquire_attempts_total", labels({{"outcome", "granted"}})), 3) << after;
    EXPECT_EQ(value_of(s, "sqlock_hold_duration_seconds_count", labels({})), 3) << after;
    auto const rejected = promtool_rejects(after, dir);
    EXPECT_FALSE(rejected) << *rejected;
    EXPECT_EQ(p.finish(), 0) << p.diag();
    EXPECT_EQ(p.wait_for("state"), "lost") << p.diag();
}

INSTANTIATE_TEST_SUITE_P(Engines, MetricsScrape, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

#ifdef SQLOCK_REAPER_BIN
/// A Prometheus server (Debian's `prometheus`) on loopback, scraping `targets`
/// (job name -> ADDR:PORT) every second and evaluating contrib/prometheus's rules.
class prometheus_server {
public:
    prometheus_server(std::vector<std::pair<std::string, std::string>> const& targets, fs::path const& dir)
        : dir_(dir), port_(closed_port()) {
        auto const config = dir / "prometheus.yml";
        std::ofstream out(config);
        out << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            << "rule_files: ['" << SQLOCK_SOURCE_DIR << "/contrib/prometheus/sqlock.rules.yml']\n"
            << "scrape_configs:\n";
        for (auto const& [job, target] : targets)
            out << "  - job_name: " << job << "\n    static_configs: [{targets: ['" << target << "']}]\n";
        out.close();
        spawn_file_actions fa;
        fa.capture_to_files(dir / "prometheus.out", dir / "prometheus.err");
        pid_ = spawn_process({"/usr/bin/prometheus", "--config.file=" + config.string(),
                              "--storage.tsdb.path=" + (dir / "tsdb").string(),
                              "--web.listen-address=127.0.0.1:" + std::to_string(port_)},
                             std::nullopt, fa.get());
    }
    ~prometheus_server() {
        ::kill(pid_, SIGKILL);
        int st = 0;
        ::waitpid(pid_, &st, 0);
    }
    prometheus_server(prometheus_server const&) = delete;
    prometheus_server& operator=(prometheus_server const&) = delete;

    std::string get(std::string const& path) const {
        return http_get("http://127.0.0.1:" + std::to_string(port_) + path);
    }
    /// The state ("pending", "firing") of each active alert, by name.
    std::map<std::string, std::string> alerts() const {
        std::map<std::string, std::string> out;
        auto const body = get("/api/v1/alerts");
        if (body.empty()) return out;
        auto const reply = nlohmann::json::parse(body);  // kept: a range-for over a temporary's member dangles
        for (auto const& a : reply.at("data").at("alerts"))
            out[a.at("labels").at("alertname").get<std::string>()] = a.at("state").get<std::string>();
        return out;
    }
    /// How many targets are up.
    int up() const {
        auto const body = get("/api/v1/query?query=sum(up)");
        if (body.empty()) return 0;
        auto const result = nlohmann::json::parse(body).at("data").at("result");
        return result.empty() ? 0 : std::stoi(result[0].at("value")[1].get<std::string>());
    }
    std::string diag() const {
        auto const err = slurp(dir_ / "prometheus.err");
        return "\nprometheus alerts: " + get("/api/v1/alerts") +
               "\nprometheus targets: " + get("/api/v1/targets?state=active").substr(0, 3000) +
               "\nprometheus stderr (tail):\n" + err.substr(err.size() > 3000 ? err.size() - 3000 : 0);
    }

private:
    fs::path dir_;
    int port_;
    pid_t pid_ = -1;
};

class MetricsAlerts : public engine_fixture {};

// The rules of contrib/prometheus/sqlock.rules.yml on a real Prometheus, scraping a
// real probe and a real reaper. The probe's wall clock runs 5 s behind (a preload
// of tests/clock_shift_preload.cpp) and it waits for a lock this test holds: the
// clock offset and the waiter alerts are on from the start, with the offset and
// the waiter in the scrape. The others are quiet while all is well; then a row
// expired an hour ago and not reaped, ten leases lost by a SIGSTOP past their
// TTL, and the reaper killed (-9) each turn theirs on (pending: their `for` is minutes).
TEST_P(MetricsAlerts, RulesFireOnARealScrapeOfEachFault) {
    if (::access("/usr/bin/prometheus", X_OK) != 0) {
        if (in_ci()) FAIL() << "prometheus is missing: install it (bash scripts/deps.sh --servers)";
        GTEST_SKIP() << "prometheus is not installed (bash scripts/deps.sh --servers)";
    }
    temp_dir dir;
    auto locks = sqlock::table_locker(*db_, {.ttl = 60s});
    auto awaited = locks.try_acquire(n("w"));  // the probe's waiter waits for it
    ASSERT_TRUE(awaited);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.push_back(std::string("LD_PRELOAD=") + SQLOCK_TEST_CLOCK_SHIFT_LIB);
    env.emplace_back("SQLOCK_TEST_CLOCK_SHIFT_MS=-5000");
    probe p(url_, prefix_, 1000ms, dir.path(), 10, true, env);
    auto const probe_port = p.wait_for("port");
    ASSERT_TRUE(probe_port && p.wait_for("ready")) << p.diag();
    // The scrape says what the rules will see: one waiter, and the database 5 s ahead of the probe's clock.
    std::vector<text_sample> s;
    ASSERT_TRUE(eventually(
        [&] {
            s = parse_exposition(http_get("http://127.0.0.1:" + *probe_port + "/metrics"));
            auto const w = value_of(s, "sqlock_waiters", {{"engine", engine_name(e_)}, {"kind", "table"}});
            auto const offset = value_of(s, "sqlock_clock_offset_seconds");
            return w == 1.0 && offset && *offset > 4 && *offset < 6;
        },
        30s))
        << "waiters " << value_of(s, "sqlock_waiters").value_or(-1) << ", offset "
        << value_of(s, "sqlock_clock_offset_seconds").value_or(-1) << p.diag();

    spawn_file_actions fa;
    fa.capture_to_files(dir.path() / "reaper.out", dir.path() / "reaper.err");
    pid_t reaper =
        spawn_process({SQLOCK_REAPER_BIN, "--db", url_, "--interval", "1h", "--metrics-listen", "127.0.0.1:0"},
                      std::nullopt, fa.get());
    std::smatch m;
    std::regex const serving(R"(serving metrics on http://(127\.0\.0\.1:\d+)/metrics)");
    std::string err;
    ASSERT_TRUE(eventually([&] { return std::regex_search(err = slurp(dir.path() / "reaper.err"), m, serving); }, 60s))
        << err;
    std::string const reaper_target = m[1];

    prometheus_server prom({{"sqlock-reaper", reaper_target}, {"sqlock", "127.0.0.1:" + *probe_port}}, dir.path());
    ASSERT_TRUE(eventually([&] { return prom.up() == 2; }, 60s)) << prom.diag();
    std::set<std::string> const watched{"SqlockReaperDown", "SqlockReaperBehind", "SqlockLeasesLost"};
    auto const active = [&](std::string const& name) { return prom.alerts().count(name) == 1; };
    std::this_thread::sleep_for(3s);  // three evaluations of every rule on good data
    for (auto const& [name, state] : prom.alerts())
        EXPECT_FALSE(watched.count(name)) << name << " is " << state << " while all is well";
    EXPECT_TRUE(eventually([&] { return active("SqlockClockOffset"); }, 60s)) << prom.diag();
    EXPECT_TRUE(eventually([&] { return active("SqlockWaitersKeepWaiting"); }, 60s)) << prom.diag();

    // A row that expired an hour ago, which the reaper (a pass an hour) leaves.
    auto old = locks.try_acquire(n("old"));
    ASSERT_TRUE(old);
    backdate_row(*raw_, e_, n("old"));
    EXPECT_TRUE(eventually([&] { return active("SqlockReaperBehind"); }, 60s)) << prom.diag();

    // Ten leases lost: the probe paused past their TTL.
    p.signal(SIGSTOP);
    std::this_thread::sleep_for(3s);
    p.signal(SIGCONT);
    EXPECT_TRUE(eventually([&] { return active("SqlockLeasesLost"); }, 60s)) << prom.diag() << p.diag();

    // The reaper crashes.
    EXPECT_FALSE(active("SqlockReaperDown"));
    ::kill(reaper, SIGKILL);
    int st = 0;
    ::waitpid(reaper, &st, 0);
    EXPECT_TRUE(eventually([&] { return active("SqlockReaperDown"); }, 60s)) << prom.diag();
    EXPECT_EQ(p.finish(), 0) << p.diag();
}

// The rules are engine-agnostic: one engine (the embedded one) is enough.
INSTANTIATE_TEST_SUITE_P(Engines, MetricsAlerts, ::testing::Values(engine::sqlite), engine_param_name{});
#endif
#endif

}  // namespace
