#include "detail/store_impl.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/store.hpp>
#include <sqlock/version.hpp>

#include <soci/soci.h>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <thread>

namespace sqlock {

std::string_view to_string(engine e) noexcept {
    switch (e) {
        case engine::postgresql: return "postgresql";
        case engine::mysql: return "mysql";
        case engine::sqlite: return "sqlite";
    }
    return "unknown";
}

std::string redact_url(std::string_view url) { return detail::redact_url(url); }

std::string schema_sql(engine e, std::string_view table_prefix) {
    detail::validate_table_prefix(table_prefix);
    return detail::apply_prefix(detail::embedded_schema(e), table_prefix);
}

store::store(std::string_view url, store_options const& options)
    : impl_(detail::make_fork_safe<detail::store_impl>(url, options)) {}

store::~store() = default;

engine store::engine() const noexcept { return impl_->engine(); }
std::string const& store::url() const noexcept { return impl_->url(); }
std::string store::schema_sql() const { return impl_->dialect().schema_sql(); }
void store::create_schema() { impl_->create_schema(); }
store_stats store::stats() const noexcept { return impl_->stats(); }
server_info store::server() const {
    // Learned by the store's first connection, which its constructor opened.
    return impl_->dialect().server().value_or(server_info{});
}

}  // namespace sqlock

