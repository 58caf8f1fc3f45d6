// sqlock command-line tools — durations on the command line: "250ms", "30s",
// "5m", "1h", "7d", or several run together ("1h30m"); "0" alone means zero.
// Header-only, shared by sqlock-reaper and the sqlock command (tools/ holds
// what the command-line tools share).
#pragma once

#include <sqlock/errors.hpp>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace sqlock::tools {

/// Parse a duration written as one or more `<digits><unit>` terms with units
/// ms, s, m, h, d ("90s", "1h30m"), or "0".
/// @throws sqlock::usage_error naming the text and the accepted forms
[[nodiscard]] inline std::chrono::milliseconds parse_duration(std::string_view text) {
    auto bad = [&](std::string_view why) -> usage_error {
        return usage_error("bad duration '" + std::string(text) + "': " + std::string(why) +
                           "; write it like 250ms, 30s, 5m, 1h, 7d or 1h30m");
    };
    if (text == "0") return std::chrono::milliseconds(0);
    if (text.empty()) throw bad("it is empty");
    constexpr std::int64_t limit = std::int64_t(100) * 365 * 24 * 3600 * 1000;  // 100 years, in ms
    std::int64_t total = 0;
    std::size_t i = 0;
    while (i < text.size()) {
        std::int64_t n = 0;
        std::size_t digits = 0;
        for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
            n = n * 10 + (text[i] - '0');
            if (n > limit) throw bad("it is too long");
        }
        if (digits == 0) throw bad("expected a number at '" + std::string(text.substr(i)) + "'");
        std::size_t unit_start = i;
        while (i < text.size() && (text[i] < '0' || text[i] > '9')) ++i;
        auto unit = text.substr(unit_start, i - unit_start);
        std::int64_t ms_per = 0;
        if (unit == "ms") ms_per = 1;
        else if (unit == "s") ms_per = 1000;
        else if (unit == "m") ms_per = 60 * 1000;
        else if (unit == "h") ms_per = 3600 * 1000;
        else if (unit == "d") ms_per = 24 * 3600 * 1000;
        else if (unit.empty()) throw bad("the number " + std::to_string(n) + " has no unit");
        else throw bad("unknown unit '" + std::string(unit) + "'");
        if (n > (limit - total) / ms_per) throw bad("it is too long");
        total += n * ms_per;
    }
    return std::chrono::milliseconds(total);
}

/// The shortest text `parse_duration` reads back as `d` ("1h30m", "250ms", "0s").
[[nodiscard]] inline std::string format_duration(std::chrono::milliseconds d) {
    auto ms = d.count();
    if (ms == 0) return "0s";
    std::string out;
    if (ms < 0) {
        out = "-";
        ms = -ms;
    }
    struct unit {
        std::int64_t ms;
        char const* name;
    };
    for (auto [per, name] :
         {unit{86400000, "d"}, unit{3600000, "h"}, unit{60000, "m"}, unit{1000, "s"}, unit{1, "ms"}}) {
        if (ms >= per) {
            out += std::to_string(ms / per) + name;
            ms %= per;
        }
    }
    return out;
}

}  // namespace sqlock::tools
