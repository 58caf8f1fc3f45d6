-- sqlock schema for PostgreSQL (15+). Apply with psql, `sqlock schema --apply`,
-- or open a store with create_schema = true. Idempotent.
-- The library renames every "sqlock_" table when a table_prefix is set.

-- The protocol these tables speak: the rules every client of the same tables
-- follows (how a lock row is taken, released and given its token). A store
-- refuses tables of a protocol newer than its own before it changes anything,
-- with an error that says to upgrade sqlock. Tables without this row were made
-- before the protocol was recorded, and speak protocol 1. Only an upgrade of
-- the tables raises it (docs/operations.md, "Upgrading sqlock").
CREATE TABLE IF NOT EXISTS sqlock_protocol (
    one     integer NOT NULL PRIMARY KEY CHECK (one = 1),
    version integer NOT NULL
);
INSERT INTO sqlock_protocol (one, version) VALUES (1, 1) ON CONFLICT (one) DO NOTHING;

-- One row per held lock. Deleted on release; an expired row is taken over.
-- attempt: a random id of the acquire attempt that wrote the row, so the
-- clean-up after a broken connection deletes only its own attempt's row.
-- waiters: set by an acquire that found the row held and will wait; only then
-- does the release NOTIFY (uncontended releases skip the notify queue).
CREATE TABLE IF NOT EXISTS sqlock_locks (
    name       text        COLLATE "C" NOT NULL PRIMARY KEY,
    owner      text        NOT NULL,
    token      bigint      NOT NULL,
    holds      integer     NOT NULL DEFAULT 1,
    attempt    bigint      NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    waiters    boolean     NOT NULL DEFAULT false
);

-- Tables made by an older sqlock get the column (idempotent).
ALTER TABLE sqlock_locks ADD COLUMN IF NOT EXISTS waiters boolean NOT NULL DEFAULT false;

-- Lets the reaper find expired rows without a scan.
CREATE INDEX IF NOT EXISTS sqlock_locks_expires_at_idx ON sqlock_locks (expires_at);

-- The fencing-token counter per name, never deleted by release. The reaper
-- purges counters older than its token horizon after raising the floor, the
-- row named '' (never a lock name), to their highest token; a new counter
-- starts above the floor and at the database's clock (microseconds since the
-- Unix epoch), so tokens keep increasing across releases, takeovers, purges
-- and restarts.
CREATE TABLE IF NOT EXISTS sqlock_tokens (
    name  text   COLLATE "C" NOT NULL PRIMARY KEY,
    token bigint NOT NULL
);

-- Lets the reaper find old counters without a scan.
CREATE INDEX IF NOT EXISTS sqlock_tokens_token_idx ON sqlock_tokens (token);

-- Counting semaphores (sqlock::semaphore): the number of permits of each
-- semaphore name, stored by its first user; its permits are rows of
-- sqlock_locks named <name> U+001F 'p' U+001F <slot>. Removed only by
-- forget_semaphore (`sqlock semaphore --forget`) while no permit is held.
CREATE TABLE IF NOT EXISTS sqlock_semaphores (
    name       text        COLLATE "C" NOT NULL PRIMARY KEY,
    permits    integer     NOT NULL CHECK (permits > 0),
    created_at timestamptz NOT NULL
);

-- Fencing on the resource side (sqlock::fence): the highest token seen per
-- resource. Lives in the database of the protected resource.
CREATE TABLE IF NOT EXISTS sqlock_fences (
    resource text   COLLATE "C" NOT NULL PRIMARY KEY,
    token    bigint NOT NULL
);

-- The row lock (row_locker): a row per name, locked with SELECT ... FOR UPDATE
-- by a transaction held open for the lease. token/owner/locked_at record the
-- last holder (committed on release). Row-lock tokens come from sqlock_tokens,
-- drawn and committed on another connection once the row is locked, so a token
-- is durable before the lease is handed out.
CREATE TABLE IF NOT EXISTS sqlock_rows (
    name       text        COLLATE "C" NOT NULL PRIMARY KEY,
    token      bigint      NOT NULL DEFAULT 0,
    owner      text        NOT NULL DEFAULT '',
    locked_at  timestamptz,
    created_at timestamptz NOT NULL
);

-- Majority mode (majority_locker): the highest majority token settled for a
-- name with this database as one of the members. Only ever raised.
CREATE TABLE IF NOT EXISTS sqlock_majority_tokens (
    name  text   COLLATE "C" NOT NULL PRIMARY KEY,
    token bigint NOT NULL
);

-- Majority mode: this database's identity, created once with the schema (a
-- database recreated, or its tables dropped and created again, gets a new one),
-- and the identities under which this database's majority counters were seeded
-- (docs/majority.md, "A member that lost its data"). A majority locker counts
-- a member only when its own identity is in its own sqlock_majority_members.
CREATE TABLE IF NOT EXISTS sqlock_identity (
    one        integer     NOT NULL PRIMARY KEY CHECK (one = 1),
    id         text        COLLATE "C" NOT NULL,
    created_at timestamptz NOT NULL
);
INSERT INTO sqlock_identity (one, id, created_at) VALUES (1, CAST(gen_random_uuid() AS text), clock_timestamp())
    ON CONFLICT (one) DO NOTHING;
CREATE TABLE IF NOT EXISTS sqlock_majority_members (
    id text COLLATE "C" NOT NULL PRIMARY KEY
);