namespace sqlock::detail {
namespace {

using namespace std::chrono_literals;

void validate(store_options const& o) {
    if (o.pool_size < 1 || o.pool_size > 1024)
        throw usage_error("sqlock: pool_size " + std::to_string(o.pool_size) + " is out of range: use 1..1024");
    if (o.connect_timeout <= 0ms || o.connect_timeout > 10min)
        throw usage_error("sqlock: connect_timeout must be within (0, 10 min]");
    if (o.lock_wait_timeout < 1ms || o.lock_wait_timeout > 10min)
        throw usage_error("sqlock: lock_wait_timeout must be within [1 ms, 10 min]");
    if (o.pool_wait < 0ms) throw usage_error("sqlock: pool_wait must not be negative");
    if (o.io_timeout < 100ms || o.io_timeout > 1h)
        throw usage_error("sqlock: io_timeout " + std::to_string(o.io_timeout.count()) +
                          " ms is out of range: use 100 ms .. 1 h");
    validate_table_prefix(o.table_prefix);
}

// Renewals and token draws get connections nothing else can take: a pool pinned
// by row-lock holders or busy with acquires must not delay them.
constexpr std::size_t reserved_pool_size = 2;

}  // namespace

store_impl::store_impl(std::string_view url, store_options const& options, unchecked_t)
    : pid_(process_id()),
      options_((validate(options), options)),
      url_(redact_url(url)),
      dialect_(make_dialect(parse_url(url).engine, options.table_prefix, options)),
      connect_string_(dialect_->connect_string(parse_url(url))),
      main_(options.pool_size),
      reserved_(reserved_pool_size),
      metrics_(metrics_or_global(options.metrics)) {}

store_impl::store_impl(std::string_view url, store_options const& options) : store_impl(url, options, unchecked_t{}) {
    // The first connection (the next run) learns which server this is and refuses one too old.
    dialect_->refuse_unsupported();
    auto const params = parse_url(url).params;
    if (auto const single = params.find("galera_single_writer"); single != params.end())
        options_.galera_single_writer = single->second == "true";
    auto const pooling = params.find("pooling");
    // A run of its own, so that its round trips (a second connection behind a proxy) have their own bound.
    run("opening the store", [&](soci::session& s) {
        dialect_->check_pooling(s, connect_string_, pooling == params.end() ? "" : pooling->second, url_);
        return 0;
    });
    run("opening the store", [&](soci::session& s) {
        multi_writer_cluster_ = dialect_->multi_writer_cluster(s);
        if (!options_.allow_relaxed_durability) {
            if (auto relaxed = dialect_->relaxed_durability(s))
                throw backend_error("sqlock: " + url_ + " does not make commits durable (" + *relaxed +
                                    "): a crash could lose acknowledged grants and hand a fencing token out "
                                    "twice; make commits durable, or open the store with "
                                    "allow_relaxed_durability = true if you accept that");
        }
        return 0;
    });
    // Tables of a newer protocol first, before create_schema could add to them: a client of an
    // older protocol beside newer ones could break exclusion or repeat a token.
    auto const stored = run("checking the protocol", [&](soci::session& s) { return dialect_->stored_protocol(s); });
    if (stored && *stored > protocol_version())
        throw protocol_mismatch("sqlock: the lock tables in " + url_ + " (table prefix '" + options_.table_prefix +
                                "') speak sqlock protocol " + std::to_string(*stored) + ", newer than this sqlock " +
                                std::string(version()) + " speaks (protocol " + std::to_string(protocol_version()) +
                                "): upgrade sqlock in this program to a release that speaks protocol " +
                                std::to_string(*stored) + "; nothing was changed");
    // The schema's check in a run of its own too: a query per table, procedure and added column,
    // each a round trip, which must fit in one run's bound behind a slow link.
    auto missing = run("checking the schema", [&](soci::session& s) { return dialect_->missing_table(s); });
    if (!missing.empty() && options_.create_schema) {
        create_schema();
        missing = run("checking the schema", [&](soci::session& s) { return dialect_->missing_table(s); });
    }
    if (auto dot = missing.find('.'); dot != std::string::npos) {
        auto const table = missing.substr(0, dot);
        auto const space = missing.find(' ', dot);
        auto const column = missing.substr(dot + 1, space - dot - 1);
        throw schema_missing("sqlock: table '" + table + "' in " + url_ + " has no column '" + column +
                                 "' (it was created by an older sqlock): run ALTER TABLE " + table + " ADD COLUMN " +
                                 missing.substr(dot + 1) +
                                 ", or drop the lock tables while no lock is held and apply " + schema_file(engine()) +
                                 " again",
                             "");
    }
    if (!missing.empty())
        throw schema_missing("sqlock: '" + missing +
                             "' (a table, trigger or procedure of the schema) does not exist in " + url_ + ": apply " +
                             schema_file(engine()) +
                             " (sqlock schema --apply), or open the store with create_schema = true");
    // The reserved connections open now, not at the first renewal: a process
    // that takes many locks as it starts makes the server start a session for
    // each pooled connection, and a renewal queued behind those connects (a
    // server that forks slowly, a proxy that accepts slowly) ran past a short
    // lease. Both at once, so that each takes its own slot.
    auto first = borrow("opening the store's reserved connections", options_.pool_wait, true);
    auto second = borrow("opening the store's reserved connections", options_.pool_wait, true);
    metrics_store_id_ = metrics_->impl().add_store(url_, [this]() -> std::optional<double> {
        auto const s = stats();
        if (s.clock_samples == 0) return std::nullopt;
        return static_cast<double>(s.clock_skew.count()) / 1e6;
    });
}

store_impl::~store_impl() {
    if (metrics_store_id_ != 0) metrics_->impl().remove_store(metrics_store_id_);
    // Never runs in a forked child (make_fork_safe).
    for (auto* pool : {&main_, &reserved_}) {
        // The sessions close next and the server frees their statements then;
        // deallocating them one by one would cost a round trip each, and wait
        // without limit on a server that stopped answering.
        for (std::size_t pos = 0; pos < pool->prepared.size(); ++pos) drop_prepared(*pool, pos, true);
    }
}

void store_impl::create_schema() {
    // Services starting together race on the DDL (PostgreSQL reports a unique
    // violation in its catalog); the DDL is idempotent, so any such failure is retried.
    run("creating the schema", [&](soci::session& s) { dialect_->create_schema(s); }, {.idempotent = true});
}

connection store_impl::borrow(std::string_view what) { return borrow(what, options_.pool_wait); }

connection store_impl::borrow(std::string_view what, std::chrono::milliseconds wait, bool reserved) {
    auto& pool = reserved ? reserved_ : main_;
    std::size_t pos = 0;
    auto wait_ms = static_cast<int>(std::clamp<long long>(wait.count(), 0, INT32_MAX));
    if (!pool.pool.try_lease(pos, wait_ms)) pool_exhausted(what, wait_ms, reserved);
    return leased(pool, pos, what);
}

void store_impl::pool_exhausted(std::string_view what, long long waited_ms, bool reserved) const {
    throw timeout("sqlock: all " + std::to_string(reserved ? reserved_pool_size : options_.pool_size) +
                  (reserved ? " reserved" : "") + " pooled connections to " + url_ + " stayed busy for " +
                  std::to_string(waited_ms) + " ms during " + std::string(what) +
                  ": every held row lock pins one; raise store_options::pool_size or hold fewer leases at once");
}

connection store_impl::leased(slots& pool, std::size_t pos, std::string_view what) {
    connection c(*this, pool, pos);
    if (pool.open[pos] == 0) open_slot(pool, pos, what);
    return c;
}

std::optional<connection> store_impl::borrow_to_pin(std::string_view what, std::chrono::milliseconds wait,
                                                    std::stop_token const& cancel,
                                                    std::optional<clock::time_point> try_until) {
    bool const trying = wait <= std::chrono::milliseconds(0);
    if (!trying && !cancel.stop_possible()) return borrow(what, wait);
    // A try must not fail because another acquire's token draw holds a
    // connection for a moment (pool_size + 2 connections serve pool_size holders).
    // Waited for in slices: a lent connection may become pinned meanwhile (look
    // again), and a cancel is seen.
    constexpr auto slice = std::chrono::milliseconds(20);
    auto const start = clock::now();
    auto const until =
        trying ? std::min(start + options_.pool_wait, try_until.value_or(clock::time_point::max())) : start + wait;
    std::size_t pos = 0;
    for (;;) {
        if (cancel.stop_requested()) return std::nullopt;
        auto const now = clock::now();
        if (now >= until) break;
        if (trying && !try_until && main_.pinned.load(std::memory_order_relaxed) >= options_.pool_size) break;
        auto const step = std::min<clock::duration>(slice, until - now);
        auto const ms = std::max<long long>(1, std::chrono::ceil<std::chrono::milliseconds>(step).count());
        if (main_.pool.try_lease(pos, static_cast<int>(ms))) return leased(main_, pos, what);
    }
    if (main_.pool.try_lease(pos, 0)) return leased(main_, pos, what);
    pool_exhausted(what, std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start).count(), false);
}

