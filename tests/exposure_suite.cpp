// sqlock tests — what the library and its tools expose (issue 38): a password in any message or metric
// label (a fuzz over generated URLs, through the library, `sqlock`, `sqlock doctor` and `sqlock-reaper`),
// `sqlock run --metrics-textfile` beside files planted in its directory, the address `sqlock-reaper
// --metrics-listen` binds, and the MariaDB ring's KILL when nothing listens.
//
// The fuzz prints its seed; SQLOCK_TEST_SEED=<seed> replays a run, SQLOCK_TEST_FUZZ_CASES=<n> sizes it.
#include "run_command.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>
#include <soci/soci.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#ifndef SQLOCK_CLI
#error "SQLOCK_CLI (path of the sqlock binary) must be defined by the build"
#endif

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;

// ------------------------------------------------------------------ generated URLs

/// A generated URL and the texts no message may show: its passwords, as written and decoded.
struct generated_url {
    std::string url;
    std::vector<std::string> secrets;
};

class url_generator {
public:
    explicit url_generator(std::uint64_t seed) : rng_(seed) {}

    /// `loopback`: every host is 127.0.0.1 at `port` (nothing listens there: a store fails fast).
    generated_url next(bool loopback, int port) {
        generated_url g;
        auto const server = pick(
            std::vector<std::string>{"postgresql", "postgres", "mysql", "mariadb", "PostgreSQL", "postgresq", "mysql"});
        bool const pg = server.starts_with("postgres") || server.starts_with("Postgre");
        std::string const user = word("abcdefghijklmnopqrstuvwxyz0123456789_.-", 1, 10) + (chance(10) ? "/x" : "");
        auto const [raw, decoded] = password();
        g.secrets = {raw, decoded};
        std::string url = server + "://" + user;
        if (!chance(20)) url += ":" + raw;
        url += "@";
        int const hosts = pg && chance(4) ? 1 + static_cast<int>(below(3)) : 1;
        for (int i = 0; i < hosts; ++i) {
            if (i > 0) url += ",";
            if (loopback) {
                url += "127.0.0.1:" + std::to_string(port);
                continue;
            }
            switch (below(4)) {
                case 0: url += "127.0.0.1"; break;
                case 1: url += "[::1]"; break;
                default: url += word("abcdefghijklmnopqrstuvwxyz", 1, 8) + ".example"; break;
            }
            if (chance(2)) url += ":" + std::to_string(1 + below(65535));
        }
        url += "/" + word("abcdefghijklmnopqrstuvwxyz_", 1, 8);
        std::vector<std::string> params;
        if (chance(3)) params.push_back(pg ? "sslmode=disable" : "charset=utf8mb4");
        if (pg && chance(4)) params.push_back("application_name=" + word("abcdefghij0123456789", 1, 8));
        if (pg && chance(5)) params.push_back("target_session_attrs=read-write");
        if (chance(4)) {
            auto const [praw, pdecoded] = password();
            // A query value ends at '&': one that holds '&' is not a parameter of its own.
            std::string value;
            for (char c : praw) value += c == '&' ? std::string("%26") : std::string(1, c);
            params.push_back(std::string(chance(2) ? "password" : "sslpassword") + "=" + value);
            g.secrets.push_back(value);
        }
        if (chance(8)) params.push_back(word("abcdefghijklmnopqrstuvwxyz", 3, 8) + "=" + word("xyz019", 1, 4));
        for (std::size_t i = 0; i < params.size(); ++i) url += (i == 0 ? "?" : "&") + params[i];
        g.url = std::move(url);
        return g;
    }

private:
    std::mt19937_64 rng_;

    std::uint64_t below(std::uint64_t n) { return rng_() % n; }
    bool chance(std::uint64_t one_in) { return below(one_in) == 0; }
    template <class T>
    T pick(std::vector<T> const& v) {
        return v[below(v.size())];
    }
    std::string word(std::string_view alphabet, std::size_t min, std::size_t max) {
        std::string out;
        auto const n = min + below(max - min + 1);
        for (std::size_t i = 0; i < n; ++i) out += alphabet[below(alphabet.size())];
        return out;
    }

