-- sqlock schema for SQLite (3.35+). Applied by opening a store with
-- create_schema = true, or `sqlock schema --apply`. Idempotent.
-- Times are BIGINT (64-bit INTEGER) microseconds since the Unix epoch, from this host's clock
-- (julianday('now')): every process sharing the file shares that clock.
-- The library renames every "sqlock_" table when a table_prefix is set.
-- WITHOUT ROWID: each table is its primary-key b-tree, so a write touches one
-- page per table (and its other index) instead of a rowid table plus a
-- separate key index: fewer pages in the WAL per commit. Files made before keep
-- their rowid tables, which work the same, a little slower.

-- The protocol these tables speak: the rules every client of the same tables
-- follows (how a lock row is taken, released and given its token). A store
-- refuses tables of a protocol newer than its own before it changes anything,
-- with an error that says to upgrade sqlock. Tables without this row were made
-- before the protocol was recorded, and speak protocol 1. Only an upgrade of
-- the tables raises it (docs/operations.md, "Upgrading sqlock").
CREATE TABLE IF NOT EXISTS sqlock_protocol (
    one     INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    version INTEGER NOT NULL
);
INSERT OR IGNORE INTO sqlock_protocol (one, version) VALUES (1, 1);

-- One row per held lock. Deleted on release; an expired row is taken over.
-- attempt: a random id of the acquire attempt that wrote the row, so the
-- clean-up after a broken connection deletes only its own attempt's row.
-- waiters: set by an acquire that found the row held and will wait; only then
-- does the release ring the bell file next to the database (docs/table-lock.md).
-- (A file made by an older sqlock lacks it: create_schema adds it, with ALTER TABLE.)
CREATE TABLE IF NOT EXISTS sqlock_locks (
    name       TEXT    NOT NULL PRIMARY KEY,
    owner      TEXT    NOT NULL,
    token      BIGINT  NOT NULL,
    holds      INTEGER NOT NULL DEFAULT 1,
    attempt    BIGINT  NOT NULL DEFAULT 0,
    created_at BIGINT  NOT NULL,
    expires_at BIGINT  NOT NULL,
    waiters    INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- Lets the reaper find expired rows without a scan.
CREATE INDEX IF NOT EXISTS sqlock_locks_expires_at_idx ON sqlock_locks (expires_at);

-- The fencing-token counter per name, never deleted by release. The reaper
-- purges counters older than its token horizon after raising the floor, the
-- row named '' (never a lock name), to their highest token; a new counter
-- starts above the floor and at the database's clock (microseconds since the
-- Unix epoch), so tokens keep increasing across releases, takeovers, purges
-- and restarts.
CREATE TABLE IF NOT EXISTS sqlock_tokens (
    name  TEXT    NOT NULL PRIMARY KEY,
    token BIGINT  NOT NULL
) WITHOUT ROWID;

-- Lets the reaper find old counters without a scan.
CREATE INDEX IF NOT EXISTS sqlock_tokens_token_idx ON sqlock_tokens (token);

-- The acquire is one statement (no transaction of several, no statement
-- journal): it writes the lock row with the name's next token, read from the
-- counter in the same statement (SQLite has one writer at a time, and a write
-- statement takes the write lock before it reads), and these triggers store
-- that token in the counter as part of the same statement. A busy attempt
-- changes no row, so it draws no token.
CREATE TRIGGER IF NOT EXISTS sqlock_locks_tok_ins AFTER INSERT ON sqlock_locks BEGIN
    INSERT INTO sqlock_tokens (name, token) VALUES (NEW.name, NEW.token)
        ON CONFLICT (name) DO UPDATE SET token = max(token, excluded.token);
END;

CREATE TRIGGER IF NOT EXISTS sqlock_locks_tok_upd AFTER UPDATE OF token ON sqlock_locks BEGIN
    INSERT INTO sqlock_tokens (name, token) VALUES (NEW.name, NEW.token)
        ON CONFLICT (name) DO UPDATE SET token = max(token, excluded.token);
END;

-- Counting semaphores (sqlock::semaphore): the number of permits of each
-- semaphore name, stored by its first user; its permits are rows of
-- sqlock_locks named <name> U+001F 'p' U+001F <slot>. Removed only by
-- forget_semaphore (`sqlock semaphore --forget`) while no permit is held.
CREATE TABLE IF NOT EXISTS sqlock_semaphores (
    name       TEXT    NOT NULL PRIMARY KEY,
    permits    INTEGER NOT NULL CHECK (permits > 0),
    created_at BIGINT  NOT NULL
) WITHOUT ROWID;

-- Fencing on the resource side (sqlock::fence): the highest token seen per
-- resource. Lives in the database of the protected resource.
CREATE TABLE IF NOT EXISTS sqlock_fences (
    resource TEXT    NOT NULL PRIMARY KEY,
    token    BIGINT  NOT NULL
) WITHOUT ROWID;

-- The row lock (row_locker). SQLite has no row locks: the holder keeps a
-- BEGIN IMMEDIATE transaction open, which locks the whole file. token/owner/
-- locked_at record the last holder (committed on release).
CREATE TABLE IF NOT EXISTS sqlock_rows (
    name       TEXT    NOT NULL PRIMARY KEY,
    token      BIGINT  NOT NULL DEFAULT 0,
    owner      TEXT    NOT NULL DEFAULT '',
    locked_at  BIGINT,
    created_at BIGINT  NOT NULL
) WITHOUT ROWID;

-- Majority mode (majority_locker): the highest majority token settled for a
-- name with this database as one of the members. Only ever raised.
CREATE TABLE IF NOT EXISTS sqlock_majority_tokens (
    name  TEXT    NOT NULL PRIMARY KEY,
    token BIGINT  NOT NULL
) WITHOUT ROWID;

-- Majority mode: this database's identity, created once with the schema (a
-- database recreated, or its tables dropped and created again, gets a new one),
-- and the identities under which this database's majority counters were seeded
-- (docs/majority.md, "A member that lost its data"). A majority locker counts
-- a member only when its own identity is in its own sqlock_majority_members.
CREATE TABLE IF NOT EXISTS sqlock_identity (
    one        INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    id         TEXT    NOT NULL,
    created_at BIGINT  NOT NULL
);
INSERT OR IGNORE INTO sqlock_identity (one, id, created_at)
    VALUES (1, lower(hex(randomblob(16))), CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER));
CREATE TABLE IF NOT EXISTS sqlock_majority_members (
    id TEXT NOT NULL PRIMARY KEY
) WITHOUT ROWID;
