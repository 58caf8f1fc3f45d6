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
gtest_discover_tests(sqlock_connfaults_tests
  TEST_FILTER "-Engines/ConnFaultsCrash.*"
  NO_PRETTY_VALUES # names stay Engines/<Suite>.<Test>/<engine>
  TEST_LIST sqlock_connfaults_tests_list
  DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 300 LABELS "fault-smoke;faults")
gtest_discover_tests(sqlock_connfaults_tests
  TEST_FILTER "Engines/ConnFaultsCrash.*"
  NO_PRETTY_VALUES
  TEST_LIST sqlock_connfaults_crash_tests_list
  DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE LABELS "crash")
# As tests/CMakeLists.txt does: CMake < 3.28 flattens a list-valued LABELS in gtest_discover_tests, so the
# labels (and RUN_SERIAL of the crash tests) are set again after discovery.
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/sqlock_connfaults_labels.cmake"
  "if(DEFINED sqlock_connfaults_tests_list AND NOT sqlock_connfaults_tests_list STREQUAL \"\")\n"
  "  set_tests_properties(\${sqlock_connfaults_tests_list} PROPERTIES LABELS \"fault-smoke;faults\")\n"
  "endif()\n"
  "if(DEFINED sqlock_connfaults_crash_tests_list AND NOT sqlock_connfaults_crash_tests_list STREQUAL \"\")\n"
  "  set_tests_properties(\${sqlock_connfaults_crash_tests_list} PROPERTIES LABELS \"crash\" RUN_SERIAL TRUE)\n"
  "endif()\n")
set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${CMAKE_CURRENT_BINARY_DIR}/sqlock_connfaults_labels.cmake")
