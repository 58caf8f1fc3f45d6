// sqlock command — several --db: the members of a majority, opened side by side.
#include "cli.hpp"

#include <sqlock/errors.hpp>

#include <exception>
#include <filesystem>
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

std::vector<member> open_members(std::vector<std::string> const& urls, bool for_run,
                                 std::chrono::milliseconds connect_timeout) {
    std::vector<member> members(urls.size());
    for_each_in_parallel(urls.size(), [&](std::size_t i) {
        auto& m = members[i];
        m.url = urls[i];
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
    });
    // A bad URL is the command line's fault, whichever member it is.
    for (auto const& m : members)
        if (m.failure && m.failure->code == exit_code::usage)
            fail(exit_code::usage, "--db " + redacted_url(m.url) + ": " + m.failure->message);
    return members;
}

}  // namespace sqlock::cli
