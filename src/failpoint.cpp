#include "detail/failpoint.hpp"

#ifdef SQLOCK_FAILPOINTS

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>

namespace sqlock::detail {
namespace {

std::map<std::string, std::string, std::less<>> parse(char const* spec) {
    std::map<std::string, std::string, std::less<>> out;
    std::string_view rest = spec != nullptr ? spec : "";
    while (!rest.empty()) {
        auto item = rest.substr(0, rest.find(','));
        rest.remove_prefix(std::min(rest.size(), item.size() + 1));
        auto eq = item.find('=');
        if (eq != std::string_view::npos) out.emplace(item.substr(0, eq), item.substr(eq + 1));
    }
    return out;
}

auto const& points() {
    static auto const parsed = parse(std::getenv("SQLOCK_FAILPOINTS"));
    return parsed;
}

}  // namespace

std::optional<long long> failpoint_value(std::string_view name) noexcept {
    auto it = points().find(name);
    if (it == points().end() || !it->second.starts_with("value:")) return std::nullopt;
    return std::atoll(it->second.c_str() + 6);
}

void failpoint(std::string_view name) noexcept {
    auto it = points().find(name);
    if (it == points().end()) return;
    std::string_view action = it->second;
    if (action == "stop") {
        std::raise(SIGSTOP);
    } else if (action == "kill") {
        std::raise(SIGKILL);
    } else if (action.starts_with("sleep:")) {
        std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(std::string(action.substr(6)).c_str())));
    }
}

}  // namespace sqlock::detail

#endif