    /// A password as written in the URL and as decoded: the issue's shapes (digits then '/', a base64
    /// key), any printable mix with '@', ':', '/', '?', '+', '%', and percent-encoded ones. Each holds a
    /// run of 8 letters, so that finding it in a message is never chance.
    std::pair<std::string, std::string> password() {
        static constexpr std::string_view base64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=";
        static constexpr std::string_view any = "0123456789/@:+%=?#&,;!$*-_.~ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmno";
        std::string const core = word("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", 8, 8);
        std::string raw;
        switch (below(5)) {
            case 0: raw = word("0123456789", 1, 4) + "/" + core; break;                        // app:2024/Secret
            case 1: raw = word("0123456789", 1, 2) + "/" + core + word(base64, 4, 20); break;  // app:8/kQz+...
            case 2: raw = word(any, 0, 6) + core + word(any, 0, 6); break;
            case 3: raw = word(base64, 0, 10) + core + word(base64, 0, 10) + "=="; break;
            default: {
                std::string decoded = word(any, 0, 4) + core + word(any, 0, 4);
                for (char c : decoded) {
                    if (std::string_view("/@:?#&%,+").find(c) != std::string_view::npos && chance(2)) {
                        char buf[4];
                        std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
                        raw += buf;
                    } else {
                        raw += c;
                    }
                }
            }
        }
        return {raw, percent_decode(raw)};
    }
};

/// A password's 8-letter core, or any 8 characters of it, or the whole, in `text`.
std::string leak_in(std::string const& text, generated_url const& g) {
    for (auto const& secret : g.secrets) {
        if (secret.size() < 8) continue;
        if (text.find(secret) != std::string::npos) return secret;
        for (std::size_t i = 0; i + 8 <= secret.size(); ++i)
            if (text.find(secret.substr(i, 8)) != std::string::npos) return secret.substr(i, 8);
    }
    return {};
}

std::uint64_t fuzz_seed() {
    if (auto s = getenv_nonempty("SQLOCK_TEST_SEED")) return std::stoull(*s);
    return std::random_device{}() * 0x100000000ULL + std::random_device{}();
}

std::size_t fuzz_cases(std::size_t fallback) {
    if (auto s = getenv_nonempty("SQLOCK_TEST_FUZZ_CASES")) return std::stoul(*s);
    return fallback;
}

TEST(RedactionFuzz, NoPasswordInTheRedactedFormOrAStoreError) {
    auto const seed = fuzz_seed();
    std::printf("RedactionFuzz seed %llu (replay: SQLOCK_TEST_SEED=%llu)\n", static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(seed));
    url_generator gen(seed);
    int const port = closed_port();
    auto const cases = fuzz_cases(3000);
    for (std::size_t i = 0; i < cases && !HasFailure(); ++i) {
        auto const any = gen.next(false, port);
        auto const redacted = sqlock::redact_url(any.url);
        EXPECT_EQ(leak_in(redacted, any), "")
            << "seed " << seed << " case " << i << ": " << any.url << " -> " << redacted;
        // The store: a parse error before any I/O, or a refused connection on the loopback.
        auto const near = gen.next(true, port);
        try {
            sqlock::store s(near.url, {.connect_timeout = 2s});
            ADD_FAILURE() << "seed " << seed << " case " << i << ": opened " << near.url;
        } catch (std::exception const& e) {
            EXPECT_EQ(leak_in(e.what(), near), "") << "seed " << seed << " case " << i << ": " << near.url << "\n"
                                                   << describe(e);
        }
    }
}

