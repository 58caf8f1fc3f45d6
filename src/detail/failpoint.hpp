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
#pragma once

#include <string_view>

namespace sqlock::detail {

#ifdef SQLOCK_FAILPOINTS
void failpoint(std::string_view name) noexcept;
#define SQLOCK_FAILPOINT(name) ::sqlock::detail::failpoint(name)
#else
#define SQLOCK_FAILPOINT(name) ((void)0)
#endif

}  // namespace sqlock::detail
