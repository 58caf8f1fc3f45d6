// The lockers' headers stay clear of the engine layer: none of them includes
// SOCI (the SQL and the client libraries live behind src/detail/dialect.hpp).
// Nothing may be included before the headers under test.
#include "detail/lease_row.hpp"
#include "detail/locker_impl.hpp"

#include <gtest/gtest.h>

namespace {

#ifdef SOCI_PLATFORM_H_INCLUDED  // every SOCI header includes soci/soci-platform.h
constexpr bool locker_headers_include_soci = true;
#else
constexpr bool locker_headers_include_soci = false;
#endif

TEST(Layering, LockerHeadersIncludeNoSoci) {
    EXPECT_FALSE(locker_headers_include_soci)
        << "src/detail/lease_row.hpp or locker_impl.hpp pulls in SOCI: take plain values from detail/grant.hpp "
           "instead of including detail/dialect.hpp";
}

}  // namespace
