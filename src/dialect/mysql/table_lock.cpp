// MariaDB / MySQL: the table lock.
#include "dialect/mysql/mysql.hpp"

namespace sqlock::detail::mysql_engine {

template <class Call>
bool mysql_dialect::granting(pooled_session ps, std::string const& name, bool waiting, Call const& call) const {
    bool ours = call();
    long long const listener = listener_id_.load(std::memory_order_relaxed);
    for (int calls = 1; waiting && !ours && listener != 0; ++calls) {
        SQLOCK_FAILPOINT("mysql.acquire.before_mark");
        if (mark(ps, name, listener) || calls == 2) break;
        ours = call();  // released between the busy answer and the mark: nobody would ring for us
    }
    // The pause a client can still take inside an acquire: after the server
    // decided and committed, before the caller hears of it.
    SQLOCK_FAILPOINT("mysql.acquire.after_call");
    return ours;
}

grant mysql_dialect::acquire(pooled_session ps, std::string const& name, std::string const& owner, std::int64_t attempt,
                             std::int64_t ttl_us, bool waiting, bool retry) const {
    auto& c = cache(ps);
    prepared(c.call_acquire, ps, acquire_sql_);
    long long id = attempt, again = retry ? 1 : 0, ttl = ttl_us, budget = budget_us(ps.session);
    unsigned long name_length = 0, owner_length = 0;
    std::array<MYSQL_BIND, 6> params{bytes_param(name, name_length),
                                     bytes_param(owner, owner_length),
                                     integer_param(id),
                                     integer_param(again),
                                     integer_param(ttl),
                                     integer_param(budget)};
    std::array<long long, 4> row{};  // ours, token, created, expires
    bool const ours = granting(ps, name, waiting, [&] {
        return on(c.call_acquire, [&](server_statement& st) { return st.execute(params.data(), row); }) && row[0] == 1;
    });
    if (!ours) return {};
    return {true, row[1], row[2], row[3]};
}

grant mysql_dialect::acquire_shared(pooled_session ps, std::string const& name, std::string const& reader,
                                    std::string const& owner, std::int64_t attempt, std::int64_t ttl_us, bool waiting,
                                    bool retry) const {
    auto& c = cache(ps);
    prepared(c.call_acquire_shared, ps, acquire_shared_sql_);
    long long id = attempt, again = retry ? 1 : 0, ttl = ttl_us, budget = budget_us(ps.session);
    unsigned long name_length = 0, reader_length = 0, owner_length = 0;
    std::array<MYSQL_BIND, 7> params{bytes_param(name, name_length),
                                     bytes_param(reader, reader_length),
                                     bytes_param(owner, owner_length),
                                     integer_param(id),
                                     integer_param(again),
                                     integer_param(ttl),
                                     integer_param(budget)};
    std::array<long long, 5> row{};  // ours, token, created, expires, the listener that marked the name's row
    bool const ours = granting(ps, name, waiting, [&] {
        return on(c.call_acquire_shared, [&](server_statement& st) { return st.execute(params.data(), row); }) &&
               row[0] == 1;
    });
    if (!ours) return {};
    // The name's lock is free again: its waiters may go on (the reader's own release need not ring).
    if (row[4] != 0) ring(ps.session, row[4]);
    return {true, row[1], row[2], row[3]};
}

bool mysql_dialect::mark(pooled_session ps, std::string const& name, long long listener) const {
    auto& c = cache(ps);
    unsigned long name_length = 0;
    std::array<MYSQL_BIND, 2> params{integer_param(listener), bytes_param(name, name_length)};
    // Read first, without a lock: in a herd the row is marked already, and the read is all it costs.
    prepared(c.mark_seen, ps, mark_seen_sql_);
    std::array<long long, 1> marked{};
    if (!on(c.mark_seen, [&](server_statement& st) { return st.execute(params.data() + 1, marked); })) return false;
    if (marked[0] != 0) return true;
    prepared(c.mark_waiting, ps, mark_sql_);
    std::array<long long, 0> none{};
    // Nothing changed: released or marked since the read; the caller tries once more either way.
    return on(c.mark_waiting, [&](server_statement& st) {
        (void)st.execute(params.data(), none);
        return st.affected_rows() > 0;
    });
}

bool mysql_dialect::release(pooled_session ps, std::string const& name, std::string const& owner,
                            std::int64_t token) const {
    auto& c = cache(ps);
    prepared(c.delete_row, ps, release_sql_);
    long long tok = token;
    unsigned long name_length = 0, owner_length = 0;
    std::array<MYSQL_BIND, 3> params{bytes_param(name, name_length), bytes_param(owner, owner_length),
                                     integer_param(tok)};
    auto const deletes = [&](std::optional<server_statement>& slot) {
        std::array<long long, 0> none{};
        return on(slot, [&](server_statement& st) {
            (void)st.execute(params.data(), none);
            return st.affected_rows() > 0;
        });
    };
    if (deletes(c.delete_row)) return true;
    // Marked, or not ours (lost). A mark is written only on an unmarked row, so it stays as read
    // until the row goes.
    prepared(c.read_marked, ps, marked_sql_);
    std::array<long long, 1> waiters{};
    if (!on(c.read_marked, [&](server_statement& st) { return st.execute(params.data(), waiters); })) return false;
    prepared(c.delete_marked, ps, release_marked_sql_);
    if (!deletes(c.delete_marked)) return false;
    if (waiters[0] != 0) ring(ps.session, waiters[0]);
    return true;
}

void mysql_dialect::ring(soci::session& s, long long connection) const {
    try {
        auto const& flavour = flavoured();
        std::vector<long long> ids(64);
        bool found = false;
        if (connection == 0) {
            soci::statement st = (s.prepare << flavour.listeners, soci::use(bell_sql_, "bell"), soci::into(ids));
            found = st.execute(true);
        } else {
            ids.resize(1);
            soci::statement st = (s.prepare << flavour.listener, soci::use(connection, "id"),
                                  soci::use(bell_sql_, "bell"), soci::into(ids));
            found = st.execute(true);
        }
        // No listener found: the vector keeps its size and zeros, and KILL QUERY ID 0 (MySQL: KILL
        // QUERY 0) would be a wasted round trip; nothing to send.
        if (!found) ids.clear();
        for (auto id : ids) {
            if (id == 0) continue;
            try {
                s << flavour.ring + std::to_string(id);
            } catch (soci::mysql_soci_error const& e) {
                if (e.err_num_ >= CR_MIN_ERROR) throw;  // the connection, not the listener
                // MariaDB 1957: that SLEEP has ended meanwhile (its listener woke anyway or parks again);
                // 1094: no such connection (the listener has gone).
            }
        }
    } catch (soci::soci_error const&) {
        // The release has committed and must not be reported otherwise (a retry after a reconnect
        // could find the lock taken by a woken waiter and call the release lost): the waiters fall
        // back to their back-off, and a broken connection shows at its next use.
    }
}

std::optional<renewal> mysql_dialect::renew(pooled_session ps, std::string const& name, std::string const& owner,
                                            std::int64_t token, std::int64_t ttl_us) const {
    auto& c = cache(ps);
    prepared(c.call_renew, ps, renew_sql_);
    long long tok = token, ttl = ttl_us;
    unsigned long name_length = 0, owner_length = 0;
    std::array<MYSQL_BIND, 4> params{bytes_param(name, name_length), bytes_param(owner, owner_length),
                                     integer_param(tok), integer_param(ttl)};
    std::array<long long, 3> row{};  // renewed, expires, now
    bool const got = on(c.call_renew, [&](server_statement& st) { return st.execute(params.data(), row); });
    if (!got || row[0] != 1) return std::nullopt;
    return renewal{row[1], row[2]};
}

}  // namespace sqlock::detail::mysql_engine
