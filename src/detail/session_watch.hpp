// Internal: the watch on the sessions row locks pin, so that a session the
// server ends (pg_terminate_backend, KILL CONNECTION, a crash, its idle limit)
// is reported at once rather than at the holder's next keep-alive.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace soci {
class session;
}

namespace sqlock::detail {

class dialect;

/// One thread per store, started on first use, waits (epoll) on the sockets
/// of the watched sessions while no statement is in flight on them; watching,
/// pausing and unwatching change the epoll set from the caller's thread and
/// never wake it. A hang-up, a
/// socket error, or data that says the server ended the session (its last
/// error message; read by `dialect::read_idle`) calls that session's `ended`
/// once, from this thread, and ends its watch. Whoever runs a statement on a
/// watched session pauses the watch first (`pause`/`resume`), so the thread
/// never reads a socket a statement is using.
/// Thread safety: every member may be called from any thread.
class session_watch {
public:
    using ended_fn = std::function<void(std::string const& why)>;

    explicit session_watch(dialect const& d);
    /// Stops and joins the thread; in a forked child, leaves the parent's thread alone.
    ~session_watch();
    session_watch(session_watch const&) = delete;
    session_watch& operator=(session_watch const&) = delete;

    /// Watch `s`, which is idle; a ticket for the other calls, or 0 when `s`
    /// has no socket (nothing is watched). `ended` must not call back into this.
    [[nodiscard]] std::uint64_t watch(soci::session& s, ended_fn ended);
    /// Stop watching (waits while the thread reads the socket): `ended` is not called after this returns.
    void unwatch(std::uint64_t ticket) noexcept;
    /// A statement is about to run on the session: waits while the thread
    /// reads the socket, then leaves it alone until `resume`.
    void pause(std::uint64_t ticket) noexcept;
    void resume(std::uint64_t ticket) noexcept;

private:
    struct state;
    std::shared_ptr<state> state_;  // shared with the thread: the last `ended` may destroy this object
    int pid_;                       // the process that owns the thread
    std::thread thread_;
};

}  // namespace sqlock::detail
