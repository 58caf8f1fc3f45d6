// The metrics' storage, their collection into families, and the Prometheus
// text format (https://prometheus.io/docs/instrumenting/exposition_formats/).
#include "detail/metrics.hpp"

#include "detail/locker_impl.hpp"

#include <sqlock/errors.hpp>

#include <charconv>
#include <cmath>
#include <limits>
#include <ostream>

namespace sqlock {
namespace detail {
namespace {

constexpr std::size_t max_lock_names = 1000;

constexpr std::array<char const*, engine_labels> engine_names{"postgresql", "mysql", "sqlite", "majority"};
constexpr std::array<char const*, kind_labels> kind_names{"table",     "row",          "majority", "semaphore",
                                                          "rw_shared", "rw_exclusive", "election"};
constexpr std::array<char const*, attempt_outcomes> outcome_names{"granted", "busy", "timeout", "cancelled", "error"};
constexpr std::array<char const*, loss_causes> cause_names{"expired", "refused", "max_hold", "session_ended"};

using labels = std::vector<std::pair<std::string, std::string>>;

metric_sample scalar(labels l, double value) {
    metric_sample s;
    s.labels = std::move(l);
    s.value = value;
    return s;
}

labels with(labels l, char const* name, std::string value) {
    l.emplace_back(name, std::move(value));
    return l;
}

std::vector<double> bounds() { return {duration_bounds.begin(), duration_bounds.end()}; }

double load(std::atomic<std::uint64_t> const& a) { return static_cast<double>(a.load(std::memory_order_relaxed)); }

}  // namespace

engine_label engine_label_of(sqlock::engine e) noexcept {
    switch (e) {
        case sqlock::engine::postgresql: return engine_label::postgresql;
        case sqlock::engine::mysql: return engine_label::mysql;
        case sqlock::engine::sqlite: return engine_label::sqlite;
    }
    return engine_label::sqlite;
}

void histogram::observe(std::chrono::steady_clock::duration d) noexcept {
    auto const ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    auto const seconds = static_cast<double>(ns) / 1e9;
    std::size_t bucket = 0;
    while (bucket < duration_bounds.size() && seconds > duration_bounds[bucket]) ++bucket;  // le: at most the bound
    counts[bucket].fetch_add(1, std::memory_order_relaxed);
    sum_ns.fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(ns, 0)), std::memory_order_relaxed);
}

metric_sample histogram::sample() const {
    metric_sample s;
    std::uint64_t running = 0;
    for (std::size_t i = 0; i < duration_bounds.size(); ++i) {
        running += counts[i].load(std::memory_order_relaxed);
        s.buckets.push_back(running);
    }
    s.count = running + counts.back().load(std::memory_order_relaxed);
    s.sum = static_cast<double>(sum_ns.load(std::memory_order_relaxed)) / 1e9;
    return s;
}

metrics_impl::metrics_impl(metrics_options options) : enabled_(options.enabled), names_(std::move(options.lock_names)) {
    if (names_.size() > max_lock_names)
        throw usage_error("sqlock: metrics_options::lock_names has " + std::to_string(names_.size()) +
                          " names: at most " + std::to_string(max_lock_names) +
                          " are allowed (each adds series; leave the rest summed)");
    for (std::size_t i = 0; i < names_.size(); ++i) {
        validate_name(names_[i]);
        index_.emplace(names_[i], i + 1);  // a repeated name keeps its first place
    }
    series_ = std::make_unique<series[]>((names_.size() + 1) * per_name);
}

series* metrics_impl::find(engine_label e, kind_label k, std::string_view name) noexcept {
    if (!enabled_) return nullptr;
    std::size_t slot = 0;
    if (!index_.empty()) {
        auto const base = name.substr(0, name.find(reserved_separator));
        if (auto it = index_.find(base); it != index_.end()) slot = it->second;
    }
    return &series_[slot * per_name + static_cast<std::size_t>(e) * kind_labels + static_cast<std::size_t>(k)];
}

