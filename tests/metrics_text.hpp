// sqlock tests — reading the Prometheus text format back: what a scrape
// (curl, as an operator's Prometheus would) or a textfile says, as samples,
// and the value of one series by its name and some of its labels.
#pragma once

#include "run_command.hpp"

#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace sqlock_test {

struct text_sample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
};

/// The samples of a text exposition (HELP and TYPE lines skipped). Throws on a
/// line it cannot read: a malformed exposition fails the test that reads it.
inline std::vector<text_sample> parse_exposition(std::string const& text) {
    std::vector<text_sample> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        text_sample s;
        std::size_t i = line.find_first_of("{ ");
        if (i == std::string::npos) throw std::runtime_error("no value on the line: " + line);
        s.name = line.substr(0, i);
        if (line[i] == '{') {
            ++i;
            while (i < line.size() && line[i] != '}') {
                auto const eq = line.find('=', i);
                if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"')
                    throw std::runtime_error("bad label on the line: " + line);
                std::string key = line.substr(i, eq - i), value;
                std::size_t j = eq + 2;
                for (; j < line.size() && line[j] != '"'; ++j) {
                    if (line[j] == '\\' && j + 1 < line.size()) {
                        ++j;
                        value += line[j] == 'n' ? '\n' : line[j];
                    } else {
                        value += line[j];
                    }
                }
                if (j >= line.size()) throw std::runtime_error("unterminated label value on the line: " + line);
                s.labels[key] = value;
                i = j + 1;
                if (i < line.size() && line[i] == ',') ++i;
            }
            if (i >= line.size()) throw std::runtime_error("unterminated labels on the line: " + line);
            ++i;
        }
        auto const value = line.substr(i);
        try {
            s.value = std::stod(value);
        } catch (std::exception const&) {
            throw std::runtime_error("bad value on the line: " + line);
        }
        out.push_back(std::move(s));
    }
    return out;
}

/// The value of the one sample named `name` whose labels include `labels`;
/// empty when none is. Throws when several are (the test asked vaguely).
inline std::optional<double> value_of(std::vector<text_sample> const& samples, std::string const& name,
                                      std::map<std::string, std::string> const& labels = {}) {
    std::optional<double> found;
    for (auto const& s : samples) {
        if (s.name != name) continue;
        bool match = true;
        for (auto const& [k, v] : labels) {
            auto it = s.labels.find(k);
            match = match && it != s.labels.end() && it->second == v;
        }
        if (!match) continue;
        if (found) throw std::runtime_error("several samples of " + name + " match the labels asked");
        found = s.value;
    }
    return found;
}

/// GET `url` with curl (empty when it could not be fetched).
/// @throws std::runtime_error naming the package to install when curl is not on PATH.
inline std::string http_get(std::string const& url) {
    require_program("curl", "curl");
    std::string out;
    std::string const cmd = "curl -sf --max-time 20 '" + url + "'";
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
        char buf[4096];
        std::size_t n = 0;
        while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
        if (::pclose(p) != 0) return {};
    }
    return out;
}

}  // namespace sqlock_test
