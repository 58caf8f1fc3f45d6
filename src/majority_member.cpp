// The majority member interface of a locker (detail/locker_impl.hpp), served by
// the database of a table or row locker: the majority locker reaches its members
// only through it, never through their store or dialect.
#include "detail/locker_impl.hpp"
#include "detail/store_impl.hpp"

#include <sqlock/errors.hpp>

namespace sqlock::detail {
namespace {

store_impl& member_database(locker_impl& locker, store_impl* store) {
    if (store == nullptr)
        throw usage_error("sqlock: " + locker.member_refusal().value_or("this locker is not a majority member"));
    return *store;
}

[[noreturn]] void no_identity(store_impl const& store) {
    throw schema_missing("sqlock: no identity row in " + store.dialect().identity_table() + " of " + store.url() +
                         ": apply the schema again (sqlock schema --apply --db URL)");
}

}  // namespace

std::optional<std::string> locker_impl::member_refusal() {
    auto* store = member_store();
    if (store == nullptr)
        return "a member of a majority locker must be a table_locker or row_locker (a majority of majorities is "
               "not supported)";
    if (locks_whole_database())
        return "a row_locker on SQLite (" + store->url() +
               ") cannot be a majority member: its lease locks the whole file, so the member's token counter could "
               "not be written; use a table_locker for SQLite members (sqlock run: --strategy table)";
    return std::nullopt;
}

std::string locker_impl::member_label() { return member_database(*this, member_store()).url(); }

std::string locker_impl::member_key() {
    auto& store = member_database(*this, member_store());
    return store.url() + '\0' + store.options().table_prefix;
}

locker_impl::member_token locker_impl::read_token(std::string const& name, clock::time_point deadline) {
    auto& store = member_database(*this, member_store());
    return store.run("reading majority token of lock '" + name + "'",
                     [&](soci::session& s) {
                         auto read = store.dialect().majority_read(s, name);
                         if (!read) no_identity(store);
                         return member_token{std::move(read->identity), read->token};
                     },
                     {.io_deadline = deadline});
}

locker_impl::member_fast_write locker_impl::write_or_read_token(std::string const& name, std::int64_t token,
                                                                clock::time_point deadline) {
    auto& store = member_database(*this, member_store());
    return store.run("writing majority token of lock '" + name + "'",
                     [&](soci::session& s) {
                         auto w = store.dialect().majority_write_or_read(s, name, token);
                         if (w.won) return member_fast_write{true, {}};
                         if (!w.read) no_identity(store);
                         return member_fast_write{false, member_token{std::move(w.read->identity), w.read->token}};
                     },
                     {.io_deadline = deadline});
}

bool locker_impl::write_token(std::string const& name, std::int64_t token, std::string const& member_id,
                              clock::time_point deadline) {
    auto& store = member_database(*this, member_store());
    return store.run("settling majority token of lock '" + name + "'",
                     [&](soci::session& s) { return store.dialect().majority_write(s, name, token, member_id); },
                     {.io_deadline = deadline});
}

locker_impl::member_counters locker_impl::read_counters(clock::time_point deadline) {
    auto& store = member_database(*this, member_store());
    return store.run("reading the majority counters",
                     [&](soci::session& s) {
                         auto identity = store.dialect().majority_identity(s);
                         if (!identity) no_identity(store);
                         return member_counters{std::move(*identity), store.dialect().majority_read_all(s)};
                     },
                     {.io_deadline = deadline});
}

bool locker_impl::join(std::string const& member_id, std::vector<std::pair<std::string, std::int64_t>> const& seed,
                       clock::time_point deadline) {
    auto& store = member_database(*this, member_store());
    return store.run("seeding the majority counters",
                     [&](soci::session& s) { return store.dialect().majority_join(s, member_id, seed); },
                     {.io_deadline = deadline});
}

}  // namespace sqlock::detail
