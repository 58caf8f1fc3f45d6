// sqlock reliability battery — reading recorded histories (tests/faults/history.hpp).
#include "history.hpp"

#include <fstream>

namespace sqlock_battery {
namespace {

bool looks_like_event(nlohmann::json const& j) {
    return j.is_object() && j.contains("op") && j.contains("type") && j.contains("mono_ns");
}

std::optional<event> parse_event(std::string const& text) {
    auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !looks_like_event(j)) return std::nullopt;
    try {
        return from_json(j);
    } catch (nlohmann::json::exception const&) {
        return std::nullopt;  // a field of the wrong type
    }
}

// A writer killed in the middle of its write() leaves a fragment without a newline; the next writer of the same
// file (another process, or the restarted worker) appends its own complete line right after it. The complete
// event is the shortest suffix of the line that parses: a suffix starting inside the fragment would carry the
// fragment's unbalanced rest, and one starting inside the complete event would end unbalanced.
std::optional<event> parse_after_fragment(std::string const& line) {
    for (std::size_t p = line.find('{', 1); p != std::string::npos; p = line.find('{', p + 1)) {
        if (auto e = parse_event(line.substr(p))) return e;
    }
    return std::nullopt;
}

}  // namespace

std::vector<event> read_history(std::string const& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::invalid_argument("history: cannot open " + path + " for reading");
    std::vector<event> events;
    std::string line;
    std::size_t number = 0;
    while (std::getline(in, line)) {
        ++number;
        bool const terminated = !in.eof();  // getline stopped at a '\n', not at the end of the file
        if (line.empty()) continue;
        if (auto e = parse_event(line)) {
            events.push_back(std::move(*e));
            continue;
        }
        if (!terminated) break;  // the torn last line of a writer killed mid-write: never written
        if (auto e = parse_after_fragment(line)) {
            events.push_back(std::move(*e));
            continue;
        }
        throw std::invalid_argument("history: " + path + ":" + std::to_string(number) +
                                    " is neither an event line nor a torn line followed by one; the file is not "
                                    "a battery history (tests/faults/README.md describes the format)");
    }
    return events;
}

}  // namespace sqlock_battery
