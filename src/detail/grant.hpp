// Internal: what the database answers to an acquire and to a renewal, and a
// majority member's identity, as the lockers keep them. Plain values, free of any SQL or client library, so that a
// locker's headers need nothing of the engine layer (src/dialect/).
#pragma once

#include <cstdint>
#include <string>

namespace sqlock::detail {

/// What the database answered to an acquire.
struct grant {
    bool acquired = false;
    std::int64_t token = 0;
    std::int64_t created_us = 0;  // database clock, microseconds since the Unix epoch
    std::int64_t expires_us = 0;
};

/// What the database answered to a renewal.
struct renewal {
    std::int64_t expires_us = 0;
    std::int64_t now_us = 0;
};

/// A database as a majority member (token_statements::majority_identity).
struct member_identity {
    std::string id;
    std::int64_t age_us = 0;  // since the identity was created, on the database's clock
    bool joined = false;      // its counters were seeded under this identity
};

}  // namespace sqlock::detail
