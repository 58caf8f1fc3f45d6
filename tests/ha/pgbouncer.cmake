# sqlock behind PgBouncer 1.18 (scripts/ha/pgbouncer.sh; docs/ha/pgbouncer.md): session pooling works unchanged,
# transaction pooling is found and refused.
#   sqlock_ha_pgbouncer_tests  PgBouncer.* (fixture ha_pgbouncer, serial: the tests reset the shared pool);
#                              labels ha;fault-smoke, the characterization UncheckedTransactionPoolingBreaks ha only
sqlock_ha_topology(pgbouncer pgbouncer.sh)
add_executable(sqlock_ha_pgbouncer_tests ${CMAKE_CURRENT_LIST_DIR}/pgbouncer_suite.cpp)
target_include_directories(sqlock_ha_pgbouncer_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..
                                                             ${CMAKE_CURRENT_LIST_DIR}/../faults)
target_link_libraries(sqlock_ha_pgbouncer_tests PRIVATE sqlock_battery sqlock::sqlock SOCI::soci GTest::gtest
                                                        GTest::gtest_main Threads::Threads)
target_compile_definitions(sqlock_ha_pgbouncer_tests
                           PRIVATE "SQLOCK_HA_PGBOUNCER_DIR=\"${SQLOCK_HA_DIR_pgbouncer}\""
                                   "SQLOCK_HA_PGBOUNCER_SCRIPT=\"${PROJECT_SOURCE_DIR}/scripts/ha/pgbouncer.sh\""
                                   "SQLOCK_BATTERY_WORKER=\"$<TARGET_FILE:sqlock_battery_worker>\"")
add_dependencies(sqlock_ha_pgbouncer_tests sqlock_battery_worker)
sqlock_test_target(sqlock_ha_pgbouncer_tests)
sqlock_discover_tests(sqlock_ha_pgbouncer_tests NAME sqlock_ha_pgbouncer FILTER -PgBouncer.UncheckedTransactionPoolingBreaks
                      LABELS ha fault-smoke FIXTURE ha_pgbouncer SERIAL TIMEOUT 180)
sqlock_discover_tests(sqlock_ha_pgbouncer_tests NAME sqlock_ha_pgbouncer_characterization
                      FILTER PgBouncer.UncheckedTransactionPoolingBreaks LABELS ha FIXTURE ha_pgbouncer SERIAL
                      TIMEOUT 180)
