// sqlock-reaper: purges expired lock rows, once (cron, systemd timer) or as a
// daemon. See `sqlock-reaper --help` and docs/operations.md.
//
// Exit codes: the table the sqlock command shares (tools/tool_support.hpp,
// docs/cli.md). Several --db (e.g. the members of a majority) are reaped independently: one
// that fails is reported and does not stop the others.
#include "duration.hpp"      // tools/
#include "tool_support.hpp"  // tools/

#include <sqlock/sqlock.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#if SQLOCK_REAPER_METRICS
#include <sqlock/prometheus.hpp>

#include <prometheus/exposer.h>
#endif

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

namespace exit_code = sqlock::tools::exit_code;
using sqlock::tools::iso8601;
using sqlock::tools::one_line;

// -------------------------------------------------------------------- output

std::string ms_text(std::chrono::microseconds d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(d.count()) / 1000.0);
    return buf;
}

/// One line per event: pass results on stdout, errors and warnings on stderr;
/// plain text or one JSON object per line.
class logger {
public:
    explicit logger(bool json) : json_(json) {}

    void pass(std::string const& url, sqlock::reap_result const& r) {
        std::lock_guard lock(mutex_);
        if (json_) {
            nlohmann::json j = {{"event", "pass"},
                                {"url", url},
                                {"purged", r.purged},
                                {"live_purged", r.live_purged},
                                {"batches", r.batches},
                                {"tokens_purged", r.tokens_purged},
                                {"token_batches", r.token_batches},
                                {"oldest_expiry", nullptr},
                                {"idle_batches", r.idle_batches},
                                {"duration_ms", static_cast<double>(r.duration.count()) / 1000.0},
                                {"paused_ms", static_cast<double>(r.paused.count()) / 1000.0},
                                {"complete", r.complete},
                                {"stopped", r.stopped},
                                {"dry_run", r.dry_run},
                                {"long_row_locks", r.long_row_locks}};
            if (r.oldest_expiry) j["oldest_expiry"] = iso8601(*r.oldest_expiry);
            std::cout << j.dump() << std::endl;
            return;
        }
        std::string line = "sqlock-reaper: " + url + (r.dry_run ? " would purge " : " purged ") +
                           (r.dry_run && !r.complete ? "at least " : "") + std::to_string(r.purged) +
                           " expired rows in " + std::to_string(r.batches) + " batches (oldest expiry " +
                           (r.oldest_expiry ? iso8601(*r.oldest_expiry) : std::string("none")) + ") in " +
                           ms_text(r.duration) + " ms";
        if (r.live_purged > 0) line += "; " + std::to_string(r.live_purged) + " of them live, by max-age";
        if (r.token_batches > 0)
            line += std::string("; ") + (r.dry_run ? "would purge " : "purged ") +
                    (r.dry_run && !r.complete ? "at least " : "") + std::to_string(r.tokens_purged) +
                    " token counters in " + std::to_string(r.token_batches) + " batches";
        if (r.paused.count() > 0) line += "; paused " + ms_text(r.paused) + " ms beside live leases";
        if (r.stopped) line += "; stopped before the table was clean";
        if (r.dry_run) line += " [dry run: nothing deleted]";
        std::cout << line << std::endl;
    }

    /// `retry_in`: the daemon tries again after it.
    void error(std::string const& url, std::string_view message, int code,
               std::optional<milliseconds> retry_in = std::nullopt) {
        std::lock_guard lock(mutex_);
        auto text = one_line(message);
        if (json_) {
            nlohmann::json j = {{"event", "error"}, {"url", url}, {"error", text}, {"exit_code", code}};
            if (retry_in) j["retry_in_ms"] = retry_in->count();
            std::cerr << j.dump() << std::endl;
            return;
        }
        std::string line = "sqlock-reaper: error: " + text;
        if (retry_in) line += " (still running: retrying in " + sqlock::tools::format_duration(*retry_in) + ")";
        std::cerr << line << std::endl;
    }

