// sqlock command — run's machinery for any lease: signals, COMMAND's process
// tree, its supervision while the lease is held and its end (cli/run.cpp).
// `run` (a lock, a permit, a shared lease) and `elect` (a leadership) use it.
#pragma once

#include <sqlock/lease.hpp>
#include <sqlock/stats.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

namespace sqlock::cli {

/// SQLOCK_* variables given to COMMAND (name, value), in this order.
using command_variables = std::vector<std::pair<std::string, std::string>>;

/// What COMMAND is told about its lease: SQLOCK_NAME (`name`, the user's),
/// SQLOCK_OWNER (the lease's owner id, without an election's value) and
/// SQLOCK_TOKEN (the lease's token), then `extra`.
[[nodiscard]] command_variables lease_variables(std::string const& name, sqlock::lease const& lease,
                                                command_variables extra = {});

/// Supervises COMMAND under a lease as `sqlock run` does. Build it before any
/// store or locker exists: it notes the descriptors COMMAND inherits and
/// blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD in every thread (they are read
/// through a signalfd from then on).
class supervisor {
public:
    supervisor();
    supervisor(supervisor const&) = delete;
    supervisor& operator=(supervisor const&) = delete;
    ~supervisor();

    /// For `locker_options::on_event` of the locker whose leases are supervised:
    /// reports losses and renewals of the lease being supervised.
    [[nodiscard]] std::function<void(sqlock::lease_event const&)> on_event() const;

    /// Runs `take` (which returns whether it got the lease) with a stop token
    /// requested by the first SIGINT, SIGTERM or SIGHUP; a `sqlock::cancelled`
    /// from it counts as interrupted. Returns that signal (0: none came). When
    /// one came after the lease was taken, the caller releases it.
    [[nodiscard]] int while_taking(std::function<bool(std::stop_token)> const& take);

    struct outcome {
        int code = 0;            ///< COMMAND's exit code (128+N when killed by signal N), or 76 (lost)
        bool lost = false;       ///< the lease was lost (or about to be) while COMMAND ran, or found lost at release
        bool signalled = false;  ///< SIGINT, SIGTERM or SIGHUP came while COMMAND ran
    };

    /// Starts COMMAND with `vars` added to its environment, renews nothing
    /// itself (the locker does) but watches `lease`: forwards signals to
    /// COMMAND's tree, stops the tree before the lease's safe deadline when it
    /// is lost or about to be, and releases `lease` when COMMAND exits.
    /// `what` names the lease in messages ("lock 'x' (token 7)"). On a loss
    /// while COMMAND runs: without `return_on_loss` exits 76 once the tree is
    /// gone (std::_Exit); with it, says `after_loss` and returns with `lost`
    /// (the lost lease is left as it is: never released nor destroyed, as its
    /// renewal may hang). COMMAND that cannot be started exits 126/127 (exit_error).
    [[nodiscard]] outcome run(std::vector<std::string> const& command, command_variables const& vars,
                              sqlock::lease& lease, std::chrono::milliseconds ttl, std::string const& what,
                              bool return_on_loss = false, std::string const& after_loss = {});

private:
    struct state;
    std::unique_ptr<state> state_;
};

/// For commands that run until a signal (`leader --watch`): blocks SIGINT,
/// SIGTERM and SIGHUP (build it before any store exists) and requests the
/// stop token when one of them comes.
class stop_on_signals {
public:
    stop_on_signals();
    stop_on_signals(stop_on_signals const&) = delete;
    stop_on_signals& operator=(stop_on_signals const&) = delete;
    ~stop_on_signals();

    [[nodiscard]] std::stop_token token() const noexcept;

private:
    struct state;
    std::unique_ptr<state> state_;
};

}  // namespace sqlock::cli
