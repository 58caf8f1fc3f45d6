// The reaper: batches of one conditional DELETE each, on the database's clock.
#include "detail/access.hpp"
#include "detail/failpoint.hpp"
#include "detail/store_impl.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/reaper.hpp>
#include <sqlock/store.hpp>

#include <algorithm>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <string>

namespace sqlock {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

constexpr std::size_t max_batch = 100000;

std::string ms_text(milliseconds d) {
    if (d.count() != 0 && d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
    return std::to_string(d.count()) + " ms";
}

void check(reaper_options const& o) {
    if (o.grace < 0ms || o.grace > std::chrono::days(7))
        throw usage_error("sqlock: reaper grace " + ms_text(o.grace) + " is out of range: use 0 .. 7 days");
    if (o.batch_size < 1 || o.batch_size > max_batch)
        throw usage_error("sqlock: reaper batch_size " + std::to_string(o.batch_size) + " is out of range: use 1 .. " +
                          std::to_string(max_batch));
    if (o.idle_batch_size && (*o.idle_batch_size < 1 || *o.idle_batch_size > max_batch))
        throw usage_error("sqlock: reaper idle_batch_size " + std::to_string(*o.idle_batch_size) +
                          " is out of range: use 1 .. " + std::to_string(max_batch) +
                          ", or leave it unset to purge in batches of batch_size only");
    // Not `!(a <= x && x <= b)` spelled otherwise: a NaN must fail too.
    if (!(o.duty_cycle >= 0.01 && o.duty_cycle <= 1.0))
        throw usage_error("sqlock: reaper duty_cycle " + std::to_string(o.duty_cycle) +
                          " is out of range: use 0.01 .. 1 (the share of a pass spent in batches while leases "
                          "are live; 1 never pauses)");
    if (o.row_lock_warning && (*o.row_lock_warning < 1s || *o.row_lock_warning > std::chrono::days(3650)))
        throw usage_error("sqlock: reaper row_lock_warning " + ms_text(*o.row_lock_warning) +
                          " is out of range: use 1 s .. 3650 days, or leave it unset to skip the check");
    // Shorter than a statement can run, a purge can repeat a token (see min_token_horizon).
    // Past 10 years it is a unit slip: unset it to never purge.
    if (o.token_horizon && (*o.token_horizon < min_token_horizon || *o.token_horizon > std::chrono::days(3650)))
        throw usage_error("sqlock: reaper token_horizon " + ms_text(*o.token_horizon) +
                          " is out of range: use 2 h (sqlock::min_token_horizon, longer than any acquire "
                          "statement can run) .. 3650 days, or leave it unset to never purge token counters");
    // A lower bound: max_age = 0 would purge every live row, almost always a unit slip.
    if (o.max_age && (*o.max_age < 1s || *o.max_age > std::chrono::days(3650)))
        throw usage_error("sqlock: reaper max_age " + ms_text(*o.max_age) +
                          " is out of range: use 1 s .. 3650 days, or leave it unset (the default) to never "
                          "purge live rows");
}

}  // namespace

void validate(reaper_options const& options) { check(options); }

reaper::reaper(store const& db, reaper_options options)
    : store_(detail::access::impl(db)), options_((check(options), std::move(options))) {}

reap_result reaper::reap_once() { return reap_once(std::stop_token{}); }

reap_result reaper::reap_once(std::stop_token stop) {
    auto* const m = store_->metrics()->impl().reaper(detail::engine_label_of(store_->engine()));
    if (m == nullptr) return pass(stop);
    m->used.store(true, std::memory_order_relaxed);
    auto const started = std::chrono::steady_clock::now();
    try {
        auto r = pass(stop);
        m->duration.observe(std::chrono::steady_clock::now() - started);
        m->passes.fetch_add(1, std::memory_order_relaxed);
        m->rows.fetch_add(r.purged, std::memory_order_relaxed);
        m->live_rows.fetch_add(r.live_purged, std::memory_order_relaxed);
        m->tokens.fetch_add(r.tokens_purged, std::memory_order_relaxed);
        if (r.complete && !r.dry_run)
            m->last_success_us.store(
                duration_cast<microseconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
                std::memory_order_relaxed);
        return r;
    } catch (...) {
        m->duration.observe(std::chrono::steady_clock::now() - started);
        m->failures.fetch_add(1, std::memory_order_relaxed);
        throw;
    }
}

namespace {

/// Sleeps for `d` unless `stop` is requested first.
void pause_for(std::chrono::steady_clock::duration d, std::stop_token const& stop) {
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    cv.wait_for(lock, stop, d, [] { return false; });
}

/// The size of the next batch, and whether a lease was live when it was chosen.
struct paced_batch {
    int rows = 0;
    bool live = true;
};

/// `seen_live`: a live lease was seen earlier in this pass. From then on the pass stays paced to its end
/// without asking again: traffic of short leases leaves moments with no live row, and an idle batch
/// in one of them would stall the next acquires.
paced_batch pick_batch(detail::dialect const& d, reaper_options const& o, soci::session& s, bool& seen_live) {
    // A dry run changes nothing: its one batch keeps batch_size, the first batch a pass next to live
    // traffic would delete.
    if (!o.idle_batch_size || o.dry_run || seen_live) return {static_cast<int>(o.batch_size), true};
    seen_live = d.any_live_lock(s);
    return {static_cast<int>(seen_live ? o.batch_size : std::max(*o.idle_batch_size, o.batch_size)), seen_live};
}

/// After a batch that ran while a lease was live: the duty cycle's pause.
void pace(reap_result& r, reaper_options const& o, paced_batch const& b,
          std::chrono::steady_clock::time_point batch_started, std::stop_token const& stop) {
    if (!b.live || o.duty_cycle >= 1.0) return;
    auto const now = std::chrono::steady_clock::now();
    auto const pause = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        (now - batch_started) * ((1.0 - o.duty_cycle) / o.duty_cycle));
    pause_for(pause, stop);
    r.paused += duration_cast<microseconds>(std::chrono::steady_clock::now() - now);
}

}  // namespace

