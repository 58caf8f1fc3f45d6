-- sqlock schema for MariaDB (10.6+) and MySQL (8.0+). Apply with the mariadb
-- client, `sqlock schema --apply`, or open a store with create_schema = true.
-- Idempotent. Times are DATETIME(6) in UTC (sqlock sets time_zone='+00:00').
-- Names are VARBINARY: byte-exact, no case folding, no trailing-space padding.
-- The library renames every "sqlock_" table when a table_prefix is set.

-- One row per held lock. Deleted on release; an expired row is taken over.
-- attempt: a random id of the acquire attempt that wrote the row, so the
-- clean-up after a broken connection deletes only its own attempt's row.
CREATE TABLE IF NOT EXISTS sqlock_locks (
    name       VARBINARY(255) NOT NULL PRIMARY KEY,
    owner      VARBINARY(255) NOT NULL,
    token      BIGINT         NOT NULL,
    holds      INT            NOT NULL DEFAULT 1,
    attempt    BIGINT         NOT NULL DEFAULT 0,
    created_at DATETIME(6)    NOT NULL,
    expires_at DATETIME(6)    NOT NULL,
    KEY sqlock_locks_expires_at_idx (expires_at)
) ENGINE = InnoDB;

-- The fencing-token counter per name, never deleted by release. The reaper
-- purges counters older than its token horizon after raising the floor, the
-- row named '' (never a lock name), to their highest token; a new counter
-- starts above the floor and at the database's clock (microseconds since the
-- Unix epoch), so tokens keep increasing across releases, takeovers, purges
-- and restarts.
CREATE TABLE IF NOT EXISTS sqlock_tokens (
    name  VARBINARY(255) NOT NULL PRIMARY KEY,
    token BIGINT         NOT NULL,
    KEY sqlock_tokens_token_idx (token)
) ENGINE = InnoDB;
-- (A table created by an older sqlock lacks the index, which only speeds up the
-- reaper's counter purge: ALTER TABLE sqlock_tokens ADD KEY sqlock_tokens_token_idx
-- (token). Not done here: MySQL 8 has no CREATE INDEX IF NOT EXISTS.)

-- Fencing on the resource side (sqlock::fence): the highest token seen per
-- resource. Lives in the database of the protected resource.
CREATE TABLE IF NOT EXISTS sqlock_fences (
    resource VARBINARY(255) NOT NULL PRIMARY KEY,
    token    BIGINT         NOT NULL
) ENGINE = InnoDB;

-- The row lock (row_locker): a row per name, locked with SELECT ... FOR UPDATE
-- by a transaction held open for the lease. token/owner/locked_at record the
-- last holder (committed on release). Row-lock tokens come from sqlock_tokens,
-- drawn and committed on another connection once the row is locked, so a token
-- is durable before the lease is handed out.
CREATE TABLE IF NOT EXISTS sqlock_rows (
    name       VARBINARY(255) NOT NULL PRIMARY KEY,
    token      BIGINT         NOT NULL DEFAULT 0,
    owner      VARBINARY(255) NOT NULL DEFAULT '',
    locked_at  DATETIME(6)    NULL,
    created_at DATETIME(6)    NOT NULL
) ENGINE = InnoDB;

-- Majority mode (majority_locker): the highest majority token settled for a
-- name with this database as one of the members. Only ever raised.
CREATE TABLE IF NOT EXISTS sqlock_majority_tokens (
    name  VARBINARY(255) NOT NULL PRIMARY KEY,
    token BIGINT         NOT NULL
) ENGINE = InnoDB;
