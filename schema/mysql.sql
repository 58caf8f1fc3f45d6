-- sqlock schema for MariaDB (10.6+; 10.11 tested) and MySQL (8.0.29+, from its
-- manual; 8.0.11-8.0.28 without IF NOT EXISTS on the procedures, see
-- docs/table-lock.md "MariaDB and MySQL"). Apply with the mariadb or mysql
-- client, `sqlock schema --apply`, or open a store with create_schema = true.
-- Idempotent. Times are DATETIME(6) in UTC (sqlock sets time_zone='+00:00').
-- Names are VARBINARY: byte-exact, no case folding, no trailing-space padding.
-- The library renames every "sqlock_" table when a table_prefix is set.

-- The protocol these tables speak: the rules every client of the same tables
-- follows (how a lock row is taken, released and given its token). A store
-- refuses tables of a protocol newer than its own before it changes anything,
-- with an error that says to upgrade sqlock. Tables without this row were made
-- before the protocol was recorded, and speak protocol 1. Only an upgrade of
-- the tables raises it (docs/operations.md, "Upgrading sqlock").
CREATE TABLE IF NOT EXISTS sqlock_protocol (
    one     INT NOT NULL PRIMARY KEY CHECK (one = 1),
    version INT NOT NULL
) ENGINE = InnoDB;
INSERT IGNORE INTO sqlock_protocol (one, version) VALUES (1, 1);

-- One row per held lock. Deleted on release; an expired row is taken over.
-- attempt: a random id of the acquire attempt that wrote the row, so the
-- clean-up after a broken connection deletes only its own attempt's row.
-- waiters: raised by an acquire that found the row held and will wait; only
-- then does the release interrupt the waiting stores' parked SLEEP (docs/table-lock.md).
-- (A table made by an older sqlock lacks it: create_schema adds it, with ALTER TABLE.)
CREATE TABLE IF NOT EXISTS sqlock_locks (
    name       VARBINARY(255) NOT NULL PRIMARY KEY,
    owner      VARBINARY(255) NOT NULL,
    token      BIGINT         NOT NULL,
    holds      INT            NOT NULL DEFAULT 1,
    attempt    BIGINT         NOT NULL DEFAULT 0,
    created_at DATETIME(6)    NOT NULL,
    expires_at DATETIME(6)    NOT NULL,
    waiters    BIGINT         NOT NULL DEFAULT 0,
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

-- Counting semaphores (sqlock::semaphore): the number of permits of each
-- semaphore name, stored by its first user; its permits are rows of
-- sqlock_locks named <name> U+001F 'p' U+001F <slot>. Removed only by
-- forget_semaphore (`sqlock semaphore --forget`) while no permit is held.
CREATE TABLE IF NOT EXISTS sqlock_semaphores (
    name       VARBINARY(255) NOT NULL PRIMARY KEY,
    permits    INT            NOT NULL CHECK (permits > 0),
    created_at DATETIME(6)    NOT NULL
) ENGINE = InnoDB;

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

-- Majority mode: this database's identity, created once with the schema (a
-- database recreated, or its tables dropped and created again, gets a new one),
-- and the identities under which this database's majority counters were seeded
-- (docs/majority.md, "A member that lost its data"). A majority locker counts
-- a member only when its own identity is in its own sqlock_majority_members.
CREATE TABLE IF NOT EXISTS sqlock_identity (
    one        INT            NOT NULL PRIMARY KEY CHECK (one = 1),
    id         VARBINARY(100) NOT NULL,
    created_at DATETIME(6)    NOT NULL
) ENGINE = InnoDB;
INSERT IGNORE INTO sqlock_identity (one, id, created_at) VALUES (1, CONCAT(UUID(), '-', MD5(RAND())), NOW(6));
CREATE TABLE IF NOT EXISTS sqlock_majority_members (
    id VARBINARY(100) NOT NULL PRIMARY KEY
) ENGINE = InnoDB;

-- The hot paths of the table lock, each one round trip (CALL) and each one
-- transaction; the library calls them as prepared statements.
-- CREATE PROCEDURE IF NOT EXISTS needs MariaDB 10.1.3+ or MySQL 8.0.29+. A
-- procedure runs with the sql_mode of the session that created it: create it
-- with strict mode on (sqlock's own sessions and the mariadb client's default).
-- SQL SECURITY INVOKER: they run with the caller's privileges, whoever made them.
DELIMITER $$

