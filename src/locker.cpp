#include "detail/access.hpp"
#include "detail/failpoint.hpp"
#include "detail/locker_impl.hpp"
#include "detail/process.hpp"
#include "detail/store_impl.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/locker.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>

namespace sqlock {

std::string_view to_string(lease_event::kind k) noexcept {
    switch (k) {
        case lease_event::kind::acquired: return "acquired";
        case lease_event::kind::busy: return "busy";
        case lease_event::kind::timeout: return "timeout";
        case lease_event::kind::cancelled: return "cancelled";
        case lease_event::kind::renewed: return "renewed";
        case lease_event::kind::renew_failed: return "renew_failed";
        case lease_event::kind::lost: return "lost";
        case lease_event::kind::released: return "released";
    }
    return "unknown";
}

namespace detail {
namespace {

constexpr std::size_t max_name_bytes = 255;
constexpr auto min_ttl = std::chrono::milliseconds(10);
constexpr auto max_ttl = std::chrono::hours(24 * 7);

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool valid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        auto c = static_cast<unsigned char>(s[i]);
        std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || i + len > s.size()) return false;
        std::uint32_t cp = len == 1 ? c : c & (0x7Fu >> len);
        for (std::size_t k = 1; k < len; ++k) {
            auto cc = static_cast<unsigned char>(s[i + k]);
            if ((cc & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3Fu);
        }
        constexpr std::uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_for_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

void validate_text(std::string_view what, std::string_view value) {
    if (value.empty()) throw usage_error("sqlock: the " + std::string(what) + " is empty: give 1 to 255 bytes");
    if (value.size() > max_name_bytes)
        throw usage_error("sqlock: the " + std::string(what) + " is " + std::to_string(value.size()) +
                          " bytes long: at most 255 bytes are allowed (hash longer keys)");
    if (value.find('\0') != std::string_view::npos)
        throw usage_error("sqlock: the " + std::string(what) + " contains a NUL byte: use text without NUL");
    if (!valid_utf8(value))
        throw usage_error("sqlock: the " + std::string(what) + " is not valid UTF-8: encode it as UTF-8 (or hex)");
    if (value.find(reserved_separator) != std::string_view::npos)
        throw usage_error("sqlock: the " + std::string(what) +
                          " contains U+001F (unit separator), which sqlock keeps for its own rows "
                          "(semaphore permits, shared leases, leaders' values): use another character");
}

std::string hostname() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
    return std::string(buf).substr(0, 64);
}

template <class Duration>
auto jitter(Duration ceiling) {
    // Timing only, but reseeded in a forked child, so that parent and child do not retry in step.
    thread_local std::mt19937_64 rng;
    thread_local pid_t seeded_for = 0;
    if (seeded_for != process_id()) {
        rng.seed(random_bits());
        seeded_for = process_id();
    }
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(ceiling).count();
    return std::chrono::microseconds(std::uniform_int_distribution<long long>(0, std::max<long long>(us, 0))(rng));
}

}  // namespace

void validate_name(std::string_view name) { validate_text("lock name", name); }

void validate_row_name(std::string_view name) {
    std::string plain(name);
    std::replace(plain.begin(), plain.end(), reserved_separator, '_');
    validate_text("lock name", plain);
}

void validate_name(std::string_view name, std::size_t suffix_bytes, std::string_view what) {
    validate_text(what, name);
    if (name.size() + suffix_bytes > max_name_bytes)
        throw usage_error("sqlock: the " + std::string(what) + " is " + std::to_string(name.size()) +
                          " bytes long: at most " + std::to_string(max_name_bytes - suffix_bytes) +
                          " bytes are allowed (sqlock appends " + std::to_string(suffix_bytes) +
                          " bytes for its own rows; hash longer keys)");
}

void validate_ttl(std::chrono::milliseconds ttl) {
    if (ttl < min_ttl || ttl > max_ttl)
        throw usage_error("sqlock: ttl " + std::to_string(ttl.count()) +
                          " ms is out of range: use 10 ms to 7 days (renew to hold longer)");
}

locker_impl::locker_impl(locker_options options, std::shared_ptr<metrics> store_metrics, engine_label engine,
                         kind_label kind)
    : options_(std::move(options)),
      host_(hostname()),
      metrics_(metrics_or_global(options_.metrics ? options_.metrics : std::move(store_metrics))),
      engine_(engine),
      kind_(kind) {
    validate_ttl(options_.ttl);
    if (!options_.owner.empty()) validate_text("owner", options_.owner);
    if (options_.backoff_min <= std::chrono::milliseconds::zero() || options_.backoff_max < options_.backoff_min)
        throw usage_error("sqlock: backoff_min must be positive and backoff_max at least backoff_min");
    if (options_.max_hold != std::chrono::milliseconds::zero() && options_.max_hold < options_.ttl)
        throw usage_error("sqlock: max_hold " + std::to_string(options_.max_hold.count()) + " ms is below the ttl (" +
                          std::to_string(options_.ttl.count()) + " ms): use 0 for no limit, or at least the ttl");
    char id[17];
    std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(random_bits()));
    instance_ = id;
}

