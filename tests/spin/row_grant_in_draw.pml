/*
 * The row lock's grant recorded in the token draw's own transaction (issue 40,
 * design 2), against today's protocol, for spin: scripts/model-check.sh runs it.
 * Model-checked before it is implemented.
 *
 * The row lock (row_locker) holds the engine's row lock on <prefix>_rows(name)
 * with a transaction kept open on a pinned connection: the HOLDING session.
 * Its fencing token is drawn on ANOTHER connection, in an autocommit
 * transaction of its own (durable before the lease exists), from the name's
 * counter: the draws of one name are serialized by the counter row's lock.
 *
 * Today (the default; src/row_locker.cpp, src/dialect/{postgresql,mysql}/row_lock.cpp):
 *   lock    BEGIN + UPDATE/SELECT ... FOR UPDATE [SKIP LOCKED] (the engine
 *           grants the row when it is free; else busy, or a lock wait that ends);
 *   draw    INSERT ... ON CONFLICT/DUPLICATE KEY UPDATE token = token + 1, autocommit;
 *   record  UPDATE <prefix>_rows SET token (owner, locked_at) in the HOLDING
 *           transaction: uncommitted, published by the release's COMMIT, gone
 *           with a rollback (a killed session, the idle limit, a failed acquire);
 *   keep    only when the acquire was slow (now - sent > ttl/10: here, any tick):
 *           a keep-alive on the holding session, validity counted anew from it;
 *   hand-out  the lease, valid until sent + TTL (sent: before the lock was sent);
 *   renew   a keep-alive on the holding session: valid until its send + TTL;
 *   release the COMMIT (the client stops acting first).
 * -DINDRAW (design 2): no record statement. The draw's own transaction writes
 *   the grant (owner, token, locked_at) beside the counter, committed with it,
 *   and the holding transaction writes nothing (PostgreSQL: BEGIN + lock, draw,
 *   COMMIT: 4 -> 3 round trips; MariaDB: its release COMMIT no longer flushes).
 *   What proves that the drawer still held the row when its draw committed:
 *   -DGUARD=1  (the default with INDRAW) the draw's statement, after it has
 *              written (and so locked) the counter row, checks that the holding
 *              transaction is still in progress (PostgreSQL: the lock statement
 *              returns pg_current_xact_id(), the draw tests pg_xact_status(xid)
 *              = 'in progress' in its WHERE, evaluated on the counter's RETURNING
 *              row), and records the grant only then; otherwise the acquire fails;
 *   -DGUARD=2  a statement on the holding session after the draw committed (a
 *              read that writes nothing: MariaDB's keep-alive SELECT), before the
 *              hand-out; the record is already committed either way;
 *   -DGUARD=3  as GUARD=1, but testing that the holding SESSION is still there
 *              (MariaDB: its connection id in information_schema.PROCESSLIST),
 *              which the server removes only after it rolled the transaction back;
 *   -DGUARD=0  nothing: the hand-out follows the draw (save the slow-path keep).
 *
 * Faults, in any interleaving with the clock: a holder pauses arbitrarily long
 * (past its TTL); the server's idle limit ends a holding transaction idle for
 * more than TTL (PostgreSQL idle_in_transaction_session_timeout = max(TTL, 1 s),
 * MariaDB idle_transaction_timeout = TTL rounded up: never less than TTL);
 * -DKILL: the server ends a holding session at any moment (pg_terminate_backend,
 * KILL CONNECTION, a connection lost), and the session watch reports it at once
 * (the lease turns lost); the draw's answer may be lost (the draw committed, the
 * acquire fails and rolls back).
 *
 * Checked:
 *   P1    at every hand-out and renewal on a live session: no other client's
 *         lease is valid (validity by the client's clock from before the
 *         statement was sent, ended at once by the watch when its session is
 *         killed, never again valid after); and the idle limit never ends a
 *         valid lease.
 *   P3/4  tokens strictly increase in grant order: for any two leases handed
 *         out (a stale one on a session already ended included: that is what
 *         fencing is for), the one the engine granted the row to first has the
 *         smaller token. A repeated token fails this too.
 *   rec   (INDRAW) what a reader of the record sees: whenever the row's
 *         holder has committed its draw, the record is that holder's grant
 *         (owner, token, and locked_at: here the grant's place in lock order).
 *         Today the record is published by the release only: a reader sees the
 *         last grant released by COMMIT, never the current one, and nothing of a
 *         grant whose transaction was rolled back (not asserted: by construction).
 *
 * Variants that must hold: today and -DINDRAW (GUARD=1), each plain and with
 * -DKILL; -DINDRAW with 3 clients, and with two sessions ended (-DNKILL=2: a
 * server restart's); -DINDRAW -DGUARD=2 -DKILL -DNOREC (-DNOREC: the record
 * check off: P1 and P3/4 hold); -DINDRAW -DGUARD=0 -DNOREC (no guard and only
 * the idle limit: the slow-path keep alone keeps P1 and P3/4, as a holder ended
 * by the idle limit was idle for a TTL, more than ttl/10); -DSQLITE (SQLite: no
 * idle limit, no sessions to kill; it draws BEFORE it locks, under the
 * whole-file lock, then re-reads the counter and gives up if someone drew since).
 * Negative controls (spin must find a violation):
 *   -DINDRAW -DGUARD=0 -DKILL -DNOREC  a holder whose session ends before its draw
 *                                  hands out a token above the next holder's (P3/4);
 *   -DINDRAW -DGUARD=0 -DNOKEEP -DNOREC  the same with only the idle limit (a holder
 *                                  paused past its TTL) when the slow-path keep is gone;
 *   -DINDRAW -DGUARD=0             the record names a holder that lost the row
 *                                  while the real holder holds (rec; P3/4 holds);
 *   -DINDRAW -DGUARD=2 -DKILL      the same for a guard on the holding session (rec);
 *   -DINDRAW -DLATECHECK -DKILL -DNOREC  the guard evaluated before the counter row is
 *                                  written: a decreasing token (P3/4);
 *   -DINDRAW -DSPLITREC -DKILL     the guard after the counter write, but the counter
 *                                  committed before the record: the record names
 *                                  a holder that lost the row (rec);
 *   -DINDRAW -DGUARD=3 -DKILL -DNOREC  the session tested, not the transaction:
 *                                  a decreasing token (P3/4);
 *   -DINHOLD                       the token drawn inside the holding transaction
 *                                  (the counter bump rolled back with it): a
 *                                  repeated token (P3/4, rule 4);
 *   -DEARLYDRAW                    drawn before the lock, without SQLite's
 *                                  re-check: a decreasing token (P3/4);
 *   -DINDRAW -DLATEVALID           validity counted from the lock's answer, not
 *                                  from before its send: the idle limit ends a
 *                                  valid lease (P1). Today's protocol hides this
 *                                  mistake: its record statement, after the answer,
 *                                  restarts the idle timer; design 2 sends nothing
 *                                  on the holding session after the lock;
 *   -DKILL -DSLOWWATCH             the watch reports a killed session late: two
 *                                  valid leases (P1; the documented window of
 *                                  milliseconds, docs/guarantees.md; fencing covers it).
 * Non-vacuity (spin must find the asserted event):
 *   -DVACUITY=1   a hand-out after the idle limit ended a handed-out lease;
 *   -DINDRAW -DKILL -DVACUITY=2   the guard refuses a draw (a session killed
 *                 between the lock and the draw is reached).
 *
 * Abstractions: one name; NCLIENTS clients, NACQ attempts each; time in ticks up
 * to MAXT; each statement atomic, save the draw's statement under GUARD=1 (it
 * locks the counter row, evaluates its guard, then commits: the holder may die
 * between); a lock wait is "granted when free, or busy"; the row is held
 * exactly while the holding transaction is open, and a client that saw a
 * statement fail on it gives the connection up (row_locker.cpp on_connection),
 * so a transaction ends unseen only with its session (killed, idle limit); the
 * counter never goes back (durable draws; its purge and floor are modelled in
 * table_one_row.pml); locked_at is the grant's place in lock order (a clock
 * stepped back would break a time-based order: not modelled); a server restart
 * is modelled as its sessions ended one by one (NKILL); the draw's lost answer
 * only in today's protocol and design 2; clients of two versions, the semaphore
 * on the row lock, and MariaDB's cross-process bell are not modelled.
 */

