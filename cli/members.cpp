// sqlock command — several --db: the members of a majority, opened side by side.
#include "cli.hpp"

#include <sqlock/errors.hpp>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

namespace sqlock::cli {

namespace {

/// The same database written the same way: scheme aliases folded, SQLite
/// files by their canonical path. Other spellings (a host name and its
/// address) cannot be told apart without connecting.
std::string database_key(std::string const& url) {
    if (auto file = sqlite_file_of_url(url)) {
        std::error_code ec;
        auto path = std::filesystem::weakly_canonical(std::filesystem::absolute(*file, ec), ec);
        return "sqlite:" + (ec ? *file : path.string());
    }
    auto colon = url.find(':');
    if (colon == std::string::npos) return url;
    auto e = engine_of_url(url);
    return (e ? std::string(to_string(*e)) : url.substr(0, colon)) + url.substr(colon);
}

/// What to do about a majority member without its database or tables.
std::string member_tables_hint(std::string const& url) {
    return "a majority member's database and tables are never created implicitly; if this member is new, or lost "
           "its data, create them with `sqlock schema --apply --db " +
           redacted_url(url) + "`: it then counts once it is seeded from the other members' counters (automatic)";
}

}  // namespace

void for_each_in_parallel(std::size_t n, std::function<void(std::size_t)> const& fn) {
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (std::size_t i = 0; i < n; ++i) threads.emplace_back(fn, i);
    for (auto& t : threads) t.join();
}

void reject_duplicate_databases(std::vector<std::string> const& urls) {
    for (std::size_t i = 0; i < urls.size(); ++i)
        for (std::size_t j = 0; j < i; ++j)
            if (database_key(urls[i]) == database_key(urls[j]))
                fail(exit_code::usage,
                     urls[i] == urls[j]
                         ? "--db " + redacted_url(urls[i]) + " is given twice: each --db must be a different database"
                         : "--db " + redacted_url(urls[j]) + " and --db " + redacted_url(urls[i]) +
                               " are the same database: each --db must be a different database");
}

member_failure failure_of_current_exception(std::string const& url) {
    try {
        throw;
    } catch (exit_error const& e) {
        return {e.code, sqlock::tools::one_line(e.message)};
    } catch (sqlock::schema_missing const& e) {
        return {exit_code::config, sqlock::tools::one_line(e.message()) + "; " + member_tables_hint(url)};
    } catch (sqlock::usage_error const& e) {
        return {exit_code::usage, sqlock::tools::one_line(e.what())};
    } catch (sqlock::error const& e) {  // unreachable, refused, timed out
        return {sqlock::tools::exit_code_of_current_exception(), sqlock::tools::one_line(e.message())};
    } catch (std::exception const& e) {
        return {exit_code::software, "internal error: " + sqlock::tools::one_line(e.what())};
    }
}

namespace {

member open_member(std::string const& url, bool for_run, std::chrono::milliseconds connect_timeout) {
    member m{.url = url};
    try {
        if (for_run) {
            // Never created here, not even an SQLite file: a member whose database was lost
            // must not come back silently (docs/majority.md, "A member that lost its data").
            if (auto file = sqlite_file_of_url(m.url); file && !std::filesystem::exists(*file))
                throw exit_error{exit_code::config, "sqlock: the database file " + *file +
                                                        " does not exist: " + member_tables_hint(m.url)};
            m.store.emplace(m.url, sqlock::store_options{.pool_size = 4,
                                                         .create_schema = false,
                                                         .connect_timeout = connect_timeout});
        } else {
            m.store.emplace(open_existing({m.url, true}, connect_timeout));
        }
    } catch (...) {
        m.failure = failure_of_current_exception(m.url);
    }
    return m;
}

/// A bad URL is the command line's fault, whichever member it is.
void reject_bad_urls(std::vector<member> const& members) {
    for (auto const& m : members)
        if (m.failure && m.failure->code == exit_code::usage)
            fail(exit_code::usage, "--db " + redacted_url(m.url) + ": " + m.failure->message);
}

}  // namespace

bool enough_members_open(std::size_t open, std::size_t n) noexcept { return open / 2 + 1 >= n / 2 + 1; }

std::vector<member> open_members(std::vector<std::string> const& urls, bool for_run,
                                 std::chrono::milliseconds connect_timeout) {
    std::vector<member> members(urls.size());
    for_each_in_parallel(urls.size(),
                         [&](std::size_t i) { members[i] = open_member(urls[i], for_run, connect_timeout); });
    reject_bad_urls(members);
    return members;
}

struct member_opening::state {
    std::vector<std::string> urls;
    std::mutex mutex;
    std::condition_variable cv;
    std::vector<std::optional<member>> opened;  // guarded by mutex: set when the member answered
    bool settled = false;  // guarded by mutex: wait() returned; later answers are closed on their thread
};

member_opening::member_opening(std::vector<std::string> const& urls, std::chrono::milliseconds connect_timeout)
    : state_(std::make_shared<state>()) {
    state_->urls = urls;
    state_->opened.resize(urls.size());
    threads_.reserve(urls.size());
    try {
        for (std::size_t i = 0; i < urls.size(); ++i)
            threads_.emplace_back([s = state_, i, url = urls[i], connect_timeout] {
                auto m = open_member(url, true, connect_timeout);
                std::unique_lock lock(s->mutex);
                if (s->settled) {
                    lock.unlock();
                    return;  // left out of the run: `m` (an open store, perhaps) is closed here
                }
                s->opened[i] = std::move(m);
                lock.unlock();
                s->cv.notify_all();
            });
    } catch (...) {
        join();  // no thread left running without its owner
        throw;
    }
}

member_opening::~member_opening() { join(); }

void member_opening::join() noexcept {
    {
        std::lock_guard lock(state_->mutex);
        state_->settled = true;
    }
    for (auto& t : threads_)
        if (t.joinable()) t.join();
}

std::vector<member> member_opening::wait() {
    using std::chrono::milliseconds;
    auto const start = std::chrono::steady_clock::now();
    std::size_t const n = state_->opened.size();
    std::unique_lock lock(state_->mutex);
    auto count = [&](bool open_only) {
        return static_cast<std::size_t>(std::count_if(state_->opened.begin(), state_->opened.end(),
                                                      [&](auto const& m) { return m && (!open_only || m->store); }));
    };
    state_->cv.wait(lock, [&] { return count(false) == n || enough_members_open(count(true), n); });
    if (count(false) < n) {
        auto const majority_took = std::chrono::steady_clock::now() - start;
        auto const until =
            start + majority_took + std::max<std::chrono::steady_clock::duration>(majority_took, straggler_grace);
        state_->cv.wait_until(lock, until, [&] { return count(false) == n; });
    }
    state_->settled = true;
    auto const waited = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    std::vector<member> members(n);
    for (std::size_t i = 0; i < n; ++i) {
        if (state_->opened[i]) {
            members[i] = std::move(*state_->opened[i]);
            continue;
        }
        members[i].url = state_->urls[i];
        members[i].failure =
            member_failure{exit_code::unavailable, "no answer " + std::to_string(waited.count()) +
                                                       " ms after start, when a majority of the others was open; "
                                                       "not waited for"};
    }
    lock.unlock();
    reject_bad_urls(members);
    return members;
}

}  // namespace sqlock::cli
