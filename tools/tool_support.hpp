// sqlock command-line tools — what `sqlock` and `sqlock-reaper` share: one
// table of exit codes and their precedence, the exit code of each sqlock
// exception, messages made into one line, times printed in UTC.
// Built as the static library sqlock_tool_support (never installed).
#pragma once

#include <sqlock/lease.hpp>

#include <string>
#include <string_view>

namespace sqlock::tools {

/// Exit codes of both tools: sysexits.h meanings where one fits.
/// docs/cli.md ("Exit codes") documents them for users.
namespace exit_code {
inline constexpr int ok = 0;
inline constexpr int not_found = 1;     ///< sqlock release: there was no such lock
inline constexpr int usage = 64;        ///< EX_USAGE: bad flags, duration or URL; nothing was touched
inline constexpr int unavailable = 69;  ///< EX_UNAVAILABLE: a database unreachable, or it refused a statement
inline constexpr int software = 70;     ///< EX_SOFTWARE: an internal error (a bug)
inline constexpr int conflict = 75;     ///< EX_TEMPFAIL: the lock is held (sqlock run --conflict-exit-code)
inline constexpr int lost = 76;         ///< sqlock run: the lock was lost while COMMAND ran
inline constexpr int config = 78;       ///< EX_CONFIG: the lock tables are missing
inline constexpr int cannot_execute = 126;
inline constexpr int command_not_found = 127;
}  // namespace exit_code

/// The more serious of two exit codes, for a tool that met several failures
/// (several --db): 70 (a bug), then 64 (the command line), then 78 (tables
/// missing: an operator must act), then 69 (a database did not answer or
/// refused a statement), then any other non-zero code, then 0. Between two
/// codes of the same rank, `a`.
[[nodiscard]] int most_serious(int a, int b) noexcept;

/// The exit code for the exception being handled (call it inside a catch):
/// usage_error 64, schema_missing 78, lease_lost 76, any other sqlock::error
/// (backend_unavailable, backend_error, in_doubt, timeout, ...) 69, anything
/// else 70.
[[nodiscard]] int exit_code_of_current_exception() noexcept;

/// A message made into one line: runs of whitespace become one space, without
/// the library's "sqlock: " prefix and SOCI's "Cannot establish connection to
/// the database." preamble (the engine's own words follow it).
[[nodiscard]] std::string one_line(std::string_view message);

/// Prints "<program>: <one_line(message)>" and a newline on stderr and flushes.
void print_error(std::string_view program, std::string_view message);

/// What `<program> --version` prints: "<program> X.Y.Z (lock tables: protocol N)".
[[nodiscard]] std::string version_text(std::string_view program);

/// 2024-05-01T12:34:56.789Z (UTC, milliseconds).
[[nodiscard]] std::string iso8601(sqlock::db_time t);

}  // namespace sqlock::tools