#ifndef NCLIENTS
#define NCLIENTS 2
#endif
#ifndef NACQ
#define NACQ 2
#endif
#ifndef TTL
#define TTL 2
#endif
#ifndef MAXT
#define MAXT 6
#endif
#ifndef NKILL
#define NKILL 1
#endif
#ifndef VACUITY
#define VACUITY 0
#endif
#ifdef INDRAW
#ifndef GUARD
#define GUARD 1
#endif
#else
#define GUARD 0
#endif
#define MAXG (NCLIENTS * NACQ)

#define BIT(i) (1 << (i))
#if GUARD == 3
#define LIST(i) listed = listed | BIT(i)
#else
#define LIST(i) skip
#endif
#define ALIVE(i) ((alive & BIT(i)) != 0)

byte now;                 /* the clock (the server's and the clients', same rate) */
byte lk;                  /* the engine's row lock: holder id + 1, 0 = free */
byte alive;               /* bit per client: its holding transaction is open (it holds the row) */
byte listed;              /* bit per client: its holding session still listed (GUARD=3): it goes after its
                             transaction, which the server rolls back (freeing the row) before the thread exits */
byte idle[NCLIENTS];      /* when its holding session's last statement ended */
byte gseq;                /* grants of the row so far: the engine's lock order */
byte gof[NCLIENTS];       /* the grant number of the client's current hold */
byte counter;             /* the name's token counter */
byte clk;                 /* the counter row's lock: drawer id + 1 (a draw in flight, or INHOLD) */
byte bumped;              /* INHOLD: bit per client, its holding transaction bumped the counter */
/* The record a reader sees (committed): owner id + 1, token, locked_at (= grant number). */
byte rec_owner, rec_tok, rec_g;
byte pend[NCLIENTS];      /* today: the record written in the holding transaction, uncommitted */
byte drawn;               /* bit per client: its current hold's draw (INDRAW: and record) committed */
/* The clients' view. */
byte valid;               /* bit per client: a valid lease */
byte until[NCLIENTS];
byte htok[MAXG + 1];      /* the token handed out for grant g (0: none) */
byte kills;
#if VACUITY == 2
bool guard_passes;
#endif
#if VACUITY == 1
bool idle_ended_handed;   /* the idle limit ended a hold that had been handed out */
#endif
bool record_wrong;        /* set by reader() only, to name its assertion */
/* Named so that spin's message says which property failed (set just before their assertions). */
bool tokens_in_grant_order = true, one_valid_lease = true, idle_limit_after_validity = true;

