# `sqlock doctor` on the topologies (tests/ha/doctor_suite.cpp): a standby and synchronous replication
# (ha_patroni), asynchronous replication (ha_patroni_async), Galera nodes (ha_galera), transaction and session
# pooling (ha_pgbouncer). The fixtures are defined by galera.cmake, patroni.cmake and pgbouncer.cmake; this file
# may be included before them, so the topologies' dirs are named here as sqlock_ha_topology names them.
if(TARGET sqlock-cli)
  add_executable(sqlock_ha_doctor_tests ${CMAKE_CURRENT_LIST_DIR}/doctor_suite.cpp)
  target_include_directories(sqlock_ha_doctor_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(sqlock_ha_doctor_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest GTest::gtest_main Threads::Threads
                                                       nlohmann_json::nlohmann_json)
  target_compile_definitions(sqlock_ha_doctor_tests PRIVATE "SQLOCK_CLI=\"$<TARGET_FILE:sqlock-cli>\""
                                                            "SQLOCK_HA_BUILD_DIR=\"${CMAKE_BINARY_DIR}/ha\"")
  add_dependencies(sqlock_ha_doctor_tests sqlock-cli)
  sqlock_test_target(sqlock_ha_doctor_tests)
  # One cheap check per topology in CI's subset (fault-smoke); the rest `ha` only.
  sqlock_discover_tests(sqlock_ha_doctor_tests NAME sqlock_ha_doctor_patroni_smoke
                        FILTER "DoctorPatroni.LeaderIsSynchronousAndTheStandbysAreErrors"
                        LABELS ha fault-smoke FIXTURE ha_patroni SERIAL)
  sqlock_discover_tests(sqlock_ha_doctor_tests NAME sqlock_ha_doctor_patroni
                        FILTER "DoctorPatroni.*-DoctorPatroni.LeaderIsSynchronousAndTheStandbysAreErrors"
                        LABELS ha FIXTURE ha_patroni SERIAL)
  # Not in CI's subset: it would start a second Patroni cluster for one check.
  sqlock_discover_tests(sqlock_ha_doctor_tests NAME sqlock_ha_doctor_patroni_async FILTER "DoctorPatroniAsync.*"
                        LABELS ha FIXTURE ha_patroni_async SERIAL)
  sqlock_discover_tests(sqlock_ha_doctor_tests NAME sqlock_ha_doctor_galera FILTER "DoctorGalera.*"
                        LABELS ha fault-smoke FIXTURE ha_galera SERIAL)
  sqlock_discover_tests(sqlock_ha_doctor_tests NAME sqlock_ha_doctor_pgbouncer FILTER "DoctorPgBouncer.*"
                        LABELS ha fault-smoke FIXTURE ha_pgbouncer SERIAL)
endif()