locker_impl::~locker_impl() {
    // The last reference may be dropped by a renewer thread itself (it briefly
    // owns a row, which owns its locker): it cannot join itself.
    auto detach_self = [](std::jthread& t) {
        if (t.joinable() && t.get_id() == std::this_thread::get_id()) {
            t.request_stop();
            t.detach();
        }
    };
    detach_self(watchdog_);
    for (auto& t : renewers_) detach_self(t);
    watch_->renew_cv.notify_all();
}

std::int64_t locker_impl::new_attempt_id() {
    // Tests force two processes to draw the same id: a grant must not rest on it.
    if (auto fixed = SQLOCK_FAILPOINT_VALUE("acquire.attempt_id")) return *fixed;
    // Positive and never 0 (the column's default).
    return static_cast<std::int64_t>(random_bits() >> 1) | 1;
}

std::string locker_impl::owner_for_this_thread() const {
    if (!options_.owner.empty()) return options_.owner;
    // The pid at call time, so a forked child is a different owner.
    return host_ + "/" + std::to_string(process_id()) + "/" + instance_ + "/" + std::to_string(thread_id());
}

locker_impl::clock::time_point locker_impl::valid_until(clock::time_point sent,
                                                        std::chrono::milliseconds ttl) noexcept {
    // Redlock's margin: 1 % of the TTL for clock-rate drift, plus 1 ms.
    auto drift = ttl / 100 + std::chrono::milliseconds(1);
    return sent + ttl - drift;
}

std::optional<lease> locker_impl::try_acquire(std::string const& name) {
    return try_acquire(name, attempt{clock::now(), {}});
}

std::optional<lease> locker_impl::try_acquire(std::string const& name, attempt const& bounds) {
    return try_acquire_as(name, owner_for_this_thread(), bounds);
}

lease locker_impl::acquire(std::string const& name, std::chrono::milliseconds wait, std::stop_token cancel) {
    return wait_for(name, "lock '" + name + "'", wait, cancel,
                    [&](attempt const& bounds) { return try_acquire(name, bounds); });
}

lease locker_impl::wait_for(std::string const& name, std::string const& what, std::chrono::milliseconds wait,
                            std::stop_token const& cancel,
                            std::function<std::optional<lease>(attempt const&)> const& attempt_once,
                            std::function<std::string()> const& wake_on, std::optional<kind_label> kind) {
    auto const start = clock::now();
    auto* const s = series_for(kind, name);
    // A waiter from its call to its grant, timeout, cancel or error (sqlock_waiters).
    struct waiting {
        series* s;
        explicit waiting(series* to) : s(to) {
            if (s != nullptr) s->waiting.fetch_add(1, std::memory_order_relaxed);
        }
        ~waiting() {
            if (s != nullptr) s->waiting.fetch_sub(1, std::memory_order_relaxed);
        }
        waiting(waiting const&) = delete;
        waiting& operator=(waiting const&) = delete;
    } const counted_waiter(s);
    auto ended = [&](attempt_outcome o) {
        auto const waited = clock::now() - start;
        record_wait(waited);
        if (s == nullptr) return;
        s->count(o);
        s->wait.observe(waited);
    };
    auto const deadline = deadline_after(wait);  // milliseconds::max() waits for ever, without overflow
    auto ceiling = std::chrono::duration_cast<clock::duration>(options_.backoff_min);
    auto const cap = std::chrono::duration_cast<clock::duration>(options_.backoff_max);
    for (;;) {
        if (cancel.stop_requested()) {
            counters_.cancelled.fetch_add(1, std::memory_order_relaxed);
            ended(attempt_outcome::cancelled);
            emit(lease_event::kind::cancelled, name, 0);
            throw cancelled("sqlock: waiting for " + what + " was cancelled");
        }
        // Read the generation before trying, so a release between the attempt
        // and the wait is not missed.
        auto const wake_name = wake_on ? wake_on() : name;
        auto generation = release_generation(wake_name);
        if (auto got = attempt_once(attempt{deadline, cancel, kind})) {
            auto const waited = clock::now() - start;
            record_wait(waited);
            if (s != nullptr) s->wait.observe(waited);  // the grant was counted by the attempt
            return std::move(*got);
        }
        auto now = clock::now();
        if (now >= deadline) {
            counters_.timeouts.fetch_add(1, std::memory_order_relaxed);
            ended(attempt_outcome::timeout);
            emit(lease_event::kind::timeout, name, 0);
            throw timeout("sqlock: " + what + " was still held by another owner after waiting " +
                          std::to_string(wait.count()) + " ms: retry later or wait longer");
        }
        auto until = std::min<clock::time_point>(now + jitter(ceiling), deadline);
        ceiling = std::min(ceiling * 2, cap);
        wait_for_release(wake_name, generation, until, cancel);
    }
}