TEST(RedactionFuzz, NoPasswordInTheToolsOutput) {
    auto const seed = fuzz_seed();
    std::printf("RedactionFuzz seed %llu (replay: SQLOCK_TEST_SEED=%llu)\n", static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(seed));
    url_generator gen(seed);
    int const port = closed_port();
    // The issue's two URLs first, then generated ones.
    std::vector<generated_url> urls{
        {"postgresql://app:2024/SecretPw@db/app", {"2024/SecretPw", "SecretPw"}},
        {"mysql://app:8/kQzAbCdEfGh+x/y==@127.0.0.1:" + std::to_string(port) + "/app", {"8/kQzAbCdEfGh+x/y=="}},
        {"postgresql://app:2024/SecretPw@127.0.0.1:" + std::to_string(port) + "/app", {"2024/SecretPw"}},
    };
    for (std::size_t i = 0; i < fuzz_cases(3000) / 250 + 5; ++i) urls.push_back(gen.next(true, port));
    std::vector<std::vector<std::string>> commands;
    for (auto const& g : urls) {
        commands = {{SQLOCK_CLI, "list", "--db", g.url},
                    {SQLOCK_CLI, "doctor", "--db", g.url},
                    {SQLOCK_CLI, "run", "--db", g.url, "--name", "exposure", "--", "true"}};
#ifdef SQLOCK_REAPER_BIN
        commands.push_back({SQLOCK_REAPER_BIN, "--db", g.url, "--once"});
        commands.push_back({SQLOCK_REAPER_BIN, "--db", g.url, "--once", "--json"});
#endif
        for (auto const& args : commands) {
            auto const r = run_command(args, {}, 120s);
            ASSERT_TRUE(r.finished) << args[0] << " " << args[1] << " " << g.url;
            EXPECT_FALSE(r.ok()) << args[0] << " " << args[1] << " succeeded on " << g.url;
            EXPECT_EQ(leak_in(r.out + r.err, g), "") << "seed " << seed << ": " << args[0] << " " << args[1] << " "
                                                     << g.url << "\nstdout: " << r.out << "\nstderr: " << r.err;
        }
    }
}

TEST(RedactionFuzz, NoPasswordInAMetricsLabel) {
    // The store's label ("database") is its redacted URL. PostgreSQL's test server trusts the loopback,
    // so a store opens with any password, and its label is read back from the text format.
    std::string base;
    require_env("SQLOCK_TEST_PG_URL", base);
    if (should_stop()) return;
    auto const seed = fuzz_seed();
    std::printf("RedactionFuzz seed %llu (replay: SQLOCK_TEST_SEED=%llu)\n", static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(seed));
    std::mt19937_64 rng(seed);
    auto const at = base.rfind('@');
    auto const user_end = base.find(':', base.find("://") + 3);
    ASSERT_NE(at, std::string::npos);
    auto const head = base.substr(0, std::min(user_end, at));
    auto const tail = base.substr(at);  // @host:port/db
    std::string const key = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+=@:";
    for (int i = 0; i < 10; ++i) {
        std::string core;
        for (int k = 0; k < 8; ++k) core += static_cast<char>('a' + rng() % 26);
        std::string password = std::to_string(rng() % 10000) + "%2F" + core;  // digits, '/', letters
        for (int k = 0; k < 6; ++k) password += key[rng() % key.size()];
        generated_url g{head + ":" + password + tail, {password, percent_decode(password), core}};
        auto metrics = std::make_shared<sqlock::metrics>();
        sqlock::store s(g.url, {.connect_timeout = 10s, .metrics = metrics});
        auto l = sqlock::table_locker(s);
        auto lease = l.try_acquire("sqlt-exposure-" + random_hex(8));
        ASSERT_TRUE(lease.has_value());
        lease->release();
        std::ostringstream text;
        metrics->write_text(text);
        EXPECT_NE(text.str().find("database=\""), std::string::npos) << text.str();
        EXPECT_EQ(leak_in(text.str() + s.url(), g), "") << g.url << "\n" << text.str();
    }
}

// ------------------------------------------------------------------ sqlock run --metrics-textfile

class Textfile : public ::testing::Test {
protected:
    temp_dir dir_;
    std::string url_ = "sqlite://" + (dir_.path() / "locks.db").string();

    void SetUp() override {
        auto r = run_command({SQLOCK_CLI, "schema", "--apply", "--db", url_});
        ASSERT_TRUE(r.ok()) << r.err;
    }
};

