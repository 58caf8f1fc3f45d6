// sqlock — metrics: what the lockers, stores, fences and reapers of a process
// have done, as counters, gauges and histograms named by Prometheus's
// conventions (docs/operations.md). No dependency: read them with
// `collect()`, or write the Prometheus text format with `write_text()`; the
// optional `sqlock::prometheus` component (<sqlock/prometheus.hpp>) hands them
// to prometheus-cpp.
//
//     auto m = std::make_shared<sqlock::metrics>(sqlock::metrics_options{.lock_names = {"nightly"}});
//     sqlock::store db{url, {.metrics = m}};  // its lockers, fences and reapers record into m
//     ...
//     m->write_text(std::cout);
#pragma once

#include <sqlock/export.hpp>

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sqlock {

namespace detail {
class metrics_impl;
}

/// How a family's samples are read (Prometheus's types).
enum class metric_type { counter, gauge, histogram };

/// One series of a family: its labels and its value, or a histogram's buckets.
struct SQLOCK_EXPORT metric_sample {
    std::vector<std::pair<std::string, std::string>> labels;  ///< name, value; in a fixed order
    double value = 0;                                         ///< a counter's or gauge's value
    /// A histogram's cumulative counts: buckets[i] observations were at most
    /// `metric_family::bounds[i]`; `count` is the +Inf bucket.
    std::vector<std::uint64_t> buckets;
    double sum = 0;           ///< a histogram's sum of observations (seconds)
    std::uint64_t count = 0;  ///< a histogram's number of observations
};

/// A metric: `sqlock_acquire_attempts_total`, its help text, type and series.
struct SQLOCK_EXPORT metric_family {
    std::string name;
    std::string help;
    metric_type type = metric_type::counter;
    std::vector<double> bounds;  ///< a histogram's bucket upper bounds, ascending, without +Inf
    std::vector<metric_sample> samples;
};

/// How a `metrics` labels what it records.
struct SQLOCK_EXPORT metrics_options {
    /// Lock names (semaphore, read-write lock and election names too) whose
    /// series carry a `lock` label. Every other name is summed into the series
    /// without one, so the number of series stays bounded whatever names a
    /// program uses. At most 1000 names, each a valid lock name.
    std::vector<std::string> lock_names;
    /// False: record nothing (collect() is empty), for a program that exports
    /// no metrics and wants to pay nothing for them (bench: `sqlock-grid cycle --metrics off`).
    bool enabled = true;
};

/// The metrics of the stores, lockers, fences and reapers that record into it.
/// Recording is a few relaxed atomic additions (no lock, no allocation); a
/// `collect()` reads them (each value atomically, the set not).
/// Thread safety: any thread.
class SQLOCK_EXPORT metrics {
public:
    /// @throws usage_error a name of `lock_names` is not a valid lock name, or there are over 1000
    explicit metrics(metrics_options options = {});
    ~metrics();
    metrics(metrics const&) = delete;
    metrics& operator=(metrics const&) = delete;

    /// The process-wide metrics, which every store, locker and fence records
    /// into unless given its own (`store_options::metrics`, `locker_options::metrics`).
    [[nodiscard]] static std::shared_ptr<metrics> const& global();

    /// Every family with a series, in a fixed order. A family appears once
    /// something was recorded in it; a series (engine, kind, lock) once it was used.
    [[nodiscard]] std::vector<metric_family> collect() const;

    /// `collect()` in the Prometheus text exposition format (version 0.0.4).
    void write_text(std::ostream& out) const;

    /// Internal: where the library records.
    [[nodiscard]] detail::metrics_impl& impl() const noexcept { return *impl_; }

private:
    std::unique_ptr<detail::metrics_impl> impl_;
};

/// Writes `families` in the Prometheus text exposition format (version 0.0.4):
/// `# HELP`, `# TYPE`, then each sample, label values and help escaped.
SQLOCK_EXPORT void write_text(std::ostream& out, std::vector<metric_family> const& families);

}  // namespace sqlock
