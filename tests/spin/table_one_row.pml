/*
 * The table lock's "one row per cycle" design (issue 40, design 1), for spin:
 * scripts/model-check.sh runs it. Model-checked before it is implemented.
 *
 * One row per name in <prefix>_locks, kept after a release as a FREE row that
 * carries the name's last token. Every statement is one atomic step (DESIGN.md
 * rule 2) on the database's clock `now`:
 *   acquire  no row: INSERT, token = GREATEST(floor + 1, now) (first use);
 *            row free (owner NULL) or expired (expires < now): take it,
 *              token + 1, owner = me, expires = now + TTL (the mark is kept);
 *            else busy, and a waiting acquirer marks the row (waiters = true)
 *              in that same statement and is told the row's expires.
 *   release  UPDATE owner = NULL, waiters = false WHERE owner = me AND token =
 *            mine, NOTIFY at its commit when the row was marked. Its commit is
 *            not flushed (PostgreSQL's synchronous_commit = off): a crash may
 *            undo it, unless a later durable commit flushed it.
 *   renew    UPDATE expires WHERE owner = me AND token = mine AND not expired.
 *   reaper   turns an expired row free, and purges a free or expired row whose
 *            token is older than the horizon (token < now - HORIZON), raising
 *            the floor to that token in the same transaction; both NOTIFY when
 *            the row was marked (anything that ends a marked hold does).
 * The answer to an acquire may be lost (a broken connection, a crash): the
 * grant then is not handed out, and the client frees the row by owner (rule 6),
 * or that is lost too and the row expires. A holder may pause arbitrarily long
 * (past its expiry) while it believes it holds: any interleaving with the clock.
 * The server may crash and restart once: committed state survives, except an
 * unflushed release; the clock may come back lower (a host clock stepped back,
 * a failover), by up to BACK ticks; the listener's connection drops, and the
 * store's listener, once it LISTENs again, wakes every waiter of the store
 * (release_hub::announce("")).
 *
 * A waiter reads the release generation (here: clears its `notified` bit)
 * BEFORE its statement, then sleeps until a NOTIFY reached it, or its own
 * timer, which may fire at any moment after the expires the busy answer
 * returned (its back-off: "finds the row expired on its own retry"), or it
 * gives up when time is over (MAXT: its wait's deadline).
 *
 * Checked:
 *   P1   at every hand-out and renewal: no other client's lease is valid. A
 *        lease is valid from its hand-out until the database clock passes its
 *        expires (a client that paused past it may still think it holds: not
 *        counted, that is what fencing tokens are for); never valid again
 *        after that, even if the clock steps back.
 *   P3/4 at every hand-out: its token is greater than every token handed out
 *        before it (releases, takeovers, purges and first-use INSERTs, restarts).
 *   wake never a waiter asleep, not notified, while the row is free or gone and
 *        no wake-all is pending (the release that freed it must have woken it;
 *        a lease that merely expired is left to the waiter's timer).
 *
 * Variants that must hold too:
 *   -DMARKAFTER    the busy answer and the mark are two statements (MariaDB), the
 *                  mark only on a row held and live (owner IS NOT NULL AND expires_at
 *                  >= now), and a waiter whose mark found no such row tries again at
 *                  once instead of sleeping;
 *   -DSTEPWISE     the purge as MariaDB's transaction (purge_tokens_stepwise):
 *                  measure the highest token (no lock), then, committed together,
 *                  raise the floor to it and delete the row if it is still
 *                  purgeable AND its token is at most that highest.
 * Negative controls (spin must find a violation):
 *   -DNOFLOOR      the purge does not raise the floor (P3/4, with a clock step back);
 *   -DSTEPWISE -DNOGUARD  the stepwise delete without "token <= highest" (P3/4);
 *   -DLOSTWAKE=1   the release reads the mark, then frees in a second statement;
 *   -DLOSTWAKE=2   the busy answer and the mark are two statements, the mark
 *                  conditioned as MariaDB's mark_sql_ is today (expires_at >= now
 *                  only): it marks a row released meanwhile, which keeps its expires;
 *   -DLOSTWAKE=3   a takeover of an expired row clears the mark;
 *   -DLATELISTEN   the restarted listener wakes the store's waiters before it LISTENs again;
 *   -DLATEGEN      the waiter reads the release generation after its statement, not before;
 *   -DNOEXPIRY     the takeover without the expiry check (P1);
 *   -DPURGELIVE    the purge without "free or expired" (P1);
 *   -DVACUITY=1    asserts no hand-over to a waiter woken by a holder's release;
 *   -DVACUITY=2    asserts no first-use INSERT whose token the floor decided
 *                  (floor + 1 > now: the purge-and-reinsert path is reached).
 *
 * Abstractions: one name; NCLIENTS clients of one store (one listener; a NOTIFY
 * wakes every waiter of the store), NACQ attempts each; time in ticks up to MAXT
 * (tokens and the clock share the unit, as tokens are microseconds); statements
 * atomic, so the stale floor an acquire can read while a purge commits
 * (docs/operations.md: covered by the clock term and the 2 h horizon) is not
 * modelled; nor are max_age, force_release, the retry of a broken acquire
 * (attempt id), MariaDB's per-listener bell, or clients of two versions.
 */
 */

