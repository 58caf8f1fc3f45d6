# A fleet mid-upgrade (issue 40): mixed_version_suite.cpp, clients of an older sqlock and of this tree on the
# same tables (docs/guarantees.md, "Two sqlock versions on the same tables"). Included by tests/faults/CMakeLists.txt.
#   sqlock_mixed_client        tests/mixed_version/mixed_client.cpp against this tree's library
#   MixedVersion.BuildOldClient  a ctest fixture (sqlock_old_client): scripts/old-client.sh builds the same source
#                              against the library of an older commit in <build>/old-client (needs the repository's
#                              history; instant once built). scripts/ci.sh builds it beside its model step.
#   sqlock_mixed_version_tests Engines/MixedVersion.*/<engine>_<table|row> (labels fault-smoke;faults;mixed-version;
#                              left out of the sanitizer run: the older client is not instrumented)
add_executable(sqlock_mixed_client ${PROJECT_SOURCE_DIR}/tests/mixed_version/mixed_client.cpp)
target_link_libraries(sqlock_mixed_client PRIVATE sqlock::sqlock)
sqlock_test_target(sqlock_mixed_client)

set(SQLOCK_OLD_CLIENT_DIR ${CMAKE_BINARY_DIR}/old-client)
add_test(NAME MixedVersion.BuildOldClient
         COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/old-client.sh ${SQLOCK_OLD_CLIENT_DIR})
set_tests_properties(MixedVersion.BuildOldClient PROPERTIES FIXTURES_SETUP sqlock_old_client TIMEOUT 1200
                                                            LABELS "fault-smoke;faults;mixed-version")

add_executable(sqlock_mixed_version_tests ${CMAKE_CURRENT_LIST_DIR}/mixed_version_suite.cpp)
target_include_directories(sqlock_mixed_version_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(sqlock_mixed_version_tests PRIVATE sqlock_battery sqlock::sqlock SOCI::soci GTest::gtest
                                                         GTest::gtest_main Threads::Threads)
target_compile_definitions(sqlock_mixed_version_tests
                           PRIVATE "SQLOCK_OLD_CLIENT=\"${SQLOCK_OLD_CLIENT_DIR}/mixed_client\""
                                   "SQLOCK_NEW_CLIENT=\"$<TARGET_FILE:sqlock_mixed_client>\"")
add_dependencies(sqlock_mixed_version_tests sqlock_mixed_client)
sqlock_test_target(sqlock_mixed_version_tests)
sqlock_discover_tests(sqlock_mixed_version_tests LABELS fault-smoke faults mixed-version FIXTURE sqlock_old_client
                      TIMEOUT 300)
