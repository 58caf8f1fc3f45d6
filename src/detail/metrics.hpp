// Internal: where the library records its metrics (include/sqlock/metrics.hpp).
// Fixed arrays of atomics, indexed by engine, kind and outcome, and one
// series per allow-listed lock name: recording looks nothing up but an
// allow-listed name, in a map that never changes after construction.
#pragma once

#include <sqlock/metrics.hpp>
#include <sqlock/store.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sqlock::detail {

/// The `engine` label: a store's engine, or a majority over several.
enum class engine_label : std::uint8_t { postgresql, mysql, sqlite, majority };
inline constexpr std::size_t engine_labels = 4;
/// The `kind` label: what took the lease.
enum class kind_label : std::uint8_t { table, row, majority, semaphore, rw_shared, rw_exclusive, election };
inline constexpr std::size_t kind_labels = 7;
/// The `outcome` of an acquire attempt (a waiting acquire's end: timeout, cancelled).
enum class attempt_outcome : std::uint8_t { granted, busy, timeout, cancelled, error };
inline constexpr std::size_t attempt_outcomes = 5;
/// The `cause` of a lost lease.
enum class loss_cause : std::uint8_t { expired, refused, max_hold, session_ended };
inline constexpr std::size_t loss_causes = 4;

[[nodiscard]] engine_label engine_label_of(sqlock::engine e) noexcept;

/// Bucket bounds in seconds, shared by every duration histogram: 0.5 ms .. 10 min.
inline constexpr std::array<double, 16> duration_bounds{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                        0.25,   0.5,   1,      2.5,   10,   30,    120,  600};

struct histogram {
    std::array<std::atomic<std::uint64_t>, duration_bounds.size() + 1> counts{};  // per bucket, not cumulative
    std::atomic<std::uint64_t> sum_ns{0};
    void observe(std::chrono::steady_clock::duration d) noexcept;
    [[nodiscard]] metric_sample sample() const;
};

/// The series of one engine, kind and lock name (or of every other name).
struct series {
    std::atomic<bool> used{false};  // shown once anything was recorded
    std::array<std::atomic<std::uint64_t>, attempt_outcomes> attempts{};
    histogram attempt;  // one attempt's round trip(s)
    histogram wait;     // a waiting acquire, from its call to its grant, timeout or cancel
    histogram hold;     // a lease, from its grant to its release or loss
    std::array<std::atomic<std::uint64_t>, 2> renewals{};  // ok, failed (unreachable: in doubt)
    std::array<std::atomic<std::uint64_t>, loss_causes> losses{};
    std::atomic<std::int64_t> leases{0};    // granted and not yet released or lost
    std::atomic<std::int64_t> in_doubt{0};  // of those, in doubt
    std::atomic<std::int64_t> waiting{0};   // waiting acquires in progress

    void touch() noexcept {
        if (!used.load(std::memory_order_relaxed)) used.store(true, std::memory_order_relaxed);
    }
    void count(attempt_outcome o) noexcept {
        touch();
        attempts[static_cast<std::size_t>(o)].fetch_add(1, std::memory_order_relaxed);
    }
};

/// What the reaper passes of one engine recorded.
struct reaper_series {
    std::atomic<bool> used{false};
    std::atomic<std::uint64_t> passes{0}, failures{0}, rows{0}, live_rows{0}, tokens{0};
    std::atomic<std::int64_t> last_success_us{0};  // unix time of the last pass that completed
    histogram duration;
};

class metrics_impl {
public:
    explicit metrics_impl(metrics_options options);

    /// The series of `name` (its part before U+001F, for a permit or a shared
    /// lease) when allow-listed, or of every other name; null when disabled.
    [[nodiscard]] series* find(engine_label e, kind_label k, std::string_view name) noexcept;

    void fence_checked(engine_label e, bool accepted) noexcept;
    /// A reaper's series; null when disabled.
    [[nodiscard]] reaper_series* reaper(engine_label e) noexcept {
        return enabled_ ? &reapers_[static_cast<std::size_t>(e)] : nullptr;
    }

    /// A store's clock offset, read at each collect while the store lives.
    std::uint64_t add_store(std::string database, std::function<std::optional<double>()> offset_seconds);
    void remove_store(std::uint64_t id) noexcept;

    [[nodiscard]] std::vector<metric_family> collect() const;

private:
    static constexpr std::size_t per_name = engine_labels * kind_labels;
    bool enabled_;
    std::vector<std::string> names_;                           // allow-list, in the caller's order
    std::unordered_map<std::string_view, std::size_t> index_;  // name -> 1 + position in names_
    std::unique_ptr<series[]> series_;                         // (1 + names) * per_name
    std::array<std::array<std::atomic<std::uint64_t>, 2>, engine_labels> fences_{};  // accepted, rejected
    std::array<std::atomic<bool>, engine_labels> fences_used_{};
    std::array<reaper_series, engine_labels> reapers_{};

    mutable std::mutex mutex_;  // stores_, next_id_
    std::uint64_t next_id_ = 1;
    struct store_entry {
        std::string database;
        std::function<std::optional<double>()> offset;
    };
    std::map<std::uint64_t, store_entry> stores_;
};

/// The metrics a store's objects record into: its own, or the process's.
[[nodiscard]] std::shared_ptr<metrics> metrics_or_global(std::shared_ptr<metrics> const& m);

}  // namespace sqlock::detail
