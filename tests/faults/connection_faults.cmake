# ---- connection and server faults (issue 13, plan §4.D) ----
# Included by tests/faults/CMakeLists.txt. sqlock_connfaults_tests, on real servers (SQLOCK_TEST_*_URL, same CI
# rule as sqlock_engine_tests: a missing engine fails under CI=true):
#   Engines/ConnFaults.<Test>/<engine>       a hung server (tests/fault_proxy.hpp blackhole, swallowed replies, RST)
#                                            on acquire, renew and release; pg_terminate_backend / KILL CONNECTION of
#                                            a table lock's pooled connection (between renewals, during a renewal);
#                                            row-lock loss and the old holder's fenced write; the CLI during an outage
#   Engines/ConnFaultsPostgres.<Test>/postgresql  the LISTEN connection killed under a parked waiter
#   Engines/FenceRace.<Test>/<engine>        fence atomicity: two open transactions driven step by step (SQLite too)
#   Engines/ConnFaultsCrash.<Test>/<engine>  kill -9 of the servers (scripts/test-servers.sh crash, from
#                                            SQLOCK_TEST_PG_CRASH / SQLOCK_TEST_MYSQL_CRASH): RUN_SERIAL, label
#                                            "crash" only, like sqlock_crash_tests.
# Labels "fault-smoke;faults" for all but the crash tests.
add_executable(sqlock_connfaults_tests connection_faults_suite.cpp)
target_include_directories(sqlock_connfaults_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(sqlock_connfaults_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest GTest::gtest_main
                                                      Threads::Threads)
if(TARGET sqlock-cli)
  target_compile_definitions(sqlock_connfaults_tests PRIVATE "SQLOCK_CLI=\"$<TARGET_FILE:sqlock-cli>\"")
  add_dependencies(sqlock_connfaults_tests sqlock-cli)
endif()
sqlock_test_target(sqlock_connfaults_tests)
# sqlock_discover_tests (tests/CMakeLists.txt) sets the label list again after discovery (CMake < 3.28 flattens a
# list-valued LABELS in gtest_discover_tests), and RUN_SERIAL for the crash tests. The crash tests are fault-smoke
# too: CI runs them (they kill -9 the server, a few seconds each), and they stay out of the sanitizer run (crash).
sqlock_discover_tests(sqlock_connfaults_tests NAME sqlock_connfaults_tests FILTER "-Engines/ConnFaultsCrash.*"
                      LABELS fault-smoke faults)
sqlock_discover_tests(sqlock_connfaults_tests NAME sqlock_connfaults_crash_tests FILTER "Engines/ConnFaultsCrash.*"
                      SERIAL LABELS crash fault-smoke)
