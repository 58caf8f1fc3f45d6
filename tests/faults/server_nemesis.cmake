# Server-side nemeses of the reliability battery (issue 13): D03 (the whole PostgreSQL or MariaDB server frozen by
# the cgroup v1 freezer), D04 (its clock jumps, libfaketime; PostgreSQL), D07 (a silent partition: netns + veth +
# nftables), on the table lock and the row lock. Each test starts a private PostgreSQL or MariaDB
# (scripts/test-servers.sh, SQLOCK_TEST_ENGINES=postgresql or mariadb) and needs
# root: skipped without it outside CI, failing under CI. RUN_SERIAL, labels "fault-smoke;nemesis".
#   sqlock_nemesis_worker        the partitioned holder of D07, run with `ip netns exec`
#   sqlock_server_nemesis_tests  ServerNemesis.*
add_executable(sqlock_nemesis_worker ${CMAKE_CURRENT_LIST_DIR}/nemesis_worker.cpp)
target_include_directories(sqlock_nemesis_worker PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(sqlock_nemesis_worker PRIVATE sqlock::sqlock SOCI::soci)
sqlock_test_target(sqlock_nemesis_worker)

add_executable(sqlock_server_nemesis_tests ${CMAKE_CURRENT_LIST_DIR}/server_nemesis_suite.cpp)
target_include_directories(sqlock_server_nemesis_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(sqlock_server_nemesis_tests PRIVATE sqlock_battery sqlock::sqlock SOCI::soci GTest::gtest
                                                          GTest::gtest_main Threads::Threads nlohmann_json::nlohmann_json)
target_compile_definitions(sqlock_server_nemesis_tests PRIVATE
  "SQLOCK_NEMESIS_WORKER=\"$<TARGET_FILE:sqlock_nemesis_worker>\""
  "SQLOCK_TEST_SERVERS_SCRIPT=\"${CMAKE_CURRENT_LIST_DIR}/../../scripts/test-servers.sh\"")
add_dependencies(sqlock_server_nemesis_tests sqlock_nemesis_worker)
sqlock_test_target(sqlock_server_nemesis_tests)
sqlock_discover_tests(sqlock_server_nemesis_tests LABELS fault-smoke nemesis SERIAL TIMEOUT 180)
