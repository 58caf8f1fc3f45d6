# The file-system nemesis (issue 38): tests/faults/file_nemesis_suite.cpp. A FIFO, a symbolic link to a root-only
# file outside, a directory, a file of another owner (root only) and a hard link planted at every path sqlock, its
# tools or SQLite create or open beside a database or a textfile: SQLite's bell, `sqlock run --metrics-textfile`
# PATH and an older sqlock's PATH.tmp.<pid>, SQLite's -wal, -shm and -journal. Every call through the CLI binaries
# ends within a 20 s watchdog with its documented exit code, and nothing planted or outside is touched.
#   sqlock_file_nemesis_tests  FileNemesis.<Test> (labels fault-smoke;faults), SQLite only, no server, seconds
# Included by tests/faults/CMakeLists.txt; needs the sqlock command (SQLOCK_BUILD_CLI).
if(TARGET sqlock-cli)
  add_executable(sqlock_file_nemesis_tests ${CMAKE_CURRENT_LIST_DIR}/file_nemesis_suite.cpp)
  target_include_directories(sqlock_file_nemesis_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(sqlock_file_nemesis_tests PRIVATE sqlock::sqlock SOCI::soci GTest::gtest GTest::gtest_main
                                                          Threads::Threads)
  target_compile_definitions(sqlock_file_nemesis_tests PRIVATE "SQLOCK_CLI=\"$<TARGET_FILE:sqlock-cli>\"")
  add_dependencies(sqlock_file_nemesis_tests sqlock-cli)
  sqlock_test_target(sqlock_file_nemesis_tests)
  sqlock_discover_tests(sqlock_file_nemesis_tests LABELS fault-smoke faults TIMEOUT 300)
endif()