-- Draw the name's next token and take the lock row if it is free or expired, in
-- one transaction: the token row's lock is held until COMMIT, so grants happen
-- in token order. The first token of a new counter is above the floor (the
-- tokens row named '') and at least the database's now in microseconds; see
-- sqlock_tokens. Answers one row: (this call holds the row, its token,
-- created_at and expires_at in microseconds since the Unix epoch).
-- p_budget_us bounds the time spent inside the call (lock and metadata-lock
-- waits included): past it the transaction is rolled back and errno 1205
-- raised, so that nothing commits after the caller has stopped waiting. A
-- client's deadline cannot stop a call the server is running.
-- (_v2: sqlock_acquire, without p_retry, said "ours" whenever the row carried
-- the attempt id, which a forked child repeats. It may stay for older clients,
-- or be dropped once none runs.)
CREATE PROCEDURE IF NOT EXISTS sqlock_acquire_v2(IN p_name VARBINARY(255), IN p_owner VARBINARY(255),
                                                 IN p_attempt BIGINT, IN p_retry INT, IN p_ttl_us BIGINT,
                                                 IN p_budget_us BIGINT)
    MODIFIES SQL DATA SQL SECURITY INVOKER
BEGIN
    DECLARE v_started DATETIME(6) DEFAULT SYSDATE(6);
    DECLARE v_first, v_drawn, v_token, v_created, v_expires BIGINT;
    DECLARE v_ours INT;
    -- A deadlock has rolled the transaction back already, a lock wait timeout
    -- only its statement: roll back in either case, then report the error.
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    SET v_first = GREATEST(COALESCE((SELECT f.token FROM sqlock_tokens f WHERE f.name = ''), 0) + 1,
                           TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', NOW(6)));
    INSERT INTO sqlock_tokens (name, token) VALUES (p_name, v_first)
        ON DUPLICATE KEY UPDATE token = token + 1;
    -- Our own change, under our row lock.
    SELECT token INTO v_drawn FROM sqlock_tokens WHERE name = p_name;
    -- Assignments run left to right and see earlier ones, so expires_at, which
    -- every condition reads, is assigned last.
    INSERT INTO sqlock_locks (name, owner, token, holds, attempt, created_at, expires_at)
        VALUES (p_name, p_owner, v_drawn, 1, p_attempt, NOW(6), NOW(6) + INTERVAL p_ttl_us MICROSECOND)
        ON DUPLICATE KEY UPDATE
            owner = IF(expires_at < NOW(6), VALUES(owner), owner),
            token = IF(expires_at < NOW(6), VALUES(token), token),
            holds = IF(expires_at < NOW(6), 1, holds),
            attempt = IF(expires_at < NOW(6), VALUES(attempt), attempt),
            created_at = IF(expires_at < NOW(6), VALUES(created_at), created_at),
            expires_at = IF(expires_at < NOW(6), VALUES(expires_at), expires_at);
    -- Ours only when it carries the token this call drew, and our owner: a random
    -- attempt id proves nothing (a forked child draws what its parent draws). On
    -- a retry after a broken connection also when the earlier call of the same
    -- attempt and owner wrote it after the clean-up looked (its token is a grant
    -- like any).
    SELECT IF(owner = p_owner AND (token = v_drawn OR (p_retry = 1 AND attempt = p_attempt)), 1, 0), token,
           TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', created_at),
           TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at)
        INTO v_ours, v_token, v_created, v_expires FROM sqlock_locks WHERE name = p_name;
    IF TIMESTAMPDIFF(MICROSECOND, v_started, SYSDATE(6)) > p_budget_us THEN
        SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1205,
            MESSAGE_TEXT = 'sqlock: the acquire took longer than its caller waits for an answer: rolled back';
    END IF;
    COMMIT;
    SELECT v_ours, v_token, v_created, v_expires;
END$$