#ifndef NCLIENTS
#define NCLIENTS 2
#endif
#ifndef NACQ
#define NACQ 2          /* attempts per client (each ends granted, lost, or timed out) */
#endif
#ifndef TTL
#define TTL 2
#endif
#ifndef MAXT
#define MAXT 6          /* the clock stops here: the waiters' deadline */
#endif
#ifndef HORIZON
#define HORIZON 1       /* token horizon, in ticks */
#endif
#ifndef BACK
#define BACK 2          /* the most the clock steps back at the restart */
#endif
#ifndef NRESTART
#define NRESTART 1
#endif
#ifndef LOSTWAKE
#define LOSTWAKE 0
#endif
#ifndef VACUITY
#define VACUITY 0
#endif
#define MAXTOKEN 250
#define ALL ((1 << NCLIENTS) - 1)

/* The name's row. */
bool row;                 /* it exists */
byte owner;               /* client id + 1; 0 = NULL (free) */
byte token;
byte expires;
bool mark;                /* waiters */
byte floor;               /* the floor row's token (name '') */
byte now;                 /* the database's clock */

/* The unflushed release (volatile until a durable commit or a crash). */
bool vol;
byte vol_owner;
bool vol_mark;

/* Wake-ups. */
bool listening = true;    /* the store's listener LISTENs */
bool pending;             /* a wake-all is owed (the listener reconnects) */
byte watching;            /* bit per client: inside a waiting acquire (it read the generation) */
byte notified;            /* bit per client: a NOTIFY reached it since it began watching */
byte sleeping;            /* bit per client: asleep after a busy answer */

/* The clients' view. */
byte valid;               /* bit per client: a valid lease (by the database clock) */
byte until[NCLIENTS];     /* its expires */
byte handed_max;          /* the largest token handed out */
byte restarts;
bool lost_wakeup;         /* set by watch() only, to name its assertion */

#define BIT(i) (1 << (i))
#define UNWATCH watching = watching & ~BIT(id); notified = notified & ~BIT(id)
#if VACUITY == 1
bool handover;            /* a holder's release notified */
#define WOKEN woken = true  /* remembered until the attempt ends */
#define HANDOVER handover = true
#else
#define WOKEN skip
#define HANDOVER skip
#endif
#define NOTIFY if :: listening -> notified = watching :: else -> skip fi
#define DURABLE vol = false; vol_owner = 0; vol_mark = false
#define FREE_OR_EXPIRED (owner == 0 || expires < now)
#ifdef NOEXPIRY
#define TAKEABLE true
#else
#define TAKEABLE FREE_OR_EXPIRED
#endif
#ifdef PURGELIVE
#define PURGEABLE true
#else
#define PURGEABLE FREE_OR_EXPIRED
#endif

active proctype clock() {
end:
    do
    :: d_step {
           now < MAXT -> now++;
           /* leases end by the database clock, once and for all */
           if :: (valid & BIT(0)) && now > until[0] -> valid = valid & ~BIT(0); until[0] = 0 :: else fi;
           if :: (valid & BIT(1)) && now > until[1] -> valid = valid & ~BIT(1); until[1] = 0 :: else fi;
#if NCLIENTS > 2
           if :: (valid & BIT(2)) && now > until[2] -> valid = valid & ~BIT(2); until[2] = 0 :: else fi;
#endif
       }
    od
}

