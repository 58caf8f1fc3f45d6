# sqlock reliability battery — the load-and-fault scenarios (tests/faults/battery_*.{hpp,cpp}).
# Included at the end of tests/faults/CMakeLists.txt, which defines the checker library sqlock_battery.
#   sqlock_battery_worker  one load process of a scenario (histories, fenced and unfenced writes; --mode reaper)
#   sqlock_battery_tests   the scenarios: Engines/BatteryConformance.<Test>/<engine> (B01, E01, E03; labels
#                          conformance;battery), Engines/BatteryFaults.<Test>/<engine> (C01, C02) and
#                          BatteryMajority.<Test> (F01, F05) (labels fault-smoke;battery).
# Same server variables and CI rule as sqlock_engine_tests, plus SQLOCK_TEST_PG2_URL (the fenced resource, and
# a majority member). The soak tier: SQLOCK_SOAK=1 ctest --test-dir build -L battery (durations ×10, random
# seeds); SQLOCK_BATTERY_SEED=<n> replays a printed seed. Failpoints (SQLOCK_FAILPOINTS) must be compiled in.
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3.2 CONFIG REQUIRED)

add_executable(sqlock_battery_worker ${CMAKE_CURRENT_LIST_DIR}/battery_worker.cpp)
target_link_libraries(sqlock_battery_worker PRIVATE sqlock_battery sqlock::sqlock SOCI::soci CLI11::CLI11
                                                    nlohmann_json::nlohmann_json Threads::Threads)
sqlock_test_target(sqlock_battery_worker)

add_executable(sqlock_battery_tests ${CMAKE_CURRENT_LIST_DIR}/battery_suite.cpp)
target_link_libraries(sqlock_battery_tests PRIVATE sqlock_battery sqlock::sqlock SOCI::soci GTest::gtest
                                                   GTest::gtest_main Threads::Threads nlohmann_json::nlohmann_json)
target_compile_definitions(sqlock_battery_tests
                           PRIVATE "SQLOCK_BATTERY_WORKER=\"$<TARGET_FILE:sqlock_battery_worker>\"")
add_dependencies(sqlock_battery_tests sqlock_battery_worker)
sqlock_test_target(sqlock_battery_tests)

gtest_discover_tests(sqlock_battery_tests
  TEST_FILTER "Engines/BatteryConformance.*"
  NO_PRETTY_VALUES # names stay Engines/<Suite>.<Test>/<engine>
  TEST_LIST sqlock_battery_conformance_list
  DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 2400 LABELS "conformance;battery")
gtest_discover_tests(sqlock_battery_tests
  TEST_FILTER "Engines/BatteryFaults.*:BatteryMajority.*"
  NO_PRETTY_VALUES
  TEST_LIST sqlock_battery_faults_list
  DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 2400 LABELS "fault-smoke;battery")
# CMake < 3.28 flattens a list-valued LABELS in gtest_discover_tests: set the lists again after discovery.
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/sqlock_battery_labels.cmake"
  "if(DEFINED sqlock_battery_conformance_list AND NOT sqlock_battery_conformance_list STREQUAL \"\")\n"
  "  set_tests_properties(\${sqlock_battery_conformance_list} PROPERTIES LABELS \"conformance;battery\")\n"
  "endif()\n"
  "if(DEFINED sqlock_battery_faults_list AND NOT sqlock_battery_faults_list STREQUAL \"\")\n"
  "  set_tests_properties(\${sqlock_battery_faults_list} PROPERTIES LABELS \"fault-smoke;battery\")\n"
  "endif()\n")
set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${CMAKE_CURRENT_BINARY_DIR}/sqlock_battery_labels.cmake")