connection store_impl::borrow_main_or_reserved(std::string_view what, std::chrono::milliseconds wait) {
    std::size_t pos = 0;
    if (!main_.pool.try_lease(pos, 0)) return borrow(what, wait, true);
    return leased(main_, pos, what);
}

void store_impl::drop_prepared(slots& pool, std::size_t pos, bool dead) noexcept {
    auto& prepared = pool.prepared[pos];
    if (!prepared) return;
    if (dead) {
        try {
            if (int fd = dialect_->socket_of(pool.pool.at(pos)); fd >= 0) ::shutdown(fd, SHUT_RDWR);
        } catch (...) {}
    }
    prepared.reset();  // SOCI's statements deallocate themselves and swallow errors
}

void connection::close() noexcept {
    owner_->drop_prepared(*pool_, pos_, true);
    try {
        session().close();
    } catch (...) {}
    mark_broken();
}

void store_impl::open_slot(slots& pool, std::size_t pos, std::string_view what) {
    auto& s = pool.pool.at(pos);
    // Reopening a broken connection: its statements go first (they refer to the old session).
    drop_prepared(pool, pos, true);
    try {
        s.close();
        dialect_->open(s, connect_string_);
        pool.open[pos] = 1;
    } catch (usage_error const&) {  // a setting the engine refused: the caller must fix it
        try {
            s.close();
        } catch (...) {}
        throw;
    } catch (std::exception const& e) {
        auto const* se = dynamic_cast<soci::soci_error const*>(&e);
        std::string message = se != nullptr ? se->get_error_message() : e.what();
        while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
        // Keep the engine's words, not SOCI's preamble.
        for (std::string_view preamble :
             {"Cannot establish connection to the database. ", "Cannot establish connection to the database.\n"})
            if (message.starts_with(preamble)) message.erase(0, preamble.size());
        try {
            s.close();
        } catch (...) {  // nothing left to close
        }
        throw backend_unavailable("sqlock: cannot connect to " + url_ + " (" + std::string(what) + "): " + message +
                                      ": check the URL, the credentials and that the server is up",
                                  se != nullptr ? dialect_->native_code(*se) : std::string{});
    }
}

store_impl::io_guard::io_guard(store_impl& store, soci::session& s, clock::time_point deadline)
    : deadlines_(&store.deadlines_), ticket_(0) {
    if (int fd = store.dialect_->socket_of(s); fd >= 0) ticket_ = deadlines_->arm(fd, deadline);
}

