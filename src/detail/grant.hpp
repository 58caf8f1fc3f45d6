// Internal: what the database answers to an acquire and to a renewal, and a
// majority member's identity, as the lockers keep them. Plain values, free of any SQL or client library, so that a
// locker's headers need nothing of the engine layer (src/dialect/).
#pragma once

#include <cstdint>
#include <optional>
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

/// A member's majority counter of one name with the member's identity, read in one statement.
struct member_counter {
    member_identity identity;
    std::int64_t token = 0;  // 0 when the name has no counter there yet
};

/// The write that comes with a grant (token_statements::majority_write_or_read).
struct member_write {
    bool won = false;                    // the counter was strictly below the token and is now the token
    std::optional<member_counter> read;  // when not won: what the member holds; empty without an identity row
};

}  // namespace sqlock::detail
