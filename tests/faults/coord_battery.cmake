# Semaphores, read-write locks and elections (issue 22) under the battery's fault nemeses (coord_battery_suite.cpp),
# judged by K1–K9 and the coordination checkers (coord_checkers.hpp, in sqlock_battery; self-tested by
# sqlock_battery_selftest). The workers are sqlock_battery_worker with --kind (SQLOCK_BATTERY_KIND).
#   sqlock_coord_battery_tests  Engines/CoordFaults.<Test>/<engine> and
#                               Engines/CoordFaultsRow.<Test>/<engine> (kill -9, SIGSTOP past the TTL, session kill;
#                               labels fault-smoke;battery), Engines/CoordServerCrash.<Test>/<engine> (a private
#                               PostgreSQL or MariaDB killed with SIGKILL and restarted; labels
#                               fault-smoke;battery;crash, serial)
# Fixed seeds in CI; SQLOCK_SOAK=1 (bash scripts/battery.sh soak) runs random seeds and 10× durations.
add_executable(sqlock_coord_battery_tests ${CMAKE_CURRENT_LIST_DIR}/coord_battery_suite.cpp)
target_include_directories(sqlock_coord_battery_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(sqlock_coord_battery_tests PRIVATE sqlock_battery sqlock::sqlock SOCI::soci GTest::gtest
                                                          GTest::gtest_main Threads::Threads
                                                          nlohmann_json::nlohmann_json fmt::fmt)
target_compile_definitions(sqlock_coord_battery_tests PRIVATE
  "SQLOCK_BATTERY_WORKER=\"$<TARGET_FILE:sqlock_battery_worker>\""
  "SQLOCK_TEST_SERVERS_SCRIPT=\"${CMAKE_CURRENT_LIST_DIR}/../../scripts/test-servers.sh\"")
add_dependencies(sqlock_coord_battery_tests sqlock_battery_worker)
sqlock_test_target(sqlock_coord_battery_tests)
sqlock_discover_tests(sqlock_coord_battery_tests NAME sqlock_coord_faults FILTER "Engines/CoordFaults*"
                      LABELS fault-smoke battery TIMEOUT 600)
sqlock_discover_tests(sqlock_coord_battery_tests NAME sqlock_coord_crash FILTER "Engines/CoordServerCrash.*"
                      LABELS fault-smoke battery crash SERIAL TIMEOUT 600)