template <class Grant>
std::optional<lease> locker_impl::counted_attempt(std::string const& name, std::optional<kind_label> kind,
                                                  Grant&& grant) {
    auto* const s = series_for(kind, name);  // null: metrics disabled, and no clock read for them
    auto const start = s != nullptr ? clock::now() : clock::time_point{};
    auto const counted = [&](attempt_outcome o) {
        if (s == nullptr) return;
        s->attempt.observe(clock::now() - start);
        s->count(o);
    };
    std::shared_ptr<lease_row> row;
    try {
        row = grant();
    } catch (...) {
        counted(attempt_outcome::error);
        throw;
    }
    if (!row) {
        counted(attempt_outcome::busy);
        counters_.busy.fetch_add(1, std::memory_order_relaxed);
        emit(lease_event::kind::busy, name, 0);
        return std::nullopt;
    }
    if (s != nullptr) s->attempt.observe(clock::now() - start);
    return adopt(std::move(row), s);  // the attempt's series: a permit's or reader's row counts under its name
}

std::optional<lease> locker_impl::try_acquire_as(std::string const& name, std::string const& owner,
                                                 attempt const& bounds) {
    return counted_attempt(name, bounds.kind, [&] { return acquire_row(name, owner, bounds); });
}

std::optional<lease> locker_impl::try_acquire_shared(std::string const& gate, std::string const& reader,
                                                     attempt const& bounds) {
    return counted_attempt(gate, kind_label::rw_shared, [&] { return acquire_shared_row(gate, reader, bounds); });
}

lease locker_impl::adopt(std::shared_ptr<lease_row> row, series* s) {
    if (s != nullptr) {
        s->count(attempt_outcome::granted);
        row->count_in(s);
    }
    watch(row);
    counters_.acquired.fetch_add(1, std::memory_order_relaxed);
    emit(lease_event::kind::acquired, row->name(), row->token());
    return detail::access::make_lease(std::move(row));
}

std::shared_ptr<lease_row> locker_impl::acquire_shared_row(std::string const&, std::string const&, attempt const&) {
    throw usage_error("sqlock: shared leases need a table locker");
}

void locker_impl::record_wait(clock::duration waited) noexcept {
    std::size_t bucket = 0;
    while (bucket < locker_stats::wait_bounds.size() && waited >= locker_stats::wait_bounds[bucket]) ++bucket;
    counters_.waits[bucket].fetch_add(1, std::memory_order_relaxed);
}

locker_stats locker_impl::stats() const noexcept {
    locker_stats s;
    s.acquired = counters_.acquired.load();
    s.busy = counters_.busy.load();
    s.timeouts = counters_.timeouts.load();
    s.cancelled = counters_.cancelled.load();
    s.renewed = counters_.renewed.load();
    s.renew_failures = counters_.renew_failures.load();
    s.lost = counters_.lost.load();
    s.released = counters_.released.load();
    for (std::size_t i = 0; i < s.wait_histogram.size(); ++i) s.wait_histogram[i] = counters_.waits[i].load();
    return s;
}

void locker_impl::emit(lease_event::kind what, std::string_view name, std::int64_t token,
                       std::string_view detail) noexcept {
    if (!options_.on_event) return;
    try {
        options_.on_event(lease_event{what, name, token, detail});
    } catch (...) {  // a logging hook must not break locking
    }
}

void locker_impl::on_released(lease_row const& row, bool last) noexcept {
    counters_.released.fetch_add(1, std::memory_order_relaxed);
    if (last) announce_release(row.name());
    emit(lease_event::kind::released, row.name(), row.token(), last ? "" : "one hold of several");
}