reap_result reaper::pass(std::stop_token const& stop) {
    auto const started = std::chrono::steady_clock::now();
    auto const grace_us = duration_cast<microseconds>(options_.grace).count();
    std::optional<std::int64_t> max_age_us;
    if (options_.max_age) max_age_us = duration_cast<microseconds>(*options_.max_age).count();
    auto const& d = store_->dialect();

    reap_result r;
    r.dry_run = options_.dry_run;
    bool seen_live = false;
    for (;;) {
        if (stop.stop_requested()) {
            r.stopped = true;
            break;
        }
        // Each batch borrows a connection for its statements and gives it back,
        // and a deadlock or busy error is retried by run(): a batch is idempotent.
        auto const batch_started = std::chrono::steady_clock::now();
        paced_batch size;
        auto b = store_->run("reaping expired locks", [&](soci::session& s) {
            size = pick_batch(d, options_, s, seen_live);
            return d.reap(s, grace_us, max_age_us, size.rows, options_.dry_run);
        });
        ++r.batches;
        if (!size.live) ++r.idle_batches;
        r.purged += static_cast<std::uint64_t>(b.rows);
        r.live_purged += static_cast<std::uint64_t>(b.live_purged);
        if (b.oldest_expiry_us) {
            db_time t{microseconds(*b.oldest_expiry_us)};
            r.oldest_expiry = r.oldest_expiry ? std::min(*r.oldest_expiry, t) : t;
        }
        if (b.rows < size.rows) {
            r.complete = true;
            break;
        }
        // Counting does not change the table: a second batch would count the same rows.
        if (options_.dry_run) break;
        pace(r, options_, size, batch_started, stop);
        SQLOCK_FAILPOINT("reaper.between_batches");
    }
    if (options_.token_horizon && !r.stopped) {
        bool const rows_complete = r.complete;
        r.complete = false;
        auto const horizon_us = duration_cast<microseconds>(*options_.token_horizon).count();
        for (;;) {
            if (stop.stop_requested()) {
                r.stopped = true;
                break;
            }
            auto const batch_started = std::chrono::steady_clock::now();
            paced_batch size;
            auto b = store_->run("purging token counters", [&](soci::session& s) {
                size = pick_batch(d, options_, s, seen_live);
                return d.purge_tokens(s, horizon_us, size.rows, options_.dry_run);
            });
            ++r.token_batches;
            if (!size.live) ++r.idle_batches;
            r.tokens_purged += static_cast<std::uint64_t>(b.counters);
            if (b.picked < size.rows) {
                r.complete = rows_complete;
                break;
            }
            // A dry batch counts the same counters again; a batch that deleted
            // none (all drawn from meanwhile) would repeat itself.
            if (options_.dry_run || b.counters == 0) break;
            pace(r, options_, size, batch_started, stop);
        }
    }
    r.duration = duration_cast<microseconds>(std::chrono::steady_clock::now() - started);

    std::vector<std::string> warnings;
    if (options_.row_lock_warning && !r.stopped) {
        auto held = store_->run("looking for long-held row locks",
                                [&](soci::session& s) { return d.long_row_locks(s, *options_.row_lock_warning); });
        r.long_row_locks = held.size();
        for (auto const& h : held)
            warnings.push_back("sqlock: WARNING: a row lock in " + store_->url() + " has been held for " +
                               ms_text(std::chrono::milliseconds(h.held_ms)) + " (over " +
                               ms_text(*options_.row_lock_warning) + ") by session " + std::to_string(h.session_id) +
                               " from " + h.client +
                               ": if its holder is hung, end that session "
                               "(pg_terminate_backend) to release the lock");
    }
    for (auto const& message : warnings) warn(message);

    if (r.live_purged > 0) {
        std::string message =
            "sqlock: WARNING: the reaper " + std::string(options_.dry_run ? "would purge " : "purged ") +
            std::to_string(r.live_purged) + " live lock row" + (r.live_purged == 1 ? "" : "s") + " in " +
            store_->url() + " because max_age " + ms_text(*options_.max_age) +
            " had passed since they were created: their holders " + (options_.dry_run ? "would lose" : "have lost") +
            " their leases; raise max_age or unset it if these locks are meant to be held "
            "that long";
        warn(message);
    }
    return r;
}

void reaper::warn(std::string const& message) const {
    if (options_.on_warning) {
        try {
            options_.on_warning(message);
        } catch (...) {  // a logging hook must not undo a pass that already ran
        }
    } else {
        std::clog << message << std::endl;
    }
}

}  // namespace sqlock
