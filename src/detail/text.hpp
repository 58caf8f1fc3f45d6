// Internal: text helpers shared by the library's messages.
#pragma once

#include <string>
#include <string_view>

namespace sqlock::detail {

/// An engine's message on one line (libpq's span several, indented with tabs).
[[nodiscard]] inline std::string one_line(std::string_view text) {
    std::string out;
    bool space = false;
    for (char c : text) {
        bool const blank = c == '\n' || c == '\t' || c == '\r' || c == ' ';
        if (blank) {
            space = !out.empty();
            continue;
        }
        if (space) out += ' ';
        space = false;
        out += c;
    }
    return out;
}

}  // namespace sqlock::detail