void locker_impl::on_reentered(lease_row const& row) noexcept {
    counters_.acquired.fetch_add(1, std::memory_order_relaxed);
    if (auto* s = row.metric_series()) s->count(attempt_outcome::granted);
    emit(lease_event::kind::acquired, row.name(), row.token(), "reentrant hold");
}

void locker_impl::on_renewed(lease_row const& row) noexcept {
    counters_.renewed.fetch_add(1, std::memory_order_relaxed);
    if (auto* s = row.metric_series()) s->renewals[0].fetch_add(1, std::memory_order_relaxed);
    bool wake = false;
    {
        // A renewal (perhaps an explicit one with another TTL) restarts the schedule.
        std::lock_guard lock(watch_->mutex);
        row.schedule().next = next_renewal(row, clock::now());
        wake = wake_for(*watch_, std::min(row.schedule().next + renewal_slack(row.ttl()), row.valid_until()));
    }
    if (wake) watch_->cv.notify_all();
    emit(lease_event::kind::renewed, row.name(), row.token());
}

void locker_impl::on_renew_failed(lease_row const& row, std::string_view why) noexcept {
    counters_.renew_failures.fetch_add(1, std::memory_order_relaxed);
    if (auto* s = row.metric_series()) s->renewals[1].fetch_add(1, std::memory_order_relaxed);
    emit(lease_event::kind::renew_failed, row.name(), row.token(), why);
}

void locker_impl::on_lost(lease_row const& row, std::string_view why) noexcept {
    counters_.lost.fetch_add(1, std::memory_order_relaxed);
    if (options_.on_lost) {
        try {
            options_.on_lost(row.name(), row.token());
        } catch (...) {  // the hook must not break the renewer
        }
    }
    emit(lease_event::kind::lost, row.name(), row.token(), why);
}

// ---- the renewer ---------------------------------------------------------

locker_impl::clock::duration locker_impl::renewal_slack(std::chrono::milliseconds ttl) noexcept {
    return std::min<clock::duration>(ttl / 30, std::chrono::milliseconds(100));
}

locker_impl::clock::time_point locker_impl::next_renewal(lease_row const& row, clock::time_point now) noexcept {
    // Due once a third of the TTL is used up: a third after the answer came,
    // or sooner when the answer came late (a grant or renewal that queued
    // behind a busy pool or server arrives with less than its TTL left; due a
    // third of the TTL after it came, the lease would run out first).
    return std::min(now + row.ttl() / 3, row.valid_until() - row.ttl() * 2 / 3);
}

bool locker_impl::wake_for(watch_state& state, clock::time_point due) noexcept {
    // While the deadline thread is awake it looks at every row before it sleeps
    // again; asleep, it needs a wake-up only when it would sleep past `due`.
    bool const awake = state.sleeping_until == clock::time_point::min();
    bool const wake = !awake && due < state.sleeping_until;
    if (awake || wake) state.changed = true;
    return wake;
}

void locker_impl::watch(std::shared_ptr<lease_row> const& row) {
    bool wake = false;
    {
        std::lock_guard lock(watch_->mutex);
        watch_->auto_renew = options_.auto_renew;
        auto const now = clock::now();
        row->schedule().next = next_renewal(*row, now);
        row->schedule().renew_until =
            options_.max_hold == std::chrono::milliseconds::zero() ? clock::time_point::max() : now + options_.max_hold;
        watch_->rows.push_back({row});
        wake = wake_for(*watch_, options_.auto_renew
                                     ? std::min(row->schedule().next + renewal_slack(row->ttl()), row->valid_until())
                                     : row->valid_until());
    }
    if (wake) watch_->cv.notify_all();
    std::lock_guard lock(watchdog_mutex_);
    // Without auto_renew nothing is ever queued for the renewal threads: they are not started.
    if (options_.auto_renew && !renewers_.front().joinable())
        for (auto& t : renewers_)
            t = std::jthread([state = watch_](std::stop_token stop) { run_renewals(state, stop); });
    if (!watchdog_.joinable())
        watchdog_ = std::jthread([state = watch_](std::stop_token stop) { run_deadlines(state, stop); });
}

bool locker_impl::holds_with_prefix(std::string_view prefix, std::string const& owner) const {
    auto const now = clock::now();
    std::lock_guard lock(watch_->mutex);
    return std::any_of(watch_->rows.begin(), watch_->rows.end(), [&](watched const& w) {
        auto row = w.row.lock();
        if (!row || row->owner() != owner || !row->name().starts_with(prefix)) return false;
        auto const state = row->state_at(now);
        return state == lease_state::held || state == lease_state::in_doubt;
    });
}

