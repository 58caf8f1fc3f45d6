// The baseline SQL of semaphores and read-write locks.
#include "detail/dialect.hpp"

#include <soci/soci.h>

#include <set>

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

namespace {

// The row locks held on the rows of `rows` named in [lo, hi): the names there,
// less those a SELECT that skips held rows could lock (`skip` appended; empty:
// the engine has no row locks). Two reads: a row created between them is
// neither (only a grant after both could hold it). A permit's row lock is held
// for the permit's whole life, so a live row permit is counted here.
std::int64_t held_row_locks(soci::session& s, std::string const& rows, std::string const& lo, std::string const& hi,
                            std::string const& skip) {
    if (skip.empty()) return 0;
    auto const select = "SELECT name FROM " + rows + " WHERE name >= :lo AND name < :hi";
    std::set<std::string> names;
    soci::rowset<std::string> all = (s.prepare << select, soci::use(lo, "lo"), soci::use(hi, "hi"));
    for (auto const& name : all) names.insert(name);
    if (names.empty()) return 0;
    soci::rowset<std::string> free = (s.prepare << select + skip, soci::use(lo, "lo"), soci::use(hi, "hi"));
    for (auto const& name : free) names.erase(name);
    return static_cast<std::int64_t>(names.size());
}

}  // namespace

forgotten dialect::forget_semaphore(soci::session& s, std::string const& name, std::string const& lo,
                                    std::string const& hi) const {
    forgotten result;
    (void)write_transaction(s, [&] {
        // The DELETE first: its lock on the definition row makes every grant
        // confirmed from now on wait for this transaction's end, and every grant
        // confirmed before it is a permit the counts below see.
        soci::statement st =
            (s.prepare << "DELETE FROM " + semaphores_table() + " WHERE name = :name", soci::use(name, "name"));
        st.execute(true);
        result.removed = st.get_affected_rows() > 0;
        result.live =
            count_live(s, lo, hi, "").count + held_row_locks(s, prefix_ + "_rows", lo, hi, skip_held_rows_sql());
        if (result.live > 0) result.removed = false;
        return result.live == 0;
    });
    return result;
}

permit_check dialect::confirm_permit(soci::session& s, std::string const& name, int permits, std::string const& lo,
                                     std::string const& hi, bool row) const {
    permit_check result;
    auto const read = "SELECT permits FROM " + semaphores_table() + " WHERE name = :name";
    s << read + share_lock_sql(), soci::use(name, "name"), soci::into(result.permits);
    if (!s.got_data()) {
        s << define_semaphore_sql(), soci::use(name, "name"), soci::use(permits, "permits");
        s << read, soci::use(name, "name"), soci::into(result.permits);
    }
    result.other =
        row ? count_live(s, lo, hi, "").count : held_row_locks(s, prefix_ + "_rows", lo, hi, skip_held_rows_sql());
    return result;
}

live_rows dialect::count_live(soci::session& s, std::string const& lo, std::string const& hi,
                              std::string const& owner) const {
    long long count = 0, mine = 0;
    s << "SELECT COUNT(*), COALESCE(SUM(CASE WHEN owner = :owner THEN 1 ELSE 0 END), 0) FROM " + locks_ +
             " WHERE name >= :lo AND name < :hi AND expires_at >= " + now_sql(),
        soci::use(owner, "owner"), soci::use(lo, "lo"), soci::use(hi, "hi"), soci::into(count), soci::into(mine);
    return {count, mine};
}

reader_count dialect::count_readers(soci::session& s, std::string const& lo, std::string const& hi,
                                    std::string const& name, std::string const& owner, std::int64_t token) const {
    long long count = 0, mine = 0, writer = 0;
    long long const tok = token;
    s << "SELECT COUNT(*), COALESCE(SUM(CASE WHEN owner = :owner THEN 1 ELSE 0 END), 0), (SELECT COUNT(*) FROM " +
             locks_ + " WHERE name = :name AND owner = :writer AND token = :token AND expires_at >= " + now_sql() +
             ") FROM " + locks_ + " WHERE name >= :lo AND name < :hi AND expires_at >= " + now_sql(),
        soci::use(owner, "owner"), soci::use(name, "name"), soci::use(owner, "writer"), soci::use(tok, "token"),
        soci::use(lo, "lo"), soci::use(hi, "hi"), soci::into(count), soci::into(mine), soci::into(writer);
    return {{count, mine}, writer > 0};
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