-- A shared (read) lease of a read-write lock (docs/coordination.md): sqlock_acquire_v2's grant of p_name,
-- then, in the same transaction, that row renamed to p_reader (the reader's own row) and extended to now +
-- ttl, so that a read cycle waits for the disk at its grant only, as a lock's cycle does; p_name's lock is
-- free again at COMMIT. Answers one row: (this call holds p_reader's row, its token, created_at and
-- expires_at in microseconds since the Unix epoch, the waiters mark p_name's row carried: the listener
-- connection to ring, 0 for none). A row that is not ours is left as it is.
CREATE PROCEDURE IF NOT EXISTS sqlock_acquire_shared(IN p_name VARBINARY(255), IN p_reader VARBINARY(255),
                                                     IN p_owner VARBINARY(255), IN p_attempt BIGINT,
                                                     IN p_retry INT, IN p_ttl_us BIGINT, IN p_budget_us BIGINT)
    MODIFIES SQL DATA SQL SECURITY INVOKER
BEGIN
    DECLARE v_started DATETIME(6) DEFAULT SYSDATE(6);
    DECLARE v_first, v_drawn, v_token, v_created BIGINT;
    DECLARE v_expires, v_marked BIGINT DEFAULT 0;
    DECLARE v_ours INT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    SET v_first = GREATEST(COALESCE((SELECT f.token FROM sqlock_tokens f WHERE f.name = ''), 0) + 1,
                           TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', NOW(6)));
    INSERT INTO sqlock_tokens (name, token) VALUES (p_name, v_first)
        ON DUPLICATE KEY UPDATE token = token + 1;
    SELECT token INTO v_drawn FROM sqlock_tokens WHERE name = p_name;
    INSERT INTO sqlock_locks (name, owner, token, holds, attempt, created_at, expires_at)
        VALUES (p_name, p_owner, v_drawn, 1, p_attempt, NOW(6), NOW(6) + INTERVAL p_ttl_us MICROSECOND)
        ON DUPLICATE KEY UPDATE
            owner = IF(expires_at < NOW(6), VALUES(owner), owner),
            token = IF(expires_at < NOW(6), VALUES(token), token),
            holds = IF(expires_at < NOW(6), 1, holds),
            attempt = IF(expires_at < NOW(6), VALUES(attempt), attempt),
            created_at = IF(expires_at < NOW(6), VALUES(created_at), created_at),
            expires_at = IF(expires_at < NOW(6), VALUES(expires_at), expires_at);
    SELECT IF(owner = p_owner AND (token = v_drawn OR (p_retry = 1 AND attempt = p_attempt)), 1, 0), token,
           TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', created_at)
        INTO v_ours, v_token, v_created FROM sqlock_locks WHERE name = p_name;
    IF v_ours = 1 THEN
        SELECT waiters INTO v_marked FROM sqlock_locks WHERE name = p_name;
        UPDATE sqlock_locks SET name = p_reader, waiters = 0,
                                expires_at = NOW(6) + INTERVAL p_ttl_us MICROSECOND
            WHERE name = p_name;
        SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at)
            INTO v_expires FROM sqlock_locks WHERE name = p_reader;
    END IF;
    IF TIMESTAMPDIFF(MICROSECOND, v_started, SYSDATE(6)) > p_budget_us THEN
        SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1205,
            MESSAGE_TEXT = 'sqlock: the acquire took longer than its caller waits for an answer: rolled back';
    END IF;
    COMMIT;
    SELECT v_ours, v_token, v_created, v_expires, v_marked;
END$$

-- Extend the unexpired row of (name, owner, token) to now + ttl. Answers one
-- row: (1 when renewed, else 0; the new expires_at and the database's now in
-- microseconds since the Unix epoch, NULL when not renewed). The locking read
-- keeps the row ours between the check and the UPDATE.
CREATE PROCEDURE IF NOT EXISTS sqlock_renew(IN p_name VARBINARY(255), IN p_owner VARBINARY(255),
                                            IN p_token BIGINT, IN p_ttl_us BIGINT)
    MODIFIES SQL DATA SQL SECURITY INVOKER
BEGIN
    DECLARE v_live INT;
    DECLARE v_expires, v_now BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    SELECT COUNT(*) INTO v_live FROM sqlock_locks
        WHERE name = p_name AND owner = p_owner AND token = p_token AND expires_at >= NOW(6) FOR UPDATE;
    IF v_live = 1 THEN
        UPDATE sqlock_locks SET expires_at = NOW(6) + INTERVAL p_ttl_us MICROSECOND WHERE name = p_name;
        SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at),
               TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', NOW(6))
            INTO v_expires, v_now FROM sqlock_locks WHERE name = p_name;
    END IF;
    COMMIT;
    SELECT v_live, v_expires, v_now;
END$$

DELIMITER ;