    void warning(std::string const& url, std::string_view message) {
        std::lock_guard lock(mutex_);
        auto text = one_line(message);
        if (json_)
            std::cerr << nlohmann::json{{"event", "warning"}, {"url", url}, {"warning", text}}.dump() << std::endl;
        else std::cerr << "sqlock-reaper: " << text << std::endl;
    }

    void note(std::string_view event, std::string const& text) {
        std::lock_guard lock(mutex_);
        if (json_) std::cerr << nlohmann::json{{"event", event}, {"message", text}}.dump() << std::endl;
        else std::cerr << "sqlock-reaper: " << text << std::endl;
    }

    void usage(std::string_view message) {
        std::lock_guard lock(mutex_);
        std::cerr << "sqlock-reaper: " << one_line(message) << " (see sqlock-reaper --help)" << std::endl;
    }

private:
    bool json_;
    std::mutex mutex_;
};

// -------------------------------------------------------------------- signals

/// SIGTERM and SIGINT request a stop from a thread that waits for them with
/// sigwait(): nothing runs in a signal handler. They are blocked in every
/// thread (the mask is set before any thread starts and inherited). A second
/// signal while stopping exits at once.
class signal_watch {
public:
    explicit signal_watch(class logger& out) : out_(out) {
        sigemptyset(&set_);
        sigaddset(&set_, SIGTERM);
        sigaddset(&set_, SIGINT);
        sigaddset(&set_, SIGUSR1);  // our own wake-up at exit
        pthread_sigmask(SIG_BLOCK, &set_, nullptr);
        thread_ = std::thread([this] { run(); });
    }
    ~signal_watch() {
        quitting_.store(true);
        pthread_kill(thread_.native_handle(), SIGUSR1);
        thread_.join();
    }
    signal_watch(signal_watch const&) = delete;
    signal_watch& operator=(signal_watch const&) = delete;

    [[nodiscard]] std::stop_token token() const { return source_.get_token(); }

private:
    void run() {
        for (;;) {
            int sig = 0;
            if (sigwait(&set_, &sig) != 0) continue;
            if (sig == SIGUSR1) {
                if (quitting_.load()) return;
                continue;
            }
            char const* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
            if (source_.stop_requested()) {
                out_.note("stopping", std::string(name) + " again: exiting at once");
                std::_Exit(128 + sig);
            }
            out_.note("stopping", std::string("received ") + name + ": stopping after the batch in flight");
            source_.request_stop();
        }
    }

    class logger& out_;
    sigset_t set_{};
    std::stop_source source_;
    std::atomic<bool> quitting_{false};
    std::thread thread_;
};

/// Sleep for `d` or until a stop is requested; false when stopped.
bool sleep_for(milliseconds d, std::stop_token const& stop) {
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    cv.wait_for(lock, stop, d, [] { return false; });
    return !stop.stop_requested();
}

// -------------------------------------------------------------------- databases

struct settings {
    std::vector<std::string> urls;
    std::string metrics_listen;            // ADDR:PORT, or empty
    std::optional<milliseconds> interval;  // empty: once
    std::string table_prefix = "sqlock";
    bool json = false;
    sqlock::reaper_options reap;
};

/// One database: opened lazily, reopened with backoff while unreachable.
struct target {
    std::string url;    // as given
    std::string shown;  // for logs: the password masked
    std::optional<sqlock::store> db;
    std::optional<sqlock::reaper> reaper;
    milliseconds backoff{0};
    steady::time_point due = steady::time_point::min();
    bool tables_missing = false;  // the last pass found no lock tables (78)
};

/// Runs `body`; maps what it throws to an exit code (0 when it returned).
/// `message` receives the error text.
template <class Body>
int guarded(Body&& body, std::string& message) {
    try {
        body();
        return exit_code::ok;
    } catch (std::exception const& e) {
        message = e.what();
        return sqlock::tools::exit_code_of_current_exception();
    }
}

void open(target& t, settings const& s, logger& out) {
    t.db.emplace(t.url, sqlock::store_options{.pool_size = 1, .table_prefix = s.table_prefix});
    auto options = s.reap;
    std::string shown = t.db->url();
    options.on_warning = [&out, shown](std::string_view m) { out.warning(shown, m); };
    t.reaper.emplace(*t.db, std::move(options));
    t.shown = t.db->url();
}

