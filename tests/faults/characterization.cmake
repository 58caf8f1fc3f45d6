# sqlock_characterization_suite_tests (issue 13, characterization tier): tests that assert a documented limit
# really happens (docs/guarantees.md, "Not promised" and the P11 limits). Run outside CI by
# scripts/battery.sh characterization (label "characterization"); serial, since one kills the MariaDB test server.
#   Engines/Characterization.RelaxedDurabilityLosesAcknowledgedGrants/mysql  plan §4 D02: with
#     innodb_flush_log_at_trx_commit = 0 and allow_relaxed_durability, kill -9 of the server loses acknowledged
#     grants or hands a token out twice (SQLOCK_TEST_MYSQL_CRASH, SQLOCK_TEST_MYSQL_SOCKET).
#   MajorityCharacterization.MemberLosingItsRowsAndRejoiningAtOnceGivesTwoHolders  plan F06 without delayed
#     rejoin: a member that forgets a live grant lets a second client form a majority (SQLOCK_TEST_PG_URL,
#     SQLOCK_TEST_PG2_URL, SQLOCK_TEST_MYSQL_URL, each through a fault proxy).
# Included by tests/faults/CMakeLists.txt.
add_executable(sqlock_characterization_suite_tests ${CMAKE_CURRENT_SOURCE_DIR}/characterization_suite.cpp)
target_include_directories(sqlock_characterization_suite_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/..)
target_link_libraries(sqlock_characterization_suite_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest
                                                                  GTest::gtest_main Threads::Threads)
sqlock_test_target(sqlock_characterization_suite_tests)
sqlock_discover_tests(sqlock_characterization_suite_tests LABELS characterization SERIAL TIMEOUT 600)

#   FailoverCharacterization.AsyncStandbyPromotedLosesAnAcknowledgedGrant  plan §4 D09: a private PostgreSQL
#     primary (scripts/test-servers.sh) and an asynchronous standby streaming through a fault proxy; the stalled
#     stream loses A's acknowledged grant when the primary is killed and the standby promoted.
add_executable(sqlock_failover_characterization_tests ${CMAKE_CURRENT_SOURCE_DIR}/failover_suite.cpp)
target_include_directories(sqlock_failover_characterization_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/..)
target_link_libraries(sqlock_failover_characterization_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest
                                                                     GTest::gtest_main Threads::Threads)
target_compile_definitions(sqlock_failover_characterization_tests PRIVATE
  "SQLOCK_TEST_SERVERS_SCRIPT=\"${CMAKE_CURRENT_SOURCE_DIR}/../../scripts/test-servers.sh\"")
sqlock_test_target(sqlock_failover_characterization_tests)
sqlock_discover_tests(sqlock_failover_characterization_tests LABELS characterization SERIAL TIMEOUT 600)