bool store_impl::io_guard::disarm() noexcept {
    if (ticket_ == 0) return false;
    return deadlines_->disarm(std::exchange(ticket_, 0));
}

io_deadlines::~io_deadlines() {
    if (thread_.joinable()) {
        thread_.request_stop();
        thread_.join();
    }
}

std::uint64_t io_deadlines::arm(int fd, clock::time_point deadline) {
    if (deadline == clock::time_point::max()) return 0;
    std::uint64_t ticket = 0;
    {
        std::lock_guard lock(mutex_);
        ticket = next_++;
        armed_.emplace(ticket, entry{fd, deadline, false});
        if (!thread_.joinable()) thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
        // Wake the thread only when it would sleep past this deadline.
        if (deadline >= planned_) return ticket;
        ++generation_;
    }
    cv_.notify_all();
    return ticket;
}

bool io_deadlines::disarm(std::uint64_t ticket) noexcept {
    std::lock_guard lock(mutex_);
    auto it = armed_.find(ticket);
    if (it == armed_.end()) return false;
    bool fired = it->second.fired;
    armed_.erase(it);
    return fired;
}

void io_deadlines::run(std::stop_token const& stop) {
    std::unique_lock lock(mutex_);
    while (!stop.stop_requested()) {
        auto const now = clock::now();
        auto next = clock::time_point::max();
        for (auto& [ticket, e] : armed_) {
            if (e.fired) continue;
            if (e.deadline <= now) {
                // Under the mutex: the guard that armed it cannot disarm, give the
                // connection back and see its descriptor reused meanwhile.
                ::shutdown(e.fd, SHUT_RDWR);
                e.fired = true;
            } else {
                next = std::min(next, e.deadline);
            }
        }
        auto const seen = generation_;
        planned_ = std::min(next, now + std::chrono::hours(1));
        cv_.wait_until(lock, stop, planned_, [&] { return generation_ != seen; });
        planned_ = clock::time_point::min();  // awake: it looks at every entry again
    }
}

release_hub& store_impl::hub() {
    std::call_once(listener_once_, [this] {
        // A multi-writer cluster (Galera): a waiter's mark would be a write on the busy row that
        // certification aborts against releases on other nodes, and a ring reaches one node's process
        // list only. No listener means no mark and no ring: waiters poll.
        if (multi_writer_cluster_) return;
        listener_ = dialect_->listen(connect_string_, [this](std::string_view name, bool heard) {
            if (heard) notifications_.fetch_add(1, std::memory_order_relaxed);
            hub_.announce(name);
        });
    });
    return hub_;
}

void store_impl::record_clock(std::int64_t db_us, std::chrono::system_clock::time_point before,
                              std::chrono::system_clock::time_point after) noexcept {
    using std::chrono::duration_cast;
    using std::chrono::microseconds;
    auto mid_us = duration_cast<microseconds>((before + (after - before) / 2).time_since_epoch()).count();
    auto sample = db_us - mid_us;
    // An exponentially weighted mean (1/8 per sample); the first sample seeds it.
    std::lock_guard lock(skew_mutex_);
    skew_us_ = skew_samples_++ == 0 ? sample : skew_us_ + (sample - skew_us_) / 8;
}

store_stats store_impl::stats() const noexcept {
    std::lock_guard lock(skew_mutex_);
    return {std::chrono::microseconds(skew_us_), skew_samples_, notifications_.load()};
}

std::uint64_t release_hub::generation(std::string_view name) {
    std::lock_guard lock(mutex_);
    return generations_[bucket(name)];
}

void release_hub::announce(std::string_view name) noexcept {
    {
        std::lock_guard lock(mutex_);
        if (name.empty()) {
            for (auto& g : generations_) ++g;
        } else {
            ++generations_[bucket(name)];
        }
    }
    cv_.notify_all();
}

void release_hub::wait(std::string_view name, std::uint64_t generation, clock::time_point until,
                       std::stop_token const& cancel) {
    std::unique_lock lock(mutex_);
    auto b = bucket(name);
    cv_.wait_until(lock, cancel, until, [&] { return generations_[b] != generation; });
}

std::size_t release_hub::bucket(std::string_view name) noexcept {
    return std::hash<std::string_view>{}(name) % std::tuple_size_v<decltype(generations_)>;
}

}  // namespace sqlock::detail
