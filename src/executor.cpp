#include "detail/executor.hpp"
#include "detail/store_impl.hpp"

#include <sqlock/errors.hpp>

#include <soci/soci.h>

#include <algorithm>
#include <random>
#include <string>
#include <thread>

namespace sqlock::detail {
namespace {

constexpr int max_tries = 100;

}  // namespace

void raise_engine_error(dialect const& d, std::string_view where, soci::soci_error const& e, failure f,
                        std::string_view what) {
    auto message = e.get_error_message();
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
    auto code = d.native_code(e);
    std::string const in(where);
    switch (f) {
        case failure::schema:
            throw schema_missing("sqlock: a lock table is missing in " + in + " (" + message + "): apply " +
                                     schema_file(d.engine()) +
                                     " (sqlock schema --apply), or open the store with "
                                     "create_schema = true",
                                 code);
        case failure::connection:
            if (d.engine() == sqlock::engine::postgresql && code == "25006")  // classify(): only on a hot standby
                throw backend_unavailable("sqlock: " + std::string(what) + " on " + in +
                                              " was refused: the server is a hot standby (a replica, or a primary "
                                              "demoted by a failover) (" +
                                              message +
                                              "); the connection was dropped: point the URL at the primary, or "
                                              "list every node with target_session_attrs=read-write, and retry",
                                          code);
            throw backend_unavailable("sqlock: lost the connection to " + in + " during " + std::string(what) + ": " +
                                          message + "; retry later",
                                      code);
        case failure::permission: {
            // The engine's message names the refused privilege; say which ones sqlock needs.
            std::string need = "SELECT, INSERT, UPDATE and DELETE on the lock tables, SELECT on the protocol record";
            if (d.engine() == sqlock::engine::mysql) need += " and EXECUTE on their procedures";
            throw backend_error("sqlock: " + std::string(what) + " on " + in + " was refused for lack of privileges (" +
                                    message + "): GRANT the database user of the URL what sqlock needs (" + need +
                                    "; creating the schema also needs CREATE: else apply " + schema_file(d.engine()) +
                                    " as its owner), or use a user that has it",
                                code);
        }
        case failure::read_only:
            throw backend_error("sqlock: " + std::string(what) + " on " + in +
                                    " was refused: the database is read-only (" + message +
                                    "); point the URL at a writable database (the primary, a file this process may "
                                    "write), or turn its read-only mode off",
                                code);
        case failure::transient:
        case failure::lock_wait:
        case failure::other: break;
    }
    throw backend_error("sqlock: " + std::string(what) + " failed on " + in + ": " + message, code);
}

void run_on_callers_session(dialect const& d, std::string_view what, soci::session& s,
                            function_ref<void(soci::session&)> op) {
    try {
        op(s);
    } catch (soci::soci_error const& e) {
        raise_engine_error(d, "the caller's session", e, d.classify(e, s), what);
    }
}

bool executor::retries::again() {
    if (++failed_ >= max_tries || clock::now() >= until_) return false;
    // Full jitter over a window that grows with the tries: contenders that
    // deadlocked together do not retry in lockstep.
    thread_local std::minstd_rand rng{std::random_device{}()};
    auto const window = std::min(50, 1 + failed_ * 2);
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, window * 1000)(rng)));
    return true;
}

failure executor::classify(soci::soci_error const& e, soci::session& s, bool overran) const {
    return overran ? failure::connection : store_->dialect().classify(e, s);
}

void executor::give_up(soci::soci_error const& e, std::string_view what, retries const& r) const {
    // Typed, without the engine's text (the battery's K9 reads that as a raw error leaking);
    // code() keeps the engine's code.
    throw backend_unavailable("sqlock: " + std::string(what) + " on " + store_->url() +
                                  " gave up: other transactions kept holding what it needed (" +
                                  std::to_string(r.failed()) +
                                  " tries met a lock conflict or a busy database); retry later",
                              store_->dialect().native_code(e));
}

void executor::raise(soci::soci_error const& e, failure f, std::string_view what) const {
    raise_engine_error(store_->dialect(), store_->url(), e, f, what);
}

