// Internal: what the database answers to an acquire and to a renewal, as the
// lockers keep it. Plain values, free of any SQL or client library, so that a
// locker's headers need nothing of the engine layer (src/dialect/).
#pragma once

#include <cstdint>

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

}  // namespace sqlock::detail