/// One pass over `t`; returns an exit code. `retry_in(code)`: when the daemon
/// tries again after a failure with that code (logged with the error), if it does.
int reap(target& t, settings const& s, logger& out, std::stop_token const& stop,
         std::function<std::optional<milliseconds>(int)> const& retry_in = {}) {
    std::string message;
    int code = guarded(
        [&] {
            if (!t.reaper) open(t, s, out);
            out.pass(t.shown, t.reaper->reap_once(stop));
        },
        message);
    if (code != exit_code::ok) out.error(t.shown, message, code, retry_in ? retry_in(code) : std::nullopt);
    return code;
}

int run_daemon(std::vector<target>& targets, settings const& s, logger& out, std::stop_token const& stop) {
    milliseconds const interval = *s.interval;
    milliseconds const first_backoff = std::min<milliseconds>(interval, 1s);
    milliseconds const max_backoff = 60s;
    // One database without its tables needs an operator: exit, and systemd shows it.
    // Among several (the members of a majority), it must not stop the others from
    // being reaped: it is reported and tried again every max_backoff, and the
    // daemon exits only when no database has its tables.
    bool const several = targets.size() > 1;
    while (!stop.stop_requested()) {
        auto now = steady::now();
        for (auto& t : targets) {
            if (stop.stop_requested()) break;
            if (t.due > now) continue;
            auto next_backoff = t.backoff == 0ms ? first_backoff : std::min(t.backoff * 2, max_backoff);
            int code = reap(t, s, out, stop, [&](int c) -> std::optional<milliseconds> {
                if (c == exit_code::usage || (c == exit_code::config && !several)) return std::nullopt;
                return c == exit_code::config ? max_backoff : next_backoff;
            });
            if (code == exit_code::usage || (code == exit_code::config && !several)) return code;
            t.tables_missing = code == exit_code::config;
            if (code == exit_code::ok) {
                t.backoff = 0ms;
                t.due = steady::now() + interval;
            } else {
                t.backoff = code == exit_code::config ? max_backoff : next_backoff;
                t.due = steady::now() + t.backoff;
            }
        }
        if (std::all_of(targets.begin(), targets.end(), [](target const& t) { return t.tables_missing; }))
            return exit_code::config;
        auto next = std::min_element(targets.begin(), targets.end(), [](target const& a, target const& b) {
                        return a.due < b.due;
                    })->due;
        auto wait = std::chrono::duration_cast<milliseconds>(next - steady::now());
        if (wait > 0ms && !sleep_for(wait, stop)) break;
    }
    return exit_code::ok;
}

// -------------------------------------------------------------------- metrics

#if SQLOCK_REAPER_METRICS
/// The lock tables of every database, counted at each scrape on a connection
/// of their own (so a scrape never waits for a pass, nor a pass for a scrape).
class table_gauges final : public prometheus::Collectable {
public:
    table_gauges(std::vector<std::string> const& urls, std::string prefix) : prefix_(std::move(prefix)) {
        for (auto const& url : urls) databases_.push_back({url, sqlock::redact_url(url), std::nullopt});
    }