/* A holding transaction ends without a COMMIT (rollback, killed, idle limit). */
#define ABORT(c) \
    if :: lk == c + 1 -> lk = 0 :: else fi; \
    alive = alive & ~BIT(c); pend[c] = 0; idle[c] = 0; gof[c] = 0; drawn = drawn & ~BIT(c); \
    if :: bumped & BIT(c) -> counter--; bumped = bumped & ~BIT(c); clk = 0 :: else fi

active proctype clock() {
end:
    do
    :: d_step {
           now < MAXT -> now++;
           if :: (valid & BIT(0)) && now > until[0] -> valid = valid & ~BIT(0); until[0] = 0 :: else fi;
           if :: (valid & BIT(1)) && now > until[1] -> valid = valid & ~BIT(1); until[1] = 0 :: else fi;
#if NCLIENTS > 2
           if :: (valid & BIT(2)) && now > until[2] -> valid = valid & ~BIT(2); until[2] = 0 :: else fi;
#endif
       }
    od
}

#ifndef SQLITE
/* The idle limit: never a valid lease (its holder's validity ends first). */
#define IDLE_END(c) \
    atomic { \
        ALIVE(c) && now > idle[c] + TTL -> \
        printf("MSC: the idle limit ends client %d's transaction (grant %d)\n", c, gof[c]); \
        idle_limit_after_validity = !(valid & BIT(c)); \
        assert(idle_limit_after_validity);  /* P1: the idle limit never ends a valid lease */ \
        IDLE_HANDED(c); \
        ABORT(c) \
    }
#if VACUITY == 1
#define IDLE_HANDED(c) if :: htok[gof[c]] != 0 -> idle_ended_handed = true :: else fi
#else
#define IDLE_HANDED(c) skip
#endif
#ifdef SLOWWATCH
#define WATCH(c) skip
#else
#define WATCH(c) valid = valid & ~BIT(c); until[c] = 0  /* the session watch reports it at once */
#endif
#define KILL_ONE(c) \
    atomic { \
        kills < NKILL && ALIVE(c) -> kills++; \
        printf("MSC: the server ends client %d's session (grant %d)\n", c, gof[c]); \
        WATCH(c); ABORT(c) \
    }

