# Bad configuration (issue 13, plan §4.G, G07 "insufficient privileges"): bad_config_suite.cpp, on real servers
# (SQLOCK_TEST_PG_URL; SQLOCK_TEST_MYSQL_URL with SQLOCK_TEST_MYSQL_SOCKET for root, to make and drop users; same CI
# rule as sqlock_engine_tests: a missing engine fails under CI=true) and a SQLite file made immutable (chattr +i).
#   sqlock_bad_config_tests  Engines/BadConfig.*/{postgresql,mysql}, Engines/ReadOnlyDatabase.*/{postgresql,sqlite}
#                            (labels conformance;faults)
# Included by tests/faults/CMakeLists.txt.
add_executable(sqlock_bad_config_tests ${CMAKE_CURRENT_LIST_DIR}/bad_config_suite.cpp)
target_include_directories(sqlock_bad_config_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(sqlock_bad_config_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest GTest::gtest_main
                                                      Threads::Threads)
sqlock_test_target(sqlock_bad_config_tests)
sqlock_discover_tests(sqlock_bad_config_tests NAME sqlock_bad_config LABELS conformance faults TIMEOUT 120)
