# sqlock on a Patroni-managed PostgreSQL cluster (scripts/ha/patroni.sh): etcd, three PostgreSQL 15 nodes under
# Patroni, HAProxy routing to the leader. Two topologies: ha_patroni (synchronous_mode) and ha_patroni_async.
#   PatroniSync.LeaderPostmasterCrashKeepsTheGrantAndHandsTheLockOn, PatroniSync.AStandbyRefusesALockAsBackendUnavailable
#   PatroniSync.RowLockLeaderPostmasterCrashEndsTheHoldAndHandsTheLockOn
#     fault-smoke (CI): the leader's postmaster crash-restarted under a holder and waiters (table lock, row lock);
#     a standby's refusal typed
#   PatroniSync.FailoverKeepsAcknowledgedGrants, PatroniSync.RowLockFailoverEndsTheHoldsAndHandsTheLocksOn
#     ha: a real failover through the host list and through HAProxy (table lock, row lock)
#   PatroniAsync.FailoverToALaggingReplicaLosesAGrant   ha, characterization: the async loss, asserted
sqlock_ha_topology(patroni patroni.sh)
sqlock_ha_topology(patroni_async patroni.sh --async)

add_executable(sqlock_ha_patroni_tests ${CMAKE_CURRENT_SOURCE_DIR}/patroni_suite.cpp)
target_include_directories(sqlock_ha_patroni_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests ${PROJECT_SOURCE_DIR}/tests/faults)
target_link_libraries(sqlock_ha_patroni_tests PRIVATE sqlock::sqlock sqlock_battery SOCI::soci GTest::gtest
                                                      GTest::gtest_main Threads::Threads)
target_compile_definitions(sqlock_ha_patroni_tests PRIVATE
  "SQLOCK_HA_DIR_PATRONI=\"${SQLOCK_HA_DIR_patroni}\"" "SQLOCK_HA_DIR_PATRONI_ASYNC=\"${SQLOCK_HA_DIR_patroni_async}\""
  "SQLOCK_HA_SCRIPTS=\"${PROJECT_SOURCE_DIR}/scripts/ha\"")
sqlock_test_target(sqlock_ha_patroni_tests)
sqlock_discover_tests(sqlock_ha_patroni_tests NAME sqlock_ha_patroni_smoke LABELS ha fault-smoke FIXTURE ha_patroni SERIAL
  FILTER "PatroniSync.LeaderPostmaster*:PatroniSync.RowLockLeaderPostmaster*:PatroniSync.AStandby*" TIMEOUT 180)
sqlock_discover_tests(sqlock_ha_patroni_tests NAME sqlock_ha_patroni_failover LABELS ha FIXTURE ha_patroni SERIAL
  FILTER "PatroniSync.Failover*:PatroniSync.RowLockFailover*" TIMEOUT 400)
sqlock_discover_tests(sqlock_ha_patroni_tests NAME sqlock_ha_patroni_async LABELS ha characterization
  FIXTURE ha_patroni_async SERIAL FILTER "PatroniAsync.*" TIMEOUT 400)
