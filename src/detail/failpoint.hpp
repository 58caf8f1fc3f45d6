// Internal: failpoints, to place a fault exactly where a test needs it.
//
// Compiled in only in sqlock_failpoints, the test-only copy of the library
// that the fault tests' worker programs link (top-level CMakeLists.txt); the
// library users get and `cmake --install` installs never has them. There
// they act only when the environment variable SQLOCK_FAILPOINTS names them,
// read once per process: "name=action[,name=action...]" where action is
//   stop      raise(SIGSTOP): the process pauses until SIGCONT
//   kill      raise(SIGKILL): the process dies on the spot
//   sleep:MS  sleep MS milliseconds
//   value:N   a number the code reads at that point (SQLOCK_FAILPOINT_VALUE)
#pragma once

#include <optional>
#include <string_view>

namespace sqlock::detail {

#ifdef SQLOCK_FAILPOINTS
void failpoint(std::string_view name) noexcept;
/// The N of a failpoint set to "value:N", else empty.
std::optional<long long> failpoint_value(std::string_view name) noexcept;
#define SQLOCK_FAILPOINT(name) ::sqlock::detail::failpoint(name)
#define SQLOCK_FAILPOINT_VALUE(name) ::sqlock::detail::failpoint_value(name)
#else
#define SQLOCK_FAILPOINT(name) ((void)0)
#define SQLOCK_FAILPOINT_VALUE(name) (std::optional<long long>{})
#endif

}  // namespace sqlock::detail
