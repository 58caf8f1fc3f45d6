// The baseline SQL of semaphores and read-write locks.
#include "detail/dialect.hpp"

#include <soci/soci.h>

namespace sqlock::detail {

int dialect::define_semaphore(soci::session& s, std::string const& name, int permits) const {
    int stored = 0;
    s << "SELECT permits FROM " + semaphores_table() + " WHERE name = :name", soci::use(name, "name"),
        soci::into(stored);
    if (s.got_data()) return stored;
    s << define_semaphore_sql(), soci::use(name, "name"), soci::use(permits, "permits");
    s << "SELECT permits FROM " + semaphores_table() + " WHERE name = :name", soci::use(name, "name"),
        soci::into(stored);
    return stored;
}

std::string dialect::define_semaphore_sql() const {
    return "INSERT INTO " + semaphores_table() + " (name, permits, created_at) VALUES (:name, :permits, " + now_sql() +
           ") ON CONFLICT (name) DO NOTHING";
}

bool dialect::forget_semaphore(soci::session& s, std::string const& name) const {
    soci::statement st =
        (s.prepare << "DELETE FROM " + semaphores_table() + " WHERE name = :name", soci::use(name, "name"));
    st.execute(true);
    return st.get_affected_rows() > 0;
}

live_rows dialect::count_live(soci::session& s, std::string const& lo, std::string const& hi,
                              std::string const& owner) const {
    long long count = 0, mine = 0;
    s << "SELECT COUNT(*), COALESCE(SUM(CASE WHEN owner = :owner THEN 1 ELSE 0 END), 0) FROM " + locks_ +
             " WHERE name >= :lo AND name < :hi AND expires_at >= " + now_sql(),
        soci::use(owner, "owner"), soci::use(lo, "lo"), soci::use(hi, "hi"), soci::into(count), soci::into(mine);
    return {count, mine};
}

std::optional<renewal> dialect::rename_lock(pooled_session s, std::string const& name, std::string const& owner,
                                            std::int64_t token, std::string const& to, std::int64_t ttl_us) const {
    auto& c = cache(s);
    if (!c.rename)
        c.rename.emplace(
            (s.session.prepare << "UPDATE " + locks_ + " SET name = :to, expires_at = " + plus_ttl_sql(now_sql()) +
                                      unflushed_from_sql() +
                                      " WHERE name = :name AND owner = :owner AND token = :token"
                                      " AND expires_at >= " +
                                      now_sql() + " RETURNING " + epoch_us_sql("expires_at") + ", " +
                                      epoch_us_sql(now_sql()) + ", " + waiters_marked_sql(),
             soci::use(c.to, "to"), soci::use(c.ttl, "ttl"), soci::use(c.name, "name"), soci::use(c.owner, "owner"),
             soci::use(c.token, "token"), soci::into(c.expires), soci::into(c.now), soci::into(c.flag)));
    c.to = to;
    c.name = name;
    c.owner = owner;
    c.token = token;
    c.ttl = ttl_us;
    // The rename need not wait for the disk (unflushed_from_sql()): the shared
    // lease it makes is valid until the name's grant runs out and no longer,
    // while a rename lost in a crash leaves the name's row (with that grant's
    // expiry) to keep writers out until then. Any later durable commit flushes
    // it too (the log is flushed in order): the reader's first renewal, another
    // reader's grant of the name, the next writer's.
    bool const got = c.rename->execute(true);
    finish(*c.rename);
    if (!got) return std::nullopt;
    if (c.flag != 0) {
        // A waiter of the name marked it: its release is announced (the row now
        // stands for the shared lease, whose own release need not be).
        s.session << "UPDATE " + locks_ + " SET waiters = " + waiters_unmarked_sql() + " WHERE name = :to",
            soci::use(to, "to");
        notify_release(s.session, name);
    }
    return renewal{c.expires, c.now};
}

}  // namespace sqlock::detail
