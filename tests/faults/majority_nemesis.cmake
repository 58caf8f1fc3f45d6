# Majority mode with faults on real member servers (issue 13, plan §4.F): F02 (a member's server killed with
# SIGKILL and restarted), F03 (a member frozen by the cgroup v1 freezer), F04 (a majority black-holed by the fault
# proxies), F07 (a member's clock jumps: libfaketime in its postmaster). F02, F03 and F07 start a private
# PostgreSQL (scripts/test-servers.sh, SQLOCK_TEST_ENGINES=postgresql) besides the shared test servers; F03 needs
# root. RUN_SERIAL, labels "fault-smoke;majority;nemesis".
#   sqlock_majority_nemesis_tests  BatteryMajorityNemesis.*
add_executable(sqlock_majority_nemesis_tests ${CMAKE_CURRENT_LIST_DIR}/majority_nemesis_suite.cpp)
target_include_directories(sqlock_majority_nemesis_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(sqlock_majority_nemesis_tests PRIVATE sqlock_battery sqlock::sqlock SOCI::soci GTest::gtest
                                                             GTest::gtest_main Threads::Threads
                                                             nlohmann_json::nlohmann_json fmt::fmt)
target_compile_definitions(sqlock_majority_nemesis_tests PRIVATE
  "SQLOCK_BATTERY_WORKER=\"$<TARGET_FILE:sqlock_battery_worker>\""
  "SQLOCK_TEST_SERVERS_SCRIPT=\"${CMAKE_CURRENT_LIST_DIR}/../../scripts/test-servers.sh\"")
add_dependencies(sqlock_majority_nemesis_tests sqlock_battery_worker)
sqlock_test_target(sqlock_majority_nemesis_tests)
sqlock_discover_tests(sqlock_majority_nemesis_tests LABELS fault-smoke majority nemesis SERIAL TIMEOUT 300)