void locker_impl::run_deadlines(std::shared_ptr<watch_state> const& state, std::stop_token const& stop) {
    std::unique_lock lock(state->mutex);
    while (!stop.stop_requested()) {
        auto now = clock::now();
        auto wake = now + std::chrono::seconds(60);
        bool queued = false;
        std::vector<std::shared_ptr<lease_row>> expired, held_too_long;
        std::erase_if(state->rows, [&](watched& w) {
            auto row = w.row.lock();
            if (!row) return true;
            auto s = row->state_at(now);
            if (s == lease_state::released) return true;
            auto& plan = row->schedule();
            if (s == lease_state::lost) {
                // validity ran out: say so now, whatever the I/O is doing
                (plan.next >= plan.renew_until ? held_too_long : expired).push_back(std::move(row));
                return true;
            }
            bool const renewing = plan.next < plan.renew_until;  // locker_options::max_hold
            if (state->auto_renew && !plan.queued && now >= plan.next && renewing) {
                state->renewals.push_back(row);
                plan.queued = true;
                queued = true;
                // Until the renewal reports, retry at a tenth of the TTL (at most 1 s).
                plan.next = now + std::min<clock::duration>(row->ttl() / 10, std::chrono::seconds(1));
            }
            wake = std::min(wake, row->valid_until());
            // Renewals due within a short slack of each other are queued by one
            // wake-up (a renewal is due at a third of the TTL, long before the
            // lease runs out): with many leases, one scan of them all per due
            // renewal would cost a core.
            if (state->auto_renew && !plan.queued && renewing)
                wake = std::min(wake, plan.next + renewal_slack(row->ttl()));
            return false;
        });
        lock.unlock();
        if (queued) state->renew_cv.notify_all();
        // mark_lost takes no lock a renewal holds: it is never delayed by I/O.
        for (auto& row : expired)
            row->mark_lost("its validity ran out before a renewal succeeded", loss_cause::expired);
        for (auto& row : held_too_long)
            row->mark_lost("it was held for max_hold, and the watchdog stopped renewing it (locker_options::max_hold)",
                           loss_cause::max_hold);
        // Drop strong references before sleeping: the last one may destroy the
        // locker, which only detaches this thread; from here on only `state` is used.
        expired.clear();
        held_too_long.clear();
        lock.lock();
        state->sleeping_until = wake;
        state->cv.wait_until(lock, stop, wake, [&] { return std::exchange(state->changed, false); });
        state->sleeping_until = clock::time_point::min();  // awake: it looks at every row again
    }
}

void locker_impl::run_renewals(std::shared_ptr<watch_state> const& state, std::stop_token const& stop) {
    std::unique_lock lock(state->mutex);
    while (!stop.stop_requested()) {
        state->renew_cv.wait(lock, stop, [&] { return !state->renewals.empty(); });
        if (stop.stop_requested()) break;
        auto weak = std::move(state->renewals.front());
        state->renewals.pop_front();
        lock.unlock();
        if (auto row = weak.lock()) {
            try {
                row->renew(row->ttl());  // on success the locker reschedules it (on_renewed)
            } catch (...) {
                // lease_lost marked the row lost; an unreachable database left it in
                // doubt, and the retry time set by the deadline thread stands.
            }
            lock.lock();
            row->schedule().queued = false;
            bool const wake =
                wake_for(*state, std::min(row->schedule().next + renewal_slack(row->ttl()), row->valid_until()));
            lock.unlock();
            if (wake) state->cv.notify_all();
            row.reset();  // before taking the lock again: it may destroy the locker
        }
        lock.lock();
    }
}

}  // namespace detail

locker::locker(std::shared_ptr<detail::locker_impl> impl) noexcept : impl_(std::move(impl)) {}

std::optional<lease> locker::try_acquire(std::string_view name) {
    detail::validate_name(name);
    return impl_->try_acquire(std::string(name));
}

lease locker::acquire(std::string_view name, std::chrono::milliseconds wait, std::stop_token cancel) {
    detail::validate_name(name);
    if (wait < std::chrono::milliseconds::zero())
        throw usage_error("sqlock: the wait for lock '" + std::string(name) + "' is negative: use 0 or more");
    return impl_->acquire(std::string(name), wait, std::move(cancel));
}

locker_options const& locker::options() const noexcept { return impl_->options(); }
locker_stats locker::stats() const noexcept { return impl_->stats(); }

}  // namespace sqlock
