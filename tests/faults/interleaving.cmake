# sqlock_interleaving_tests (issue 13, battery plan §4 B05 and E01 permutations 1–2): deterministic
# interleavings in the style of PostgreSQL's isolation tester. A raw SOCI session holds one side of a
# permutation inside an open transaction; the library (table_locker, reaper, lease::renew/release) runs the
# other on a thread of its own; the server itself (pg_stat_activity / pg_blocking_pids, innodb_lock_waits)
# says when the library's statement waits. Included by tests/faults/CMakeLists.txt.
add_executable(sqlock_interleaving_tests ${CMAKE_CURRENT_SOURCE_DIR}/interleaving_suite.cpp)
target_include_directories(sqlock_interleaving_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/..)
target_link_libraries(sqlock_interleaving_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest GTest::gtest_main
                                                        Threads::Threads)
sqlock_test_target(sqlock_interleaving_tests)
sqlock_discover_tests(sqlock_interleaving_tests LABELS engine conformance interleaving)
