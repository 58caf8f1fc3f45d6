# The CLI real-time checker (issue 18, item 3): tests/faults/cli_realtime_suite.cpp. Under `sqlock run`, a
# process of the old holder's COMMAND alive while the new holder's COMMAND runs is a violation; tried with a
# COMMAND that ignores SIGTERM, one whose child does, and one whose daemon left its session, while the first
# holder's connections are stalled after its first renewal (tests/fault_proxy.hpp).
#   sqlock_cli_realtime_tests  Engines/CliRealtime.<Test>/{postgresql,mysql} (labels fault-smoke;faults), on real
#                              servers (SQLOCK_TEST_PG_URL, SQLOCK_TEST_MYSQL_URL; a missing engine fails under CI=true)
# Included by tests/faults/CMakeLists.txt; needs the sqlock command (SQLOCK_BUILD_CLI).
if(TARGET sqlock-cli)
  add_executable(sqlock_cli_realtime_tests ${CMAKE_CURRENT_LIST_DIR}/cli_realtime_suite.cpp)
  target_include_directories(sqlock_cli_realtime_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(sqlock_cli_realtime_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest GTest::gtest_main
                                                          Threads::Threads)
  target_compile_definitions(sqlock_cli_realtime_tests PRIVATE "SQLOCK_CLI=\"$<TARGET_FILE:sqlock-cli>\"")
  add_dependencies(sqlock_cli_realtime_tests sqlock-cli)
  sqlock_test_target(sqlock_cli_realtime_tests)
  sqlock_discover_tests(sqlock_cli_realtime_tests LABELS fault-smoke faults TIMEOUT 300)
endif()