void executor::raise_overrun(std::string_view what) const {
    throw backend_unavailable("sqlock: " + std::string(what) + " on " + store_->url() +
                              " got no answer in time (its bound: the lease's safe deadline, or io_timeout " +
                              std::to_string(store_->options().io_timeout.count()) +
                              " ms beyond the engine's own wait): the connection was closed; retry later");
}

void executor::run(std::string_view what, function_ref<void(pooled_session&)> op, run_options const& how) const {
    auto& store = *store_;
    auto const& options = store.options();
    auto const& d = store.dialect();
    // Unless told otherwise, give a busy database two lock-wait bounds: on SQLite
    // each attempt already waited one busy_timeout.
    retries retry(how.deadline != clock::time_point::max() ? how.deadline
                                                           : clock::now() + 2 * options.lock_wait_timeout);
    bool reconnected = false;
    auto const engine_wait = how.engine_wait.value_or(options.lock_wait_timeout);
    auto const in_doubt_error = [&](std::string const& why, std::string code) {
        return in_doubt("sqlock: the connection to " + store.url() + " broke during " + std::string(what) + " and " +
                            why + ": the outcome is unknown; any row written expires by its TTL",
                        std::move(code));
    };
    for (;;) {
        std::optional<connection> borrowed;
        try {
            auto const wait = how.pool_wait.value_or(options.pool_wait);
            borrowed.emplace(how.pool == connections::main_or_reserved
                                 ? store.borrow_main_or_reserved(what, wait)
                                 : store.borrow(what, wait, how.pool == connections::reserved));
        } catch (backend_unavailable const& e) {
            if (reconnected && how.on_reconnect)
                throw in_doubt_error(std::string("reconnecting failed (") + e.what() + ")", e.code());
            throw;
        }
        auto& c = *borrowed;
        store_impl::io_guard guard(store, c.session(),
                                   std::min(deadline_after(engine_wait + options.io_timeout), how.io_deadline));
        auto const started = clock::now();
        try {
            if (reconnected && how.on_reconnect) {
                try {
                    how.on_reconnect(c.session());
                } catch (soci::soci_error const& e) {
                    if (classify(e, c.session(), guard.disarm()) == failure::connection) c.mark_broken();
                    throw in_doubt_error("the clean-up failed too (" + e.get_error_message() + ")", d.native_code(e));
                }
            }
            if (how.engine_wait) d.set_engine_wait(c.session(), engine_wait);
            auto restore = [&] {
                if (how.engine_wait) d.set_engine_wait(c.session(), options.lock_wait_timeout);
            };
            auto pooled = c.pooled();
            try {
                op(pooled);
            } catch (...) {
                restore();
                throw;
            }
            restore();
            return;
        } catch (soci::soci_error const& e) {
            bool const overran = guard.disarm();
            auto f = classify(e, c.session(), overran);
            // SQLite reports a lock held longer than its busy handler waited as
            // SQLITE_BUSY, like the rare spurious one: only the first is "busy".
            if (f == failure::transient && how.engine_wait && clock::now() - started >= engine_wait * 9 / 10 &&
                d.busy_is_lock_wait())
                f = failure::lock_wait;
            if (f == failure::lock_wait && how.engine_wait) throw row_busy{};
            if (how.idempotent && (f == failure::other)) f = failure::transient;
            if (f == failure::lock_wait || f == failure::transient) {
                if (retry.again()) continue;
                give_up(e, what, retry);
            }
            if (f != failure::connection) raise(e, f, what);
            c.mark_broken();
            if (how.on_broken) how.on_broken();
            if (reconnected && how.on_reconnect)
                throw in_doubt_error(overran ? "the retry got no answer within its deadline too"
                                             : "broke again after reconnecting (" + e.get_error_message() + ")",
                                     d.native_code(e));
            if (reconnected) {
                if (overran) raise_overrun(what);
                raise(e, f, what);
            }
        }
        reconnected = true;
    }
}

}  // namespace sqlock::detail
