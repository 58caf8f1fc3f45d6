# Holder-side faults and the reaper (issue 13, plan §4.C03, §4.C07, §4.E02, §4.E04, §4.E05):
# holder_reaper_suite.cpp, on real servers (SQLOCK_TEST_PG_URL, SQLOCK_TEST_PG2_URL for C07's fenced resource,
# SQLOCK_TEST_MYSQL_URL; same CI rule as sqlock_engine_tests: a missing engine fails under CI=true).
#   sqlock_holder_worker        the child processes: a row-lock holder stopped at a failpoint (C03), one short
#                               life of the churn (C07), a reaper pass killed between batches (E05)
#   sqlock_holder_reaper_tests  Engines/HolderReaper.{C03,C07_RowHolder,C08,C09,C10,E05}_*/<engine> (labels
#                               fault-smoke;faults; C08 and C09 were left out of this filter until issue 39),
#                               Engines/HolderReaper.C07_ForkExecChurn/<engine> (fault-smoke;faults;battery) and
#                               Engines/HolderReaper.E04_*/<engine> (conformance;faults).
# sqlock_holder_worker links sqlock_failpoints (the library with failpoints, top-level CMakeLists.txt).
# Included by tests/faults/CMakeLists.txt.
add_executable(sqlock_holder_worker ${CMAKE_CURRENT_LIST_DIR}/holder_worker.cpp)
target_link_libraries(sqlock_holder_worker PRIVATE sqlock_battery sqlock_failpoints SOCI::soci CLI11::CLI11
                                                   nlohmann_json::nlohmann_json Threads::Threads)
sqlock_test_target(sqlock_holder_worker)

add_executable(sqlock_holder_reaper_tests ${CMAKE_CURRENT_LIST_DIR}/holder_reaper_suite.cpp)
target_include_directories(sqlock_holder_reaper_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(sqlock_holder_reaper_tests PRIVATE sqlock_battery sqlock::sqlock SOCI::soci GTest::gtest
                                                         GTest::gtest_main Threads::Threads
                                                         nlohmann_json::nlohmann_json)
target_compile_definitions(sqlock_holder_reaper_tests
                           PRIVATE "SQLOCK_HOLDER_WORKER=\"$<TARGET_FILE:sqlock_holder_worker>\"")
target_compile_definitions(sqlock_holder_reaper_tests
                           PRIVATE "SQLOCK_TEST_CLOCK_SHIFT_LIB=\"$<TARGET_FILE:sqlock_test_clock_shift>\"")
add_dependencies(sqlock_holder_reaper_tests sqlock_holder_worker sqlock_test_clock_shift)
if(TARGET sqlock-reaper)  # E02 runs the daemon; without it E02 is skipped
  target_compile_definitions(sqlock_holder_reaper_tests PRIVATE "SQLOCK_REAPER_BIN=\"$<TARGET_FILE:sqlock-reaper>\"")
  add_dependencies(sqlock_holder_reaper_tests sqlock-reaper)
endif()
sqlock_test_target(sqlock_holder_reaper_tests)
# Labels set after discovery by sqlock_discover_tests (CMake < 3.28 flattens a list-valued LABELS). The churn and
# E02 also carry "battery": the churn's K6 bound and E02's first-pass limit are calibrated for an optimised build,
# so scripts/sanitize.sh leaves them out like the other battery scenarios.
sqlock_discover_tests(sqlock_holder_reaper_tests NAME sqlock_holder_faults
                      FILTER "Engines/HolderReaper.C03_*:Engines/HolderReaper.C07_RowHolder*:Engines/HolderReaper.C08_*:Engines/HolderReaper.C09_*:Engines/HolderReaper.C10_*:Engines/HolderReaper.E05_*"
                      LABELS fault-smoke faults TIMEOUT 300)
sqlock_discover_tests(sqlock_holder_reaper_tests NAME sqlock_holder_churn
                      FILTER "Engines/HolderReaper.C07_ForkExecChurn*:Engines/HolderReaper.E02_*"
                      LABELS fault-smoke faults battery TIMEOUT 300)
sqlock_discover_tests(sqlock_holder_reaper_tests NAME sqlock_holder_conformance FILTER "Engines/HolderReaper.E04_*"
                      LABELS conformance faults TIMEOUT 300)
