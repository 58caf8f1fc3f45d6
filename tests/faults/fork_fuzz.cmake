# The fork nemesis and the randomized operation fuzzer (issue 18; fork_nemesis_suite.cpp, fuzz_suite.cpp,
# fork_checks.hpp): battery_worker --fuzz processes under the battery harness, judged by K1–K9.
#   Engines/ForkNemesis.<Test>/<engine>, Engines/Fuzz.<Test>/<engine>   labels fault-smoke;battery
# Fixed seeds in CI; `bash scripts/battery.sh soak` runs random ones. The worker (sqlock_battery_worker) links
# sqlock_failpoints: its failpoints widen renew() and release() so that a fork lands inside them.
add_executable(sqlock_fork_fuzz_tests ${CMAKE_CURRENT_LIST_DIR}/fork_nemesis_suite.cpp
                                      ${CMAKE_CURRENT_LIST_DIR}/fuzz_suite.cpp)
target_link_libraries(sqlock_fork_fuzz_tests PRIVATE sqlock_battery sqlock::sqlock SOCI::soci GTest::gtest
                                                     GTest::gtest_main Threads::Threads nlohmann_json::nlohmann_json)
target_compile_definitions(sqlock_fork_fuzz_tests
                           PRIVATE "SQLOCK_BATTERY_WORKER=\"$<TARGET_FILE:sqlock_battery_worker>\"")
add_dependencies(sqlock_fork_fuzz_tests sqlock_battery_worker)
sqlock_test_target(sqlock_fork_fuzz_tests)
sqlock_discover_tests(sqlock_fork_fuzz_tests NAME sqlock_fork_nemesis FILTER "Engines/ForkNemesis.*"
                      LABELS fault-smoke battery TIMEOUT 600)
sqlock_discover_tests(sqlock_fork_fuzz_tests NAME sqlock_fuzz FILTER "Engines/Fuzz.*"
                      LABELS fault-smoke battery TIMEOUT 600)