TEST_F(Textfile, NeverWritesThroughAPlantedSymlink) {
    // A file only its owner may read, and a symlink to it at each name a run could write beside PATH.
    auto const precious = dir_.path() / "precious";
    { std::ofstream(precious) << "precious\n"; }
    ::chmod(precious.c_str(), 0600);
    auto const prom = dir_.path() / "job.prom";
    auto const go = dir_.path() / "go";
    temp_dir files;
    spawn_file_actions actions;
    actions.capture_to_files(files.path() / "out", files.path() / "err");
    pid_t const pid = spawn_process({SQLOCK_CLI, "run", "--db", url_, "--name", "sqlt-textfile-" + random_hex(8),
                                     "--metrics-textfile", prom.string(), "--", "sh", "-c",
                                     "while [ ! -e \"$0\" ]; do sleep 0.05; done", go.string()},
                                    std::nullopt, actions.get());
    // The name the run used to write (PATH.tmp.<pid>), planted while COMMAND runs.
    fs::create_symlink(precious, prom.string() + ".tmp." + std::to_string(pid));
    std::ofstream(go.string()) << "";
    int status = 0;
    ASSERT_TRUE(eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 120s));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(files.path() / "err");
    EXPECT_EQ(slurp(precious), "precious\n") << "the run wrote through the symlink";
    struct stat st {};
    ASSERT_EQ(::lstat(prom.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << "PATH is not a regular file of its own";
    EXPECT_EQ(st.st_mode & 07777, 0644u) << "node-exporter's collector must be able to read it";
    EXPECT_NE(slurp(prom).find("sqlock_run_exit_code"), std::string::npos) << slurp(prom);
    // Nothing else left beside it but the planted link.
    for (auto const& e : fs::directory_iterator(dir_.path())) {
        auto const name = e.path().filename().string();
        EXPECT_TRUE(name == "precious" || name == "job.prom" || name == "go" || name.starts_with("locks.db") ||
                    name == "job.prom.tmp." + std::to_string(pid))
            << "left behind: " << name;
    }
}

TEST_F(Textfile, ADirectoryAtThePathIsReportedAndKeepsTheExitCode) {
    auto const prom = dir_.path() / "job.prom";
    fs::create_directory(prom);
    auto r = run_command({SQLOCK_CLI, "run", "--db", url_, "--name", "sqlt-textfile-" + random_hex(8),
                          "--metrics-textfile", prom.string(), "--", "sh", "-c", "exit 3"});
    ASSERT_TRUE(r.finished);
    EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 3) << r.err;
    EXPECT_NE(r.err.find("could not write --metrics-textfile"), std::string::npos) << r.err;
    EXPECT_TRUE(fs::is_directory(prom));
    for (auto const& e : fs::directory_iterator(dir_.path()))
        EXPECT_FALSE(e.path().filename().string().starts_with("job.prom.tmp")) << "left behind: " << e.path();
}

TEST_F(Textfile, AFifoAtThePathIsReplacedWithoutBlocking) {
    auto const prom = dir_.path() / "job.prom";
    ASSERT_EQ(::mkfifo(prom.c_str(), 0644), 0);
    auto r = run_command({SQLOCK_CLI, "run", "--db", url_, "--name", "sqlt-textfile-" + random_hex(8),
                          "--metrics-textfile", prom.string(), "--", "true"},
                         {}, 120s);
    ASSERT_TRUE(r.finished) << "the run blocked on the FIFO";
    EXPECT_TRUE(r.ok()) << r.err;
    EXPECT_TRUE(fs::is_regular_file(prom));
    EXPECT_NE(slurp(prom).find("sqlock_run_exit_code"), std::string::npos);
}

// ------------------------------------------------------------------ sqlock-reaper --metrics-listen

#if defined(SQLOCK_REAPER_BIN) && SQLOCK_REAPER_METRICS
/// The IPv4 address (dotted) of each socket listening on `port`, and "ipv6" for each IPv6 one.
std::vector<std::string> listeners_on(int port) {
    std::vector<std::string> out;
    for (char const* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
        std::ifstream in(table);
        std::string line;
        std::getline(in, line);
        while (std::getline(in, line)) {
            std::istringstream f(line);
            std::string sl, local, remote, st;
            f >> sl >> local >> remote >> st;
            if (st != "0A") continue;  // TCP_LISTEN
            auto const colon = local.rfind(':');
            if (std::stoi(local.substr(colon + 1), nullptr, 16) != port) continue;
            if (std::string_view(table).ends_with("6")) {
                out.push_back("ipv6");
                continue;
            }
            auto const a = static_cast<std::uint32_t>(std::stoul(local.substr(0, colon), nullptr, 16));  // host order
            out.push_back(std::to_string(a & 0xff) + "." + std::to_string((a >> 8) & 0xff) + "." +
                          std::to_string((a >> 16) & 0xff) + "." + std::to_string(a >> 24));
        }
    }
    return out;
}

