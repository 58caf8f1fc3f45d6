// sqlock command-line tools — exit codes, one-line messages, UTC times.
#include "tool_support.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/version.hpp>

#include <cstdio>
#include <ctime>
#include <exception>
#include <stdexcept>

namespace sqlock::tools {

namespace {

int rank(int code) noexcept {
    switch (code) {
        case exit_code::ok: return 0;
        case exit_code::unavailable: return 2;
        case exit_code::config: return 3;
        case exit_code::usage: return 4;
        case exit_code::software: return 5;
        default: return 1;
    }
}

}  // namespace

int most_serious(int a, int b) noexcept { return rank(b) > rank(a) ? b : a; }

int exit_code_of_current_exception() noexcept {
    try {
        throw;
    } catch (sqlock::usage_error const&) {
        return exit_code::usage;
    } catch (sqlock::schema_missing const&) {
        return exit_code::config;
    } catch (sqlock::protocol_mismatch const&) {
        return exit_code::config;
    } catch (sqlock::lease_lost const&) {
        return exit_code::lost;
    } catch (sqlock::error const&) {
        return exit_code::unavailable;
    } catch (...) {
        return exit_code::software;
    }
}

std::string one_line(std::string_view message) {
    // SOCI's preamble of every connection failure says nothing the engine's own message does not.
    std::string text(message);
    constexpr std::string_view soci_preamble = "Cannot establish connection to the database.";
    for (auto at = text.find(soci_preamble); at != std::string::npos; at = text.find(soci_preamble))
        text.erase(at, soci_preamble.size());
    std::string out;
    bool space = false;
    for (char ch : text) {
        if (ch == '\n' || ch == '\r' || ch == '\t' || ch == ' ') {
            space = !out.empty();
            continue;
        }
        if (space) out += ' ';
        space = false;
        out += ch;
    }
    constexpr std::string_view prefix = "sqlock: ";
    if (out.starts_with(prefix)) out.erase(0, prefix.size());
    return out;
}

std::string version_text(std::string_view program) {
    return std::string(program) + " " + std::string(sqlock::version()) + " (lock tables: protocol " +
           std::to_string(sqlock::protocol_version()) + ")";
}

void print_error(std::string_view program, std::string_view message) {
    auto line = std::string(program) + ": " + one_line(message) + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
}

std::string iso8601(sqlock::db_time t) {
    using namespace std::chrono;
    auto secs = floor<seconds>(t);
    auto ms = duration_cast<milliseconds>(t - secs).count();
    auto tt = static_cast<std::time_t>(secs.time_since_epoch().count());
    std::tm tm{};
    ::gmtime_r(&tt, &tm);
    char buf[96];  // room for any int the compiler imagines
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
    return buf;
}

}  // namespace sqlock::tools