active proctype server() {
end:
    do
#if GUARD == 3
    :: d_step { (listed & ~alive) != 0 -> listed = listed & alive }  /* the ended session's thread exits */
#endif
    :: IDLE_END(0)
    :: IDLE_END(1)
#if NCLIENTS > 2
    :: IDLE_END(2)
#endif
#ifdef KILL
    :: KILL_ONE(0)
    :: KILL_ONE(1)
#if NCLIENTS > 2
    :: KILL_ONE(2)
#endif
#endif
    od
}
#endif

#if defined(INDRAW) && !defined(NOREC)
/* What a reader sees: once the row's holder has committed its draw, the record is its grant. */
active proctype reader() {
end:
    atomic {
        lk != 0 && (drawn & BIT(lk - 1)) && (rec_g != gof[lk - 1] || rec_owner != lk) ->
        record_wrong = true;
        printf("MSC: the record names client %d (grant %d, token %d) while client %d holds grant %d\n",
               rec_owner - 1, rec_g, rec_tok, lk - 1, gof[lk - 1]);
        assert(!record_wrong)
    }
}
#endif

proctype client(byte id) {
    byte done, g, mine, sent, k;
    bool ok, fail;
    do
    :: done < NACQ ->
        sent = now;  /* validity counts from before the lock is sent */
#if defined(EARLYDRAW) || defined(SQLITE)
        /* the draw first (SQLite: BEGIN IMMEDIATE, so never while someone holds) */
        atomic {
#ifdef SQLITE
            lk == 0 ->
#endif
            counter++; mine = counter;
            printf("MSC: client %d draws token %d before it locks\n", id, mine)
        };
#endif
        /* the lock: granted when the row is free; else busy (SKIP LOCKED, or its lock wait ends) */
        if
        :: atomic {
               lk == 0 -> lk = id + 1; alive = alive | BIT(id); LIST(id); gseq++; g = gseq; gof[id] = g;
               idle[id] = now; drawn = drawn & ~BIT(id); ok = true;
               printf("MSC: client %d is granted the row (grant %d)\n", id, g)
           }
        :: atomic { lk != 0 -> ok = false }
        fi;
#ifdef LATEVALID
        sent = now;  /* validity counted from the answer: wrong */
#endif
        if
        :: ok ->
#if defined(SQLITE)
            atomic {  /* someone drew since: it goes first */
                if :: counter != mine -> fail = true :: else -> pend[id] = mine; idle[id] = now fi
            };
#elif defined(EARLYDRAW)
            atomic { if :: ALIVE(id) -> pend[id] = mine; idle[id] = now :: else -> fail = true fi };
#elif defined(INHOLD)
            /* the counter bumped inside the holding transaction: rolled back with it */
            atomic {
                if
                :: ALIVE(id) && clk == 0 ->
                    clk = id + 1; counter++; mine = counter; bumped = bumped | BIT(id); idle[id] = now;
                    pend[id] = mine; printf("MSC: client %d draws token %d in its holding transaction\n", id, mine)
                :: !ALIVE(id) -> fail = true
                fi
            };
#elif !defined(INDRAW)
            /* today: the draw on another connection, then the record in the holding transaction */
            atomic {
                clk == 0 -> counter++; mine = counter;
                printf("MSC: client %d draws token %d\n", id, mine)
            };
            if :: skip :: fail = true fi;  /* the draw's answer lost */
            if
            :: !fail ->
                atomic {
                    if :: ALIVE(id) -> pend[id] = mine; idle[id] = now :: else -> fail = true fi
                }
            :: else
            fi;
#else
            /* design 2: the draw's own transaction records the grant */
#if GUARD == 1 || GUARD == 3
#ifdef LATECHECK
            atomic { ok = ALIVE(id); printf("MSC: client %d's guard reads its transaction alive: %d\n", id, ok) };  /* first: wrong */
#endif
            atomic {
                clk == 0 -> clk = id + 1; counter++; mine = counter;
#ifndef LATECHECK
#if GUARD == 3
                ok = (listed & BIT(id)) != 0;  /* the session, not the transaction: wrong */
                printf("MSC: client %d's guard finds its session listed: %d (transaction open: %d)\n", id, ok, ALIVE(id));
#else
                ok = ALIVE(id);  /* after the counter row is written (locked) */
#endif
#endif
#if VACUITY == 2
                guard_passes = ok;
                assert(guard_passes);  /* non-vacuity: a session ended between its lock and its draw */
#endif
                skip
            };
#ifdef SPLITREC
            clk = 0;  /* the counter committed alone, the record in a transaction of its own: wrong */
#endif
            atomic {  /* the commit */
                if
                :: ok -> rec_owner = id + 1; rec_tok = mine; rec_g = g; drawn = drawn | BIT(id);
                    printf("MSC: client %d draws token %d and records grant %d\n", id, mine, g)
                :: else -> fail = true;
                    printf("MSC: client %d draws token %d, its guard finds its transaction gone\n", id, mine)
                fi;
                clk = 0
            };
#else
            atomic {
                clk == 0 -> counter++; mine = counter;
                rec_owner = id + 1; rec_tok = mine; rec_g = g; drawn = drawn | BIT(id);
                printf("MSC: client %d draws token %d and records grant %d\n", id, mine, g)
            };
#endif
            if :: skip :: fail = true fi;  /* the draw's answer lost */
#if GUARD == 2
            if
            :: !fail -> atomic { if :: ALIVE(id) -> idle[id] = now :: else -> fail = true fi }
            :: else
            fi;
#endif
#endif
            /* the slow path: a keep-alive, and validity counted anew from it */
#ifndef NOKEEP
            if
            :: !fail && now != sent ->
                atomic { if :: ALIVE(id) -> sent = now; idle[id] = now :: else -> fail = true fi }
            :: else
            fi;
#endif
            if
            :: !fail ->
                d_step {  /* handed out */
                    printf("MSC: client %d hands out token %d (grant %d)\n", id, mine, g);
#if VACUITY == 1
                    assert(!idle_ended_handed);  /* non-vacuity: handed over after the idle limit */
#endif
                    k = 1;
                    do
                    :: k <= gseq ->
                        if
                        :: htok[k] != 0 && k < g && htok[k] >= mine -> tokens_in_grant_order = false
                        :: htok[k] != 0 && k > g && htok[k] <= mine -> tokens_in_grant_order = false
                        :: else
                        fi;
                        k++
                    :: else -> break
                    od;
                    assert(tokens_in_grant_order);  /* P3/4 */
                    k = 0;
                    htok[g] = mine;
                    if
                    :: ALIVE(id) && now <= sent + TTL ->
                        one_valid_lease = (valid & ~BIT(id)) == 0;
                        assert(one_valid_lease);  /* P1 */
                        valid = valid | BIT(id); until[id] = sent + TTL
                    :: else  /* its session already ended: lost at once (the watch) */
                    fi
                };
                /* held: renew, then release */
                do
                :: atomic {
                       (valid & BIT(id)) && ALIVE(id) ->
                       until[id] = now + TTL; idle[id] = now;
                       one_valid_lease = (valid & ~BIT(id)) == 0;
                       assert(one_valid_lease)  /* P1 */
                   }
                :: break
                od;
                atomic {
                    valid = valid & ~BIT(id); until[id] = 0;  /* it stops acting first */
                    if
                    :: ALIVE(id) ->  /* COMMIT */
                        if :: pend[id] != 0 -> rec_owner = id + 1; rec_tok = pend[id]; rec_g = g :: else fi;
                        pend[id] = 0; lk = 0; alive = alive & ~BIT(id); idle[id] = 0; gof[id] = 0;
                        drawn = drawn & ~BIT(id);
                        if :: bumped & BIT(id) -> bumped = bumped & ~BIT(id); clk = 0 :: else fi;
                        printf("MSC: client %d releases token %d\n", id, mine)
                    :: else
                    fi
                }
            :: else ->
                atomic { if :: ALIVE(id) -> ABORT(id) :: else fi }  /* ROLLBACK */
            fi
        :: else
        fi;
        d_step { done++; g = 0; mine = 0; sent = 0; ok = false; fail = false }
    :: done == NACQ -> break
    od
}

init {
    byte k;
    atomic {
        do
        :: k < NCLIENTS -> run client(k); k++
        :: else -> break
        od
    }
}
