# FindSOCI — SOCI 4.0 as Debian ships it (libsoci-dev), which has neither a CMake
# package config nor a pkg-config file.
#
# Defines SOCI_FOUND, SOCI_INCLUDE_DIR and the imported targets
#   SOCI::core, SOCI::postgresql, SOCI::mysql, SOCI::sqlite3, and SOCI::soci (all four).
# Debian configures SOCI's headers with Boost support, so they need Boost's
# headers (libboost-dev, libboost-date-time-dev); the backend headers include
# libpq's and the MySQL client's headers.

find_path(SOCI_INCLUDE_DIR soci/soci.h)
find_library(SOCI_CORE_LIBRARY NAMES soci_core)
find_library(SOCI_POSTGRESQL_LIBRARY NAMES soci_postgresql)
find_library(SOCI_MYSQL_LIBRARY NAMES soci_mysql)
find_library(SOCI_SQLITE3_LIBRARY NAMES soci_sqlite3)
find_package(Boost QUIET)
find_package(PostgreSQL QUIET)
find_package(SQLite3 QUIET)
find_path(MARIADB_INCLUDE_DIR mysql.h PATH_SUFFIXES mariadb mysql)
find_library(MARIADB_LIBRARY NAMES mariadb mysqlclient)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(SOCI
    REQUIRED_VARS SOCI_INCLUDE_DIR SOCI_CORE_LIBRARY SOCI_POSTGRESQL_LIBRARY SOCI_MYSQL_LIBRARY
                  SOCI_SQLITE3_LIBRARY Boost_FOUND PostgreSQL_FOUND SQLite3_FOUND MARIADB_INCLUDE_DIR
                  MARIADB_LIBRARY
    REASON_FAILURE_MESSAGE "install the packages with: sudo bash scripts/deps.sh")

if(SOCI_FOUND AND NOT TARGET SOCI::core)
    add_library(SOCI::core UNKNOWN IMPORTED)
    set_target_properties(SOCI::core PROPERTIES
        IMPORTED_LOCATION "${SOCI_CORE_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${SOCI_INCLUDE_DIR}"
        INTERFACE_LINK_LIBRARIES "Boost::headers;${CMAKE_DL_LIBS}")

    add_library(SOCI::postgresql UNKNOWN IMPORTED)
    set_target_properties(SOCI::postgresql PROPERTIES
        IMPORTED_LOCATION "${SOCI_POSTGRESQL_LIBRARY}"
        INTERFACE_LINK_LIBRARIES "SOCI::core;PostgreSQL::PostgreSQL")

    add_library(SOCI::mysql UNKNOWN IMPORTED)
    set_target_properties(SOCI::mysql PROPERTIES
        IMPORTED_LOCATION "${SOCI_MYSQL_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${MARIADB_INCLUDE_DIR}"
        INTERFACE_LINK_LIBRARIES "SOCI::core;${MARIADB_LIBRARY}")

    add_library(SOCI::sqlite3 UNKNOWN IMPORTED)
    set_target_properties(SOCI::sqlite3 PROPERTIES
        IMPORTED_LOCATION "${SOCI_SQLITE3_LIBRARY}"
        INTERFACE_LINK_LIBRARIES "SOCI::core;SQLite::SQLite3")

    add_library(SOCI::soci INTERFACE IMPORTED)
    set_target_properties(SOCI::soci PROPERTIES
        INTERFACE_LINK_LIBRARIES "SOCI::postgresql;SOCI::mysql;SOCI::sqlite3")
endif()

mark_as_advanced(SOCI_INCLUDE_DIR SOCI_CORE_LIBRARY SOCI_POSTGRESQL_LIBRARY SOCI_MYSQL_LIBRARY
                 SOCI_SQLITE3_LIBRARY MARIADB_INCLUDE_DIR MARIADB_LIBRARY)