TEST(ReaperListen, ABarePortListensOnTheLoopbackOnly) {
    temp_dir dir;
    std::string const url = "sqlite://" + (dir.path() / "locks.db").string();
    ASSERT_TRUE(run_command({SQLOCK_CLI, "schema", "--apply", "--db", url}).ok());
    int const port = closed_port();
    spawn_file_actions actions;
    actions.capture_to_files(dir.path() / "out", dir.path() / "err");
    pid_t const pid =
        spawn_process({SQLOCK_REAPER_BIN, "--db", url, "--interval", "1h", "--metrics-listen", std::to_string(port)},
                      std::nullopt, actions.get());
    std::string log;
    bool const serving = eventually(
        [&] {
            log = slurp(dir.path() / "out") + slurp(dir.path() / "err");
            return log.find("serving metrics") != std::string::npos || ::waitpid(pid, nullptr, WNOHANG) == pid;
        },
        60s);
    auto const listening = listeners_on(port);
    ::kill(pid, SIGTERM);
    int status = 0;
    if (!eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 30s)) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
    }
    ASSERT_TRUE(serving) << log;
    EXPECT_NE(log.find("http://127.0.0.1:" + std::to_string(port) + "/metrics"), std::string::npos) << log;
    EXPECT_EQ(listening, std::vector<std::string>{"127.0.0.1"}) << log;
}

TEST(ReaperListen, TheLogNamesThePortBound) {
    temp_dir dir;
    std::string const url = "sqlite://" + (dir.path() / "locks.db").string();
    ASSERT_TRUE(run_command({SQLOCK_CLI, "schema", "--apply", "--db", url}).ok());
    spawn_file_actions actions;
    actions.capture_to_files(dir.path() / "out", dir.path() / "err");
    pid_t const pid = spawn_process({SQLOCK_REAPER_BIN, "--db", url, "--interval", "1h", "--metrics-listen", "0"},
                                    std::nullopt, actions.get());
    std::string log;
    std::smatch m;
    std::regex const serving(R"(serving metrics on http://127\.0\.0\.1:(\d+)/metrics)");
    bool const found = eventually(
        [&] {
            log = slurp(dir.path() / "out") + slurp(dir.path() / "err");
            return std::regex_search(log, m, serving) || ::waitpid(pid, nullptr, WNOHANG) == pid;
        },
        60s);
    std::vector<std::string> listening;
    if (found && !m.empty()) listening = listeners_on(std::stoi(m[1]));
    ::kill(pid, SIGTERM);
    int status = 0;
    if (!eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 30s)) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
    }
    ASSERT_FALSE(m.empty()) << log;
    EXPECT_NE(m[1], "0") << log;
    EXPECT_EQ(listening, std::vector<std::string>{"127.0.0.1"}) << log;
}
#endif

// ------------------------------------------------------------------ the MariaDB ring

long long com_kill(soci::session& s) {
    std::string name;
    long long value = 0;
    s << "SHOW GLOBAL STATUS LIKE 'Com_kill'", soci::into(name), soci::into(value);
    return value;
}

TEST(MariaDbRing, NoKillWhenNoListenerIsFound) {
    std::string url;
    require_env("SQLOCK_TEST_MYSQL_URL", url);
    if (should_stop()) return;
    auto raw = raw_session(engine::mysql, url);
    sqlock::store s(url);
    auto l = sqlock::table_locker(s);
    // A released row marked by a listener that is gone: its release looks the listener up, finds none,
    // and must send nothing. Com_kill is the server's count of KILL statements (every session's: another
    // test's KILL may land in a window, so the check passes when one window of a few saw none).
    std::vector<long long> kills;
    for (int attempt = 0; attempt < 6; ++attempt) {
        auto const name = "sqlt-ring-" + random_hex(8);
        auto lease = l.try_acquire(name);
        ASSERT_TRUE(lease.has_value());
        *raw << "UPDATE " << locks_table() << " SET waiters = 2000000000 WHERE name = :n", soci::use(name);
        auto const before = com_kill(*raw);
        lease->release();
        kills.push_back(com_kill(*raw) - before);
        if (kills.back() == 0) break;
    }
    EXPECT_EQ(kills.back(), 0) << "KILL statements sent by each release of a row marked by a gone listener: "
                               << ::testing::PrintToString(kills);
}

}  // namespace