#if LOSTWAKE == 2
#define MARKABLE (expires >= now)  /* today's mark_sql_ condition: a free row keeps its expires */
#else
#define MARKABLE (owner != 0 && expires >= now)  /* held and live */
#endif
#ifdef NOGUARD
#define STILL_MEASURED true
#else
#define STILL_MEASURED (token <= highest)
#endif
active proctype reaper() {
#ifdef STEPWISE
    byte highest;
#endif
end:
    do
    :: d_step {  /* an expired row turned free */
           row && owner != 0 && expires < now ->
           printf("MSC: reaper frees the expired row (token %d, marked %d)\n", token, mark);
           owner = 0; if :: mark -> NOTIFY :: else fi; mark = false; DURABLE
       }
#ifndef STEPWISE
    :: d_step {  /* a purge past the token horizon: one statement (PostgreSQL) */
           row && PURGEABLE && token + HORIZON < now ->
#ifndef NOFLOOR
           if :: token > floor -> floor = token :: else fi;
#endif
           printf("MSC: reaper purges the row (token %d), floor %d\n", token, floor);
           row = false; owner = 0; if :: mark -> NOTIFY :: else fi; mark = false; DURABLE
       }
#else
    :: d_step {  /* the stepwise purge (MariaDB): measure, without a lock */
           row && PURGEABLE && token + HORIZON < now -> highest = token
       };
       d_step {  /* then raise the floor and delete, committed together */
           if :: highest > floor -> floor = highest :: else fi;
           if
           :: row && PURGEABLE && token + HORIZON < now && STILL_MEASURED ->
               printf("MSC: reaper purges the row (token %d, measured %d), floor %d\n", token, highest, floor);
               row = false; owner = 0; if :: mark -> NOTIFY :: else fi; mark = false
           :: else
           fi;
           highest = 0; DURABLE
       }
#endif
    od
}

active proctype server() {
    byte b;
end:
    do
    :: restarts < NRESTART ->
        atomic {
            restarts++;
            /* a release not flushed yet is lost */
            if :: vol -> owner = vol_owner; mark = vol_mark :: else fi; DURABLE;
            listening = false; pending = true;
            b = 0;
            do
            :: b < BACK && b < now -> b++
            :: break
            od;
            now = now - b;
            printf("MSC: server restarts, clock back by %d\n", b);
            b = 0
        }
#ifdef LATELISTEN
        d_step { notified = watching; pending = false };
        listening = true
#else
        listening = true;  /* LISTEN first, */
        d_step { notified = watching; pending = false }  /* then wake every waiter */
#endif
    od
}

/* never a waiter asleep, not notified, with the row free or gone and no wake-all owed */
#define STUCK(w) ((sleeping & BIT(w)) && !(notified & BIT(w)) && (!row || owner == 0) && !pending)
active proctype watch() {
end:
    atomic {
        (STUCK(0) || STUCK(1)
#if NCLIENTS > 2
         || STUCK(2)
#endif
        ) ->
        lost_wakeup = true;
        printf("MSC: a waiter sleeps through a free row (lost wake-up)\n");
        assert(!lost_wakeup)
    }
}

