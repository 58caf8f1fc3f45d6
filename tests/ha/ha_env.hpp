// sqlock tests — where a replicated topology of tests/ha/ is: the env.sh its script in scripts/ha/ wrote.
#pragma once

#include "test_env.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

namespace sqlock_test {

/// The variables of `<dir>/env.sh` (lines `export KEY=VALUE`, values written without quotes), or an empty map
/// if the file is missing. The topology's ctest fixture (ha_<name>_start) writes it before any test runs.
inline std::map<std::string, std::string> read_ha_env(std::string const& dir) {
    std::map<std::string, std::string> vars;
    std::ifstream in(dir + "/env.sh");
    for (std::string line; std::getline(in, line);) {
        if (line.starts_with("export ")) line.erase(0, 7);
        auto const eq = line.find('=');
        if (line.empty() || line.front() == '#' || eq == std::string::npos) continue;
        vars[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return vars;
}

/// A fixture base for one topology: `env` holds its variables. With no env.sh (the topology did not start), the
/// test fails under CI=true and is skipped otherwise, naming the script to run.
class HaTest : public ::testing::Test {
protected:
    void require_topology(std::string const& dir, std::string const& script) {
        env = read_ha_env(dir);
        if (!env.empty()) return;
        std::string const why = "no " + dir + "/env.sh: the topology did not start (SQLOCK_HA_DIR=" + dir +
                                " bash scripts/ha/" + script + " start, or ctest -L ha)";
        if (in_ci()) FAIL() << why;
        GTEST_SKIP() << why;
    }

    /// The variable, failing the test if the topology's env.sh does not define it.
    std::string var(std::string const& key) const {
        auto const it = env.find(key);
        if (it == env.end()) ADD_FAILURE() << "the topology's env.sh defines no " << key;
        return it == env.end() ? std::string() : it->second;
    }

    std::map<std::string, std::string> env;
};

}  // namespace sqlock_test
