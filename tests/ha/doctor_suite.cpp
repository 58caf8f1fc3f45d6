// sqlock tests — `sqlock doctor` on the replicated topologies (issue 20): the findings each topology must
// trip, from --json parsed with nlohmann. DoctorGalera (fixture ha_galera), DoctorPatroni (ha_patroni,
// synchronous_mode), DoctorPatroniAsync (ha_patroni_async), DoctorPgBouncer (ha_pgbouncer).
#include "../cli_process.hpp"
#include "ha_env.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#ifndef SQLOCK_HA_BUILD_DIR
#error "SQLOCK_HA_BUILD_DIR (<build>/ha, where the topologies write env.sh) must be defined by the build"
#endif

namespace {

using namespace sqlock_test;
using json = nlohmann::json;

/// The exit code doctor owes for its worst severity.
int code_of(json const& worst) { return worst == "error" ? 2 : worst == "warning" ? 1 : 0; }

std::string topology_dir(std::string const& name) { return std::string(SQLOCK_HA_BUILD_DIR) + "/" + name; }

class DoctorHa : public HaTest {
protected:
    struct result {
        cli_result run;
        json out;
        /// Whether database `db` has a finding of `check` with `severity` whose message holds `text`.
        bool has(std::string const& check, std::string const& severity, std::string const& text = "",
                 std::size_t db = 0) const {
            for (auto const& f : out["databases"][db]["findings"])
                if (f["check"] == check && f["severity"] == severity &&
                    f["message"].get<std::string>().find(text) != std::string::npos)
                    return true;
            return false;
        }
        std::string describe() const { return run.describe(); }
    };

    /// Each Patroni node alone (SQLOCK_HA_PG_NODE_URL1..3): the multi-host URL is the library's to follow.
    std::vector<std::string> nodes() const {
        std::vector<std::string> urls;
        for (int i = 1; i <= 3; ++i) urls.push_back(var("SQLOCK_HA_PG_NODE_URL" + std::to_string(i)));
        return urls;
    }

    /// `sqlock doctor --db URL... --json`, parsed.
    result doctor(std::vector<std::string> const& urls) {
        std::vector<std::string> args{"doctor", "--json"};
        for (auto const& u : urls) args.insert(args.end(), {"--db", u});
        result r{cli_process(args, files_.path()).wait(), {}};
        try {
            r.out = json::parse(r.run.out);
        } catch (json::exception const& e) {
            ADD_FAILURE() << "no JSON (" << e.what() << "): " << r.describe();
        }
        return r;
    }

    temp_dir files_;
};

// ------------------------------------------------------------------ Patroni, synchronous_mode

class DoctorPatroni : public DoctorHa {
protected:
    void SetUp() override { require_topology(topology_dir("patroni"), "patroni.sh"); }
};

TEST_F(DoctorPatroni, LeaderIsSynchronousAndTheStandbysAreErrors) {
    auto r = doctor(nodes());
    std::vector<std::size_t> leaders;
    for (std::size_t i = 0; i < 3; ++i) {
        if (r.has("replication", "error", "standby", i)) continue;
        leaders.push_back(i);
        EXPECT_TRUE(r.has("replication", "ok", "synchronous replication", i)) << r.describe();
        EXPECT_FALSE(r.has("replication", "warning", "asynchronous", i)) << r.describe();
    }
    EXPECT_EQ(leaders.size(), 1u) << "one leader, two standbys: " << r.describe();
    EXPECT_EQ(r.run.code(), 2) << r.describe();
}

TEST_F(DoctorPatroni, HaproxyInFrontOfTheLeaderIsSeen) {
    auto r = doctor({var("SQLOCK_HA_HAPROXY_URL")});
    EXPECT_TRUE(r.has("pooler", "info", "proxy or pooler")) << r.describe();
    EXPECT_FALSE(r.has("replication", "error", "standby")) << r.describe();
}

// ------------------------------------------------------------------ Patroni, asynchronous

class DoctorPatroniAsync : public DoctorHa {
protected:
    void SetUp() override { require_topology(topology_dir("patroni_async"), "patroni.sh"); }
};

TEST_F(DoctorPatroniAsync, AsynchronousReplicationIsAWarningOnTheLeader) {
    auto r = doctor(nodes());
    int leaders = 0;
    for (std::size_t i = 0; i < 3; ++i) {
        if (r.has("replication", "error", "standby", i)) continue;
        ++leaders;
        EXPECT_TRUE(r.has("replication", "warning", "asynchronous replication", i)) << r.describe();
    }
    EXPECT_EQ(leaders, 1) << r.describe();
    EXPECT_EQ(r.run.code(), 2) << r.describe();
}

// ------------------------------------------------------------------ Galera

class DoctorGalera : public DoctorHa {
protected:
    void SetUp() override { require_topology(topology_dir("galera"), "galera.sh"); }
};

TEST_F(DoctorGalera, EveryNodeIsSyncedAndTheRowLockNeedsASingleWriter) {
    std::vector<std::string> nodes;
    for (int i = 1; i <= 3; ++i) nodes.push_back(var("SQLOCK_HA_GALERA_URL" + std::to_string(i)));
    auto r = doctor(nodes);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        EXPECT_TRUE(r.has("galera", "ok", "Synced, in the primary component of 3 nodes", i)) << r.describe();
        EXPECT_TRUE(r.has("galera", "warning", "galera_single_writer", i) ||
                    r.has("galera", "warning", "single writer", i))
            << r.describe();
    }
    EXPECT_EQ(r.run.code(), code_of(r.out["worst"])) << r.describe();
}

// ------------------------------------------------------------------ PgBouncer

class DoctorPgBouncer : public DoctorHa {
protected:
    void SetUp() override { require_topology(topology_dir("pgbouncer"), "pgbouncer.sh"); }
};

TEST_F(DoctorPgBouncer, TransactionPoolingIsAnErrorSessionPoolingIsAProxy) {
    auto r = doctor({var("SQLOCK_HA_PGBOUNCER_TRANSACTION_URL"), var("SQLOCK_HA_PGBOUNCER_SESSION_URL"),
                     var("SQLOCK_HA_PGBOUNCER_DIRECT_URL")});
    EXPECT_TRUE(r.has("pooler", "error", "served by one server session", 0)) << r.describe();
    EXPECT_TRUE(r.has("pooler", "info", "proxy or pooler", 1)) << r.describe();
    EXPECT_FALSE(r.has("pooler", "error", "", 1)) << r.describe();
    EXPECT_TRUE(r.has("pooler", "ok", "directly", 2)) << r.describe();
    EXPECT_EQ(r.run.code(), 2) << r.describe();
}

}  // namespace
