# ---- process and session faults ----
# Included by tests/faults/CMakeLists.txt: the fault suites that kill, hang, fork, pause or skew one process or
# session (the battery's scenarios, checkers and nemeses are in the other *.cmake files here). Each program's
# guarantee is mapped in tests/README.md.

# ---- server crashes: kill -9 of a server or a backend ----
# sqlock_crash_tests: Engines/Crash.<Test>/<engine> (PostgreSQL and MariaDB) kill -9 the test servers
# (scripts/test-servers.sh crash, from SQLOCK_TEST_PG_CRASH / SQLOCK_TEST_MYSQL_CRASH) or a PostgreSQL backend:
# row-lock tokens never repeat across a crash, acknowledged table-lock grants survive one (also when the URL asks
# for synchronous_commit = off), MariaDB with innodb_flush_log_at_trx_commit != 1 is refused. Like the restart
# tests they break every connection to the servers: they run serially (RUN_SERIAL) and carry only the label
# "crash" (not "engine"), so `ctest -LE "restart|crash"` leaves them out; run them on servers of their own.
add_executable(sqlock_crash_tests crash_suite.cpp)
target_include_directories(sqlock_crash_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(sqlock_crash_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest GTest::gtest_main
                                                 Threads::Threads)
sqlock_test_target(sqlock_crash_tests)
sqlock_discover_tests(sqlock_crash_tests LABELS crash fault-smoke SERIAL)

# ---- safety: broken connections, errors on a held row lock, unknown outcomes, pinned pools ----
# sqlock_safety_tests: Engines/Safety.<Test>/<engine> (PostgreSQL and MariaDB), Engines/SafetyEveryEngine.<Test>/<engine>
# (SQLite too) and Engines/SafetyMariaDB.<Test>/mysql reproduce faults on the real servers: clean-up
# after a broken connection, an error on a row lock's transaction, unknown outcomes of release and acquire, a paused
# MariaDB acquire (sqlock_safety_worker stops itself at a failpoint), renewals and waits with a pinned pool, a stale
# row-locker connection. They end server sessions, but only those of their own stores (a PostgreSQL application_name,
# a MariaDB user of their own made over SQLOCK_TEST_MYSQL_SOCKET), so they share the servers with other tests.
# Same server variables and CI rule as sqlock_engine_tests.
add_executable(sqlock_safety_worker safety_worker.cpp)
target_include_directories(sqlock_safety_worker PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(sqlock_safety_worker PRIVATE sqlock_failpoints) # stops at mysql.acquire.after_call
sqlock_test_target(sqlock_safety_worker)
add_executable(sqlock_safety_tests safety_suite.cpp)
target_include_directories(sqlock_safety_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(sqlock_safety_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest GTest::gtest_main
                                                  Threads::Threads)
target_compile_definitions(sqlock_safety_tests
                           PRIVATE "SQLOCK_SAFETY_WORKER=\"$<TARGET_FILE:sqlock_safety_worker>\"")
add_dependencies(sqlock_safety_tests sqlock_safety_worker)
sqlock_test_target(sqlock_safety_tests)
sqlock_discover_tests(sqlock_safety_tests LABELS engine safety fault-smoke)

# ---- hangs and late answers ----
# sqlock_hang_tests: Engines/Hang.<Test>/<engine> — a renewal stuck on a silent server (fault_proxy stall()) is
# reported lost at the safe deadline and no call blocks without limit; a renewal answered after the safe deadline
# (fault_proxy delay()) does not revive the lease; SQLite BUSY under a row lock is busy within the caller's
# deadline; acquire(name, milliseconds::max()) waits; a SQLite database without WAL is refused; a forked child
# cannot release its parent's lease. Instances an item does not apply to skip, saying why. Same server variables
# and CI rule as sqlock_engine_tests.
add_executable(sqlock_hang_tests hang_suite.cpp)
target_include_directories(sqlock_hang_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(sqlock_hang_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest GTest::gtest_main
                                                Threads::Threads)
sqlock_test_target(sqlock_hang_tests)
sqlock_discover_tests(sqlock_hang_tests LABELS engine safety fault-smoke)

# ---- fork() ----
# sqlock_fork_tests: Engines/Fork.<Test>/<engine> — after fork(), parent and child (each with a store of its own)
# never both hold one lock, with try_acquire and a waiting acquire, also when a failpoint forces both to draw the
# same attempt id (and with one owner for both); a child that returns through main or calls exit() exits normally,
# and the parent's table and row locks stay held and renewable; the acquire statement takes no live row because
# it carries the caller's attempt id (a retry takes its own late-committed row). sqlock_fork_worker forks. Same server
# variables and CI rule as sqlock_engine_tests.
add_executable(sqlock_fork_worker fork_worker.cpp sanitized_fork.cpp)
target_include_directories(sqlock_fork_worker PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(sqlock_fork_worker PRIVATE sqlock_failpoints) # acquire.attempt_id forces a collision
sqlock_test_target(sqlock_fork_worker)
add_executable(sqlock_fork_tests fork_suite.cpp)
target_include_directories(sqlock_fork_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sqlock_fork_tests PRIVATE sqlock_internal SOCI::soci GTest::gtest GTest::gtest_main
                                                Threads::Threads)
target_compile_definitions(sqlock_fork_tests PRIVATE "SQLOCK_FORK_WORKER=\"$<TARGET_FILE:sqlock_fork_worker>\"")
add_dependencies(sqlock_fork_tests sqlock_fork_worker)
sqlock_test_target(sqlock_fork_tests)
# The forced collisions need the failpoint acquire.attempt_id (sqlock_failpoints): fault-smoke, not conformance,
# so that the release step's conformance run against libsqlock.so (no failpoints) leaves them out.
sqlock_discover_tests(sqlock_fork_tests NAME sqlock_fork_tests_conformance FILTER "-*ForcedAttemptCollision*"
                      LABELS engine fork conformance)
sqlock_discover_tests(sqlock_fork_tests NAME sqlock_fork_tests_failpoints FILTER "*ForcedAttemptCollision*"
                      LABELS engine fork fault-smoke)

# ---- watchdog and client clock ----
# sqlock_watchdog_tests: Engines/Watchdog.<Test>/<engine> — C04, a stuck worker whose watchdog still renews is
# bounded by locker_options::max_hold (table and row lock), and without it keeps the lock (the negative control).
add_executable(sqlock_watchdog_tests watchdog_suite.cpp)
target_include_directories(sqlock_watchdog_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(sqlock_watchdog_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest GTest::gtest_main
                                                    Threads::Threads)
sqlock_test_target(sqlock_watchdog_tests)
sqlock_discover_tests(sqlock_watchdog_tests LABELS engine watchdog fault-smoke)
# sqlock_client_clock_tests: C05, a client 90 s ahead (libfaketime) cannot take over a live lease on PostgreSQL or
# MariaDB; C06, a holder whose wall clock jumps keeps its renewal schedule (fault-smoke); Engines/Characterization.* asserts the documented SQLite limit (one host clock), run outside
# CI by scripts/battery.sh characterization.
add_executable(sqlock_client_clock_tests client_clock_suite.cpp)
target_include_directories(sqlock_client_clock_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(sqlock_client_clock_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest GTest::gtest_main
                                                        Threads::Threads)
target_compile_definitions(sqlock_client_clock_tests
                           PRIVATE "SQLOCK_TEST_WORKER=\"$<TARGET_FILE:sqlock_test_worker>\""
                                   "SQLOCK_TEST_CLOCK_SHIFT_LIB=\"$<TARGET_FILE:sqlock_test_clock_shift>\"")
add_dependencies(sqlock_client_clock_tests sqlock_test_worker sqlock_test_clock_shift)
sqlock_test_target(sqlock_client_clock_tests)
sqlock_discover_tests(sqlock_client_clock_tests NAME sqlock_client_clock_tests LABELS engine faults fault-smoke
                      FILTER "-Engines/Characterization.*")
sqlock_discover_tests(sqlock_client_clock_tests NAME sqlock_characterization_tests LABELS characterization
                      FILTER "Engines/Characterization.*")
