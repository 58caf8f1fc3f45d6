// What a test worker that forks a multi-threaded process does under AddressSanitizer, whose runtime in
// Clang 14 (and 16: Debian 12's) does not take its allocator's locks across fork(): a lock that another
// thread held at the fork (a renewal or listener thread, or one starting up, in malloc) stays held in the
// child, whose next malloc or free then waits for ever. The workers already run with detect_leaks=0
// (fork_suite.cpp, fork_checks.hpp), for the same lock taken by LeakSanitizer's check at exit; this is
// the rest of it. Seen in CI as "child still running after 30 s" in
// Engines/Fork.ChildReturningThroughMainLeavesTheParentsLocks (stop 36, three of its six runs), and here
// in 2 of 6 runs of those tests under ASan: the child's stack ended in __sanitizer::FutexWait under
// free(), called by a shared library's destructor at exit. glibc's malloc is fork-safe: without a
// sanitizer nothing here acts.
#pragma once

#include <chrono>

namespace sqlock_test {

/// Under AddressSanitizer: waits, at most `limit`, until every other thread of this process sleeps
/// (state S in /proc/self/task), so that none is inside the allocator when the caller forks next;
/// returns whether they did. A thread that wakes between the look and the fork can still hold a lock
/// there: the library's threads wake at their renewals (a third of the TTL apart), so this is rare,
/// not impossible. Without a sanitizer it returns true at once: a fork at any moment is the stronger
/// test of the library, whose own mutexes a parent's thread may hold at the fork.
bool settle_before_fork(std::chrono::milliseconds limit);

}  // namespace sqlock_test