void metrics_impl::fence_checked(engine_label e, bool accepted) noexcept {
    if (!enabled_) return;
    auto const i = static_cast<std::size_t>(e);
    fences_used_[i].store(true, std::memory_order_relaxed);
    fences_[i][accepted ? 0 : 1].fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t metrics_impl::add_store(std::string database, std::function<std::optional<double>()> offset_seconds) {
    if (!enabled_) return 0;
    std::lock_guard lock(mutex_);
    auto id = next_id_++;
    stores_.emplace(id, store_entry{std::move(database), std::move(offset_seconds)});
    return id;
}

void metrics_impl::remove_store(std::uint64_t id) noexcept {
    std::lock_guard lock(mutex_);
    stores_.erase(id);
}

std::vector<metric_family> metrics_impl::collect() const {
    metric_family attempts{"sqlock_acquire_attempts_total",
                           "Acquire attempts by outcome: granted, busy (found the lock held; every attempt of a "
                           "waiting acquire counts), and a waiting acquire's end by timeout or cancel; error when "
                           "the database could not answer.",
                           metric_type::counter,
                           {},
                           {}};
    metric_family attempt_time{"sqlock_acquire_duration_seconds",
                               "Time of one acquire attempt, granted or busy: the statements' round trips.",
                               metric_type::histogram,
                               bounds(),
                               {}};
    metric_family wait_time{"sqlock_acquire_wait_seconds",
                            "Time a waiting acquire took, from its call to its grant, timeout or cancel.",
                            metric_type::histogram,
                            bounds(),
                            {}};
    metric_family hold_time{"sqlock_hold_duration_seconds",
                            "Time a lease was held, from its grant to its release or loss.",
                            metric_type::histogram,
                            bounds(),
                            {}};
    metric_family renewals{"sqlock_renewals_total",
                           "Lease renewals by outcome: ok, or failed (the database could not be reached: the lease "
                           "is in doubt until a renewal succeeds or its validity runs out). A refused renewal is a "
                           "loss (sqlock_losses_total).",
                           metric_type::counter,
                           {},
                           {}};
    metric_family losses{"sqlock_losses_total",
                         "Leases lost, by cause: expired (validity ran out before a renewal succeeded), refused (the "
                         "database said the row is no longer ours), max_hold (the watchdog stopped renewing it), "
                         "session_ended (a row lock's session ended).",
                         metric_type::counter,
                         {},
                         {}};
    metric_family leases{"sqlock_leases",
                         "Leases this process holds, by state: held, or in_doubt (a renewal failed).",
                         metric_type::gauge,
                         {},
                         {}};
    metric_family waiters{
        "sqlock_waiters", "Waiting acquires in progress in this process.", metric_type::gauge, {}, {}};
    metric_family leader{"sqlock_leader",
                         "1 while this process leads the election (allow-listed names only, "
                         "metrics_options::lock_names), else 0.",
                         metric_type::gauge,
                         {},
                         {}};

    for (std::size_t slot = 0; slot <= names_.size(); ++slot) {
        for (std::size_t e = 0; e < engine_labels; ++e) {
            for (std::size_t k = 0; k < kind_labels; ++k) {
                auto const& s = series_[slot * per_name + e * kind_labels + k];
                if (!s.used.load(std::memory_order_relaxed)) continue;
                labels base{{"engine", engine_names[e]}, {"kind", kind_names[k]}};
                if (slot > 0) base.emplace_back("lock", names_[slot - 1]);
                for (std::size_t o = 0; o < attempt_outcomes; ++o)
                    attempts.samples.push_back(scalar(with(base, "outcome", outcome_names[o]), load(s.attempts[o])));
                for (auto [family, h] : {std::pair{&attempt_time, &s.attempt}, std::pair{&wait_time, &s.wait},
                                         std::pair{&hold_time, &s.hold}}) {
                    auto sample = h->sample();
                    sample.labels = base;
                    family->samples.push_back(std::move(sample));
                }
                renewals.samples.push_back(scalar(with(base, "outcome", "ok"), load(s.renewals[0])));
                renewals.samples.push_back(scalar(with(base, "outcome", "failed"), load(s.renewals[1])));
                for (std::size_t c = 0; c < loss_causes; ++c)
                    losses.samples.push_back(scalar(with(base, "cause", cause_names[c]), load(s.losses[c])));
                auto const live = s.leases.load(std::memory_order_relaxed);
                auto const doubt = s.in_doubt.load(std::memory_order_relaxed);
                leases.samples.push_back(scalar(with(base, "state", "held"), static_cast<double>(live - doubt)));
                leases.samples.push_back(scalar(with(base, "state", "in_doubt"), static_cast<double>(doubt)));
                waiters.samples.push_back(scalar(base, static_cast<double>(s.waiting.load(std::memory_order_relaxed))));
                if (slot > 0 && k == static_cast<std::size_t>(kind_label::election))
                    leader.samples.push_back(
                        scalar({{"engine", engine_names[e]}, {"election", names_[slot - 1]}}, live > 0 ? 1.0 : 0.0));
            }
        }
    }

    metric_family fences{"sqlock_fence_checks_total",
                         "Fencing-token checks on the resource side (fence::check_and_set), by result: accepted, or "
                         "rejected (a stale token: a newer lease had written).",
                         metric_type::counter,
                         {},
                         {}};
    metric_family passes{"sqlock_reaper_passes_total",
                         "Reaper passes, by outcome: ok, or failed (an error ended it).",
                         metric_type::counter,
                         {},
                         {}};
    metric_family purged{
        "sqlock_reaper_rows_purged_total", "Lock rows the reaper deleted.", metric_type::counter, {}, {}};
    metric_family live_purged{"sqlock_reaper_live_rows_purged_total",
                              "Of the purged rows, those still live (reaper_options::max_age): their holders lost "
                              "their leases.",
                              metric_type::counter,
                              {},
                              {}};
    metric_family tokens{"sqlock_reaper_token_counters_purged_total",
                         "Fencing-token counters the reaper deleted (reaper_options::token_horizon).",
                         metric_type::counter,
                         {},
                         {}};
    metric_family pass_time{
        "sqlock_reaper_pass_duration_seconds", "Time of one reaper pass.", metric_type::histogram, bounds(), {}};
    metric_family last_ok{"sqlock_reaper_last_success_timestamp_seconds",
                          "Unix time at which the last reaper pass completed.",
                          metric_type::gauge,
                          {},
                          {}};
    for (std::size_t e = 0; e < engine_labels; ++e) {
        labels base{{"engine", engine_names[e]}};
        if (fences_used_[e].load(std::memory_order_relaxed)) {
            fences.samples.push_back(scalar(with(base, "result", "accepted"), load(fences_[e][0])));
            fences.samples.push_back(scalar(with(base, "result", "rejected"), load(fences_[e][1])));
        }
        auto const& r = reapers_[e];
        if (!r.used.load(std::memory_order_relaxed)) continue;
        passes.samples.push_back(scalar(with(base, "outcome", "ok"), load(r.passes)));
        passes.samples.push_back(scalar(with(base, "outcome", "failed"), load(r.failures)));
        purged.samples.push_back(scalar(base, load(r.rows)));
        live_purged.samples.push_back(scalar(base, load(r.live_rows)));
        tokens.samples.push_back(scalar(base, load(r.tokens)));
        auto sample = r.duration.sample();
        sample.labels = base;
        pass_time.samples.push_back(std::move(sample));
        if (auto const us = r.last_success_us.load(std::memory_order_relaxed); us > 0)
            last_ok.samples.push_back(scalar(base, static_cast<double>(us) / 1e6));
    }

    metric_family offset{"sqlock_clock_offset_seconds",
                         "Estimated offset of the database's clock from this host's (database minus host), from the "
                         "timestamps acquires and renewals return.",
                         metric_type::gauge,
                         {},
                         {}};
    {
        std::lock_guard lock(mutex_);
        for (auto const& [id, s] : stores_)
            if (auto v = s.offset()) offset.samples.push_back(scalar({{"database", s.database}}, *v));
    }
    std::vector<metric_family> all;
    for (auto* f : {&attempts, &attempt_time, &wait_time, &hold_time, &renewals, &losses, &leases, &waiters, &leader,
                    &fences, &passes, &purged, &live_purged, &tokens, &pass_time, &last_ok, &offset})
        if (!f->samples.empty()) all.push_back(std::move(*f));
    return all;
}

std::shared_ptr<metrics> metrics_or_global(std::shared_ptr<metrics> const& m) { return m ? m : metrics::global(); }

namespace {

void write_number(std::ostream& out, double v) {
    if (std::isnan(v)) {
        out << "NaN";
    } else if (std::isinf(v)) {
        out << (v > 0 ? "+Inf" : "-Inf");
    } else {
        char buf[32];
        auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
        out.write(buf, end - buf);
    }
}

void write_escaped(std::ostream& out, std::string_view s, bool quote) {
    for (char c : s) {
        if (c == '\\') {
            out << "\\\\";
        } else if (c == '\n') {
            out << "\\n";
        } else if (quote && c == '"') {
            out << "\\\"";
        } else {
            out << c;
        }
    }
}

void write_labels(std::ostream& out, labels const& l, char const* le = nullptr, double bound = 0) {
    if (l.empty() && le == nullptr) return;
    out << '{';
    bool first = true;
    for (auto const& [name, value] : l) {
        if (!first) out << ',';
        first = false;
        out << name << "=\"";
        write_escaped(out, value, true);
        out << '"';
    }
    if (le != nullptr) {
        if (!first) out << ',';
        out << le << "=\"";
        write_number(out, bound);
        out << '"';
    }
    out << '}';
}

}  // namespace
}  // namespace detail