    std::vector<prometheus::MetricFamily> Collect() const override {
        using sqlock::metric_family;
        using sqlock::metric_type;
        metric_family rows{"sqlock_table_rows",
                           "Rows of the lock table, by state: live, or expired (not yet taken over or reaped).",
                           metric_type::gauge,
                           {},
                           {}};
        metric_family oldest{"sqlock_table_oldest_expired_age_seconds",
                             "Age of the oldest expired row of the lock table (0 when none): growing while the "
                             "reaper runs means it is behind or failing.",
                             metric_type::gauge,
                             {},
                             {}};
        metric_family tokens{
            "sqlock_token_counters", "Fencing-token counters (rows of <prefix>_tokens).", metric_type::gauge, {}, {}};
        metric_family up{"sqlock_table_up",
                         "1 when the lock tables could be counted at this scrape, else 0.",
                         metric_type::gauge,
                         {},
                         {}};
        std::lock_guard lock(mutex_);
        for (auto& d : databases_) {
            auto gauge = [&](metric_family& f, double v, std::vector<std::pair<std::string, std::string>> extra = {}) {
                sqlock::metric_sample s;
                s.labels = {{"database", d.shown}};
                for (auto& l : extra) s.labels.push_back(std::move(l));
                s.value = v;
                f.samples.push_back(std::move(s));
            };
            try {
                if (!d.db)
                    d.db.emplace(d.url, sqlock::store_options{.pool_size = 1,
                                                              .table_prefix = prefix_,
                                                              .connect_timeout = 5s,
                                                              .io_timeout = 5s,
                                                              .metrics = own_metrics_});
                auto const t = sqlock::read_table_state(*d.db);
                gauge(rows, static_cast<double>(t.rows - t.expired_rows), {{"state", "live"}});
                gauge(rows, static_cast<double>(t.expired_rows), {{"state", "expired"}});
                gauge(oldest, t.oldest_expired_age ? static_cast<double>(t.oldest_expired_age->count()) / 1e6 : 0.0);
                gauge(tokens, static_cast<double>(t.token_rows));
                gauge(up, 1);
            } catch (std::exception const&) {
                d.db.reset();  // opened again at the next scrape
                gauge(up, 0);
            }
        }
        return sqlock::prometheus::to_prometheus({rows, oldest, tokens, up});
    }

private:
    struct database {
        std::string url;
        std::string shown;
        std::optional<sqlock::store> db;
    };
    std::string prefix_;
    // Its stores' clock offsets are the reaper's own stores' already: not twice.
    std::shared_ptr<sqlock::metrics> own_metrics_ = std::make_shared<sqlock::metrics>();
    mutable std::mutex mutex_;
    mutable std::vector<database> databases_;
};
#endif

// -------------------------------------------------------------------- command line

/// A count given on the command line: digits only, no sign, no unit.
std::size_t parse_count(std::string const& option, std::string const& text) {
    std::size_t n = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size())
        throw sqlock::usage_error(option + " '" + text +
                                  "' is not a count: write a number of rows such as 10000, or off");
    return n;
}

