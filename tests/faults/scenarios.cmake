# sqlock reliability battery — the load-and-fault scenarios (tests/faults/battery_*.{hpp,cpp}).
# Included at the end of tests/faults/CMakeLists.txt, which defines the checker library sqlock_battery.
#   sqlock_battery_worker  one load process of a scenario (histories, fenced and unfenced writes; --mode reaper)
#   sqlock_battery_tests   the scenarios: Engines/BatteryConformance.<Test>/<engine> (B01, B03, E01, E03),
#                          BatteryIsolation.<Test> and BatteryIsolationServer.<Test> (B01 variants; the
#                          latter sets MariaDB globals, so runs alone) (labels conformance;battery),
#                          Engines/BatteryFaults.<Test>/<engine> (B02, B04, C01, C02) and
#                          BatteryMajority.<Test> (F01, F05) (labels fault-smoke;battery).
#   sqlock_majority_battery_tests  BatteryMajorityF.<Test>: F08, F09, the slow member, F10 (fault-smoke;battery).
# Same server variables and CI rule as sqlock_engine_tests, plus SQLOCK_TEST_PG2_URL (the fenced resource, and
# a majority member). The soak tier: SQLOCK_SOAK=1 ctest --test-dir build -L battery (durations ×10, random
# seeds); SQLOCK_BATTERY_SEED=<n> replays a printed seed. sqlock_battery_worker links sqlock_failpoints (the
# library with failpoints, top-level CMakeLists.txt): the killpoint scenarios stop it at a failpoint.
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3.2 CONFIG REQUIRED)

add_executable(sqlock_battery_worker ${CMAKE_CURRENT_LIST_DIR}/battery_worker.cpp)
target_link_libraries(sqlock_battery_worker PRIVATE sqlock_battery sqlock_failpoints SOCI::soci CLI11::CLI11
                                                    nlohmann_json::nlohmann_json Threads::Threads)
sqlock_test_target(sqlock_battery_worker)

add_executable(sqlock_battery_tests ${CMAKE_CURRENT_LIST_DIR}/battery_suite.cpp)
target_link_libraries(sqlock_battery_tests PRIVATE sqlock_battery sqlock::sqlock SOCI::soci GTest::gtest
                                                   GTest::gtest_main Threads::Threads nlohmann_json::nlohmann_json)
target_compile_definitions(sqlock_battery_tests
                           PRIVATE "SQLOCK_BATTERY_WORKER=\"$<TARGET_FILE:sqlock_battery_worker>\"")
add_dependencies(sqlock_battery_tests sqlock_battery_worker)
sqlock_test_target(sqlock_battery_tests)

# Labels set after discovery by main's sqlock_discover_tests (CMake < 3.28 flattens a list-valued LABELS).
sqlock_discover_tests(sqlock_battery_tests NAME sqlock_battery_conformance
                      FILTER "Engines/BatteryConformance.*:BatteryIsolation.*-Engines/BatteryConformance.B03_*"
                      LABELS conformance battery TIMEOUT 2400)
# B03 (2 × 50 threads holding a lock each) and B02 (4 × 64 threads) need a few hundred server connections
# between them, their fenced resource's included: alone, never beside another test (two B03 runs at once
# exhausted PostgreSQL's max_connections and their renewals failed).
sqlock_discover_tests(sqlock_battery_tests NAME sqlock_battery_conformance_heavy FILTER "Engines/BatteryConformance.B03_*"
                      LABELS conformance battery TIMEOUT 600 SERIAL)
sqlock_discover_tests(sqlock_battery_tests NAME sqlock_battery_isolation_server FILTER "BatteryIsolationServer.*"
                      LABELS conformance battery TIMEOUT 600 SERIAL)
sqlock_discover_tests(sqlock_battery_tests NAME sqlock_battery_faults
                      FILTER "Engines/BatteryFaults.*:BatteryMajority.*-Engines/BatteryFaults.B02_*"
                      LABELS fault-smoke battery TIMEOUT 2400)
sqlock_discover_tests(sqlock_battery_tests NAME sqlock_battery_faults_heavy FILTER "Engines/BatteryFaults.B02_*"
                      LABELS fault-smoke battery TIMEOUT 600 SERIAL)

# kill -9 of a holder at an exact failpoint (killpoint_suite.cpp; plan §4.C01 b–e, §4.H02):
#   Engines/KillpointTable.<Test>/<engine>, Engines/KillpointRow.<Test>/<engine>,
#   Engines/KillpointRowLocked.<Test>/<engine> (labels fault-smoke;battery).
add_executable(sqlock_killpoint_tests ${CMAKE_CURRENT_LIST_DIR}/killpoint_suite.cpp)
target_link_libraries(sqlock_killpoint_tests PRIVATE sqlock_battery sqlock::sqlock SOCI::soci GTest::gtest
                                                     GTest::gtest_main Threads::Threads nlohmann_json::nlohmann_json)
target_compile_definitions(sqlock_killpoint_tests
                           PRIVATE "SQLOCK_BATTERY_WORKER=\"$<TARGET_FILE:sqlock_battery_worker>\"")
add_dependencies(sqlock_killpoint_tests sqlock_battery_worker)
sqlock_test_target(sqlock_killpoint_tests)
sqlock_discover_tests(sqlock_killpoint_tests NAME sqlock_killpoint FILTER "Engines/Killpoint*"
                      LABELS fault-smoke battery TIMEOUT 2400)

# Majority mode under the F-series faults (F08 split vote, F09 delays near the TTL, a slow member's late
# grants, F10 renewal on a minority and release with a member down): BatteryMajorityF.<Test>, labels
# fault-smoke;battery. Same servers as the majority scenarios above.
add_executable(sqlock_majority_battery_tests ${CMAKE_CURRENT_LIST_DIR}/majority_battery_suite.cpp)
target_link_libraries(sqlock_majority_battery_tests PRIVATE sqlock_battery sqlock::sqlock SOCI::soci GTest::gtest
                                                            GTest::gtest_main Threads::Threads
                                                            nlohmann_json::nlohmann_json fmt::fmt)
target_compile_definitions(sqlock_majority_battery_tests
                           PRIVATE "SQLOCK_BATTERY_WORKER=\"$<TARGET_FILE:sqlock_battery_worker>\"")
add_dependencies(sqlock_majority_battery_tests sqlock_battery_worker)
sqlock_test_target(sqlock_majority_battery_tests)
sqlock_discover_tests(sqlock_majority_battery_tests NAME sqlock_majority_battery FILTER "BatteryMajorityF.*"
                      LABELS fault-smoke battery TIMEOUT 600)