metrics::metrics(metrics_options options) : impl_(std::make_unique<detail::metrics_impl>(std::move(options))) {}
metrics::~metrics() = default;

std::shared_ptr<metrics> const& metrics::global() {
    static auto const instance = std::make_shared<metrics>();
    return instance;
}

std::vector<metric_family> metrics::collect() const { return impl_->collect(); }

void metrics::write_text(std::ostream& out) const { sqlock::write_text(out, collect()); }

void write_text(std::ostream& out, std::vector<metric_family> const& families) {
    for (auto const& f : families) {
        out << "# HELP " << f.name << ' ';
        detail::write_escaped(out, f.help, false);
        out << "\n# TYPE " << f.name << ' '
            << (f.type == metric_type::counter ? "counter"
                : f.type == metric_type::gauge ? "gauge"
                                               : "histogram")
            << '\n';
        for (auto const& s : f.samples) {
            if (f.type != metric_type::histogram) {
                out << f.name;
                detail::write_labels(out, s.labels);
                out << ' ';
                detail::write_number(out, s.value);
                out << '\n';
                continue;
            }
            for (std::size_t i = 0; i < f.bounds.size() && i < s.buckets.size(); ++i) {
                out << f.name << "_bucket";
                detail::write_labels(out, s.labels, "le", f.bounds[i]);
                out << ' ' << s.buckets[i] << '\n';
            }
            out << f.name << "_bucket";
            detail::write_labels(out, s.labels, "le", std::numeric_limits<double>::infinity());
            out << ' ' << s.count << '\n' << f.name << "_sum";
            detail::write_labels(out, s.labels);
            out << ' ';
            detail::write_number(out, s.sum);
            out << '\n' << f.name << "_count";
            detail::write_labels(out, s.labels);
            out << ' ' << s.count << '\n';
        }
    }
}

}  // namespace sqlock