/// Parses argv into `s`; returns -1 to go on, or the exit code to exit with.
int parse(int argc, char** argv, settings& s, logger& out) {
    CLI::App app{
        "Purges expired lock rows from sqlock's lock table (<prefix>_locks).\n"
        "Each batch is one conditional DELETE on the database's clock: a row renewed a moment\n"
        "before is never deleted. Then fencing-token counters older than --token-horizon, after\n"
        "raising the table's floor above them, so tokens keep increasing. Several reapers on one\n"
        "database are safe. Several --db (e.g. the members of a majority) are reaped independently:\n"
        "one that fails is reported and the others are still reaped. Exit codes (those of the sqlock\n"
        "command): 0 fine, 64 usage, 69 a database unreachable or it refused a statement, 70 internal\n"
        "error (a bug), 78 the lock tables are missing or speak a newer protocol. With several\n"
        "databases, the most serious met: 70, then 64, then 78, then 69.",
        "sqlock-reaper"};
    app.set_version_flag("--version", sqlock::tools::version_text("sqlock-reaper"));
    bool once = false;
    std::string interval_text, grace_text = "5s", max_age_text;
    std::size_t batch = s.reap.batch_size;
    app.add_option("--db", s.urls,
                   "Database URL, repeatable (each is reaped in turn); default $SQLOCK_DB, then sqlite:sqlock.db")
        ->type_name("URL");
    auto* once_flag = app.add_flag("--once", once, "One pass over each database, then exit (the default)");
    app.add_option("--interval", interval_text, "Run as a daemon: a pass every DUR until SIGTERM/SIGINT")
        ->type_name("DUR")
        ->excludes(once_flag);
    app.add_option("--grace", grace_text, "Purge rows expired longer ago than this (default 5s)")->type_name("DUR");
    app.add_option("--batch", batch, "Rows per DELETE while a lease is live (default 1000, at most 100000)")
        ->type_name("N");
    std::string idle_batch_text = std::to_string(*s.reap.idle_batch_size);
    app.add_option("--idle-batch", idle_batch_text,
                   "Rows per DELETE while no lease is live (default 10000, at most 100000, never below --batch; "
                   "'off': always --batch)")
        ->type_name("N");
    app.add_option("--duty-cycle", s.reap.duty_cycle,
                   "Share of a pass spent in batches while a lease is live, 0.01 .. 1: after each batch it pauses "
                   "for the batch's time x (1 - F) / F (default 0.5; 1 never pauses)")
        ->type_name("F");
    app.add_option("--max-age", max_age_text,
                   "Also purge rows created longer ago than this, even live ones (their holders lose "
                   "their leases; off by default)")
        ->type_name("DUR");
    std::string token_horizon_text = "24h";
    app.add_option("--token-horizon", token_horizon_text,
                   "Purge fencing-token counters whose token is older than this (default 24h, at least 2h: "
                   "longer than any acquire statement can run; 'off' never purges them, for while older "
                   "sqlock clients still use the database)")
        ->type_name("DUR");
    std::string row_lock_warning_text = "15m";
    app.add_option("--row-lock-warning", row_lock_warning_text,
                   "Warn about row locks whose transaction is open longer than this (PostgreSQL; default 15m, "
                   "0 turns the check off)")
        ->type_name("DUR");
    app.add_flag("--dry-run", s.reap.dry_run, "Count one batch of due rows, delete nothing");
    app.add_flag("--json", s.json, "One JSON object per line instead of plain text");
    app.add_option("--table-prefix", s.table_prefix, "Prefix of the lock tables (default sqlock)")->type_name("NAME");
    app.add_option("--metrics-listen", s.metrics_listen,
                   "With --interval: serve Prometheus metrics on http://ADDR:PORT/metrics (the passes, and each "
                   "table's rows counted at each scrape; port 0 picks a free one, logged at start). A bare PORT "
                   "listens on 127.0.0.1 only: write 0.0.0.0:PORT to serve every interface")
        ->type_name("ADDR:PORT");
    try {
        app.parse(argc, argv);
    } catch (CLI::Success const& e) {  // --help, --help-all, --version
        return app.exit(e);
    } catch (CLI::ParseError const& e) {
        out.usage(e.what());
        return exit_code::usage;
    }
    std::string message;
    int code = guarded(
        [&] {
            using sqlock::tools::parse_duration;
            s.reap.grace = parse_duration(grace_text);
            s.reap.batch_size = batch;
            if (idle_batch_text == "off") s.reap.idle_batch_size.reset();
            else s.reap.idle_batch_size = parse_count("--idle-batch", idle_batch_text);
            if (token_horizon_text == "off") s.reap.token_horizon.reset();
            else s.reap.token_horizon = parse_duration(token_horizon_text);
            if (!max_age_text.empty()) s.reap.max_age = parse_duration(max_age_text);
            if (auto w = parse_duration(row_lock_warning_text); w > 0ms) s.reap.row_lock_warning = w;
            else s.reap.row_lock_warning.reset();
            if (!interval_text.empty()) {
                s.interval = parse_duration(interval_text);
                if (*s.interval <= 0ms || *s.interval > std::chrono::days(7))
                    throw sqlock::usage_error("--interval " + interval_text + " is out of range: use 1ms .. 7d");
            }
            sqlock::validate(s.reap);
        },
        message);
    if (code != exit_code::ok) {
        out.usage(message);
        return code;
    }
    // A bare port is loopback: the endpoint names users, hosts and databases and opens connections to
    // every --db on each scrape, so serving the network is asked for by name (0.0.0.0:PORT).
    if (!s.metrics_listen.empty() && s.metrics_listen.find_first_not_of("0123456789") == std::string::npos)
        s.metrics_listen = "127.0.0.1:" + s.metrics_listen;
    if (!s.metrics_listen.empty() && !s.interval) {
        out.usage(
            "--metrics-listen serves the metrics of a running daemon: add --interval DUR (a single pass "
            "exits before any scrape)");
        return exit_code::usage;
    }
#if !SQLOCK_REAPER_METRICS
    if (!s.metrics_listen.empty()) {
        out.usage(
            "--metrics-listen is not available: this sqlock-reaper was built without prometheus-cpp; install "
            "prometheus-cpp-dev (bash scripts/deps.sh) and build sqlock again");
        return exit_code::usage;
    }
#endif
    if (s.urls.empty()) {
        char const* env = std::getenv("SQLOCK_DB");
        s.urls.emplace_back(env != nullptr && *env != '\0' ? env : "sqlite:sqlock.db");
    }
    return -1;
}

}  // namespace