proctype client(byte id) {
    byte done, mine, seen, got;
    bool held, woken, m;
    do
    :: done < NACQ ->
        do
        ::
#ifndef LATEGEN
           atomic { watching = watching | BIT(id); notified = notified & ~BIT(id) };  /* read the generation first */
#endif
           /* acquire: one statement, and its answer (arrives or is lost) */
           atomic {
               d_step {
                   if
                   :: !row ->
                       row = true; owner = id + 1; mark = false;
                       if :: floor + 1 > now -> token = floor + 1 :: else -> token = now fi;
                       printf("MSC: client %d inserts the row: token %d (floor %d, clock %d)\n", id, token, floor, now);
#if VACUITY == 2
                       assert(!(floor + 1 > now && floor > 0));
#endif
                       expires = now + TTL; got = 1
                   :: row && TAKEABLE ->
                       if :: owner != 0 -> printf("MSC: client %d takes over the row of client %d\n", id, owner - 1) :: else fi;
                       token++; owner = id + 1; expires = now + TTL; got = 1;
#if LOSTWAKE == 3
                       mark = false;
#endif
                   :: else ->
#if LOSTWAKE != 2 && !defined(MARKAFTER)
                       mark = true;
#endif
                       printf("MSC: client %d is told busy\n", id);
                       seen = expires; got = 0
                   fi;
                   assert(token < MAXTOKEN);
                   DURABLE
               };
               if
               :: got == 1 ->
                   if
                   :: d_step {  /* handed out */
                          mine = token; held = true; UNWATCH;
                          printf("MSC: client %d hands out token %d (largest before %d)\n", id, mine, handed_max);
                          assert((valid & ~BIT(id)) == 0);  /* P1 */
                          assert(mine > handed_max);        /* P3/P4 */
#if VACUITY == 1
                          assert(!(woken && handover));  /* woken by a holder's release */
#endif
                          handed_max = mine; valid = valid | BIT(id); until[id] = expires
                      }
                   :: d_step { got = 2; UNWATCH; printf("MSC: client %d's grant (token %d) is lost on the way\n", id, token) }  /* in doubt */
                   fi
               :: else
               fi
           };
           if
           :: got == 1 -> break
           :: got == 2 ->
               /* free the row by owner (rule 6), or that is lost too and it expires */
               if
               :: d_step {
                      row && owner == id + 1 ->
                      printf("MSC: client %d frees its row by owner (marked %d)\n", id, mark);
                      owner = 0; if :: mark -> NOTIFY :: else fi; mark = false; DURABLE
                  }
               :: skip
               fi;
               break
           :: got == 0 ->
#ifdef LATEGEN
               d_step { watching = watching | BIT(id); notified = notified & ~BIT(id) };  /* read after the answer */
#endif
#if LOSTWAKE == 2 || defined(MARKAFTER)
               /* the mark, a statement of its own (MariaDB's mark_sql_); not marked: try again at once */
               d_step {
                   if
                   :: row && MARKABLE -> mark = true; DURABLE
                   :: else -> got = 4; seen = 0
                   fi
               };
#endif
               if
               :: got == 4 -> got = 0
               :: else ->
                   d_step { sleeping = sleeping | BIT(id) };
                   if
                   :: d_step { (notified & BIT(id)) -> sleeping = sleeping & ~BIT(id); WOKEN; seen = 0 }
                   :: d_step { now > seen && now < MAXT -> sleeping = sleeping & ~BIT(id); seen = 0 }  /* its timer */
                   :: d_step { now == MAXT -> sleeping = sleeping & ~BIT(id); seen = 0; got = 3; UNWATCH }  /* deadline */
                   fi;
                   if :: got == 3 -> break :: else fi
               fi
           fi
        od;
        if
        :: held ->
            do
            :: atomic {  /* renew */
                   if
                   :: row && owner == id + 1 && token == mine && expires >= now ->
                       expires = now + TTL; DURABLE;
                       assert((valid & ~BIT(id)) == 0);  /* P1 */
                       valid = valid | BIT(id); until[id] = expires
                   :: else -> valid = valid & ~BIT(id); until[id] = 0  /* lost: it releases all the same */
                   fi
               }
            :: break
            od;
            /* release (the client stops acting first) */
#if LOSTWAKE == 1
            atomic { valid = valid & ~BIT(id); until[id] = 0; m = (row && owner == id + 1 && token == mine && mark) };
            d_step {
                if
                :: row && owner == id + 1 && token == mine ->
                    vol_owner = owner; vol_mark = mark; vol = true;
                    printf("MSC: client %d releases token %d (saw marked %d)\n", id, mine, m);
                    owner = 0; mark = false; if :: m -> NOTIFY :: else fi
                :: else
                fi;
                m = false
            };
#else
            atomic {
                valid = valid & ~BIT(id); until[id] = 0;
                if
                :: row && owner == id + 1 && token == mine ->
                    vol_owner = owner; vol_mark = mark; vol = true;
                    printf("MSC: client %d releases token %d (marked %d)\n", id, mine, mark);
                    owner = 0; if :: mark -> NOTIFY; HANDOVER :: else fi; mark = false
                :: else
                fi
            };
#endif
            held = false
        :: else
        fi;
        d_step { done++; got = 0; mine = 0; seen = 0; woken = false }
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