int main(int argc, char** argv) {
    bool json = false;
    for (int i = 1; i < argc; ++i) json = json || std::string_view(argv[i]) == "--json";
    logger out(json);
    signal_watch signals(out);  // first: every thread started later inherits the blocked signals
    auto stop = signals.token();

    settings s;
    if (int code = parse(argc, argv, s, out); code >= 0) return code;

    std::vector<target> targets;
    for (auto const& url : s.urls) targets.push_back(target{url, sqlock::redact_url(url)});

    // Open every database first, so a bad URL anywhere is reported before anything is deleted.
    int code = exit_code::ok;
    for (auto& t : targets) {
        std::string message;
        int c = guarded([&] { open(t, s, out); }, message);
        if (c == exit_code::usage) {
            out.usage(message);
            return exit_code::usage;
        }
        if (c == exit_code::ok) continue;
        t.db.reset();
        t.reaper.reset();
        if (!s.interval || (c == exit_code::config && targets.size() == 1)) {
            out.error(t.shown, message, c);
            code = sqlock::tools::most_serious(code, c);
        }
        // The daemon reports the others on its first pass, with the retry.
    }
    if (code == exit_code::config && s.interval) return code;  // --once still reaps the others

#if SQLOCK_REAPER_METRICS
    std::optional<prometheus::Exposer> exposer;
    auto tables = std::make_shared<table_gauges>(s.urls, s.table_prefix);
    auto passes = sqlock::prometheus::make_collectable();  // the process's: every store above records there
    if (!s.metrics_listen.empty()) {
        try {
            exposer.emplace(s.metrics_listen, 1);
        } catch (std::exception const& e) {
            out.usage("--metrics-listen " + s.metrics_listen + ": cannot listen there (" + one_line(e.what()) +
                      "): give a free ADDR:PORT, e.g. 127.0.0.1:9464");
            return exit_code::usage;
        }
        exposer->RegisterCollectable(passes);
        exposer->RegisterCollectable(tables);
        // The address as bound: the given host, and the port the listener really has (port 0 picks one).
        auto const ports = exposer->GetListeningPorts();
        auto const colon = s.metrics_listen.rfind(':');
        auto const host = colon == std::string::npos ? s.metrics_listen : s.metrics_listen.substr(0, colon);
        out.note("metrics",
                 "serving metrics on http://" + host + ":" +
                     (ports.empty() ? std::string("?") : std::to_string(ports.front())) + "/metrics" +
                     (host == "127.0.0.1" || host == "[::1]" || host == "localhost" ? " (this machine only)" : ""));
    }
#endif

    if (!s.interval) {
        for (auto& t : targets) {
            if (stop.stop_requested()) break;
            if (t.reaper) code = sqlock::tools::most_serious(code, reap(t, s, out, stop));
        }
        return code;
    }
    out.note("started",
             "reaping " + std::to_string(targets.size()) + " database" + (targets.size() == 1 ? "" : "s") + " every " +
                 sqlock::tools::format_duration(*s.interval) +
                 (s.reap.token_horizon ? "; token counters older than " +
                                             sqlock::tools::format_duration(*s.reap.token_horizon) + " are purged"
                                       : "; token counters are kept") +
                 (s.reap.max_age ? "; max-age " + sqlock::tools::format_duration(*s.reap.max_age) +
                                       " purges LIVE rows older than that"
                                 : ""));
    code = run_daemon(targets, s, out, stop);
    if (code == exit_code::ok) out.note("stopped", "stopped cleanly");
    return code;
}
