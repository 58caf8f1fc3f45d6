/*
 * Majority mode's exclusion in real time (K1-majority), for spin:
 * scripts/model-check.sh runs it; docs/guarantees.md (P11) cites it.
 *
 * majority_token.pml shows the token rule holds even when two clients hold the
 * lock at once. This model asks the other question: when can two clients hold
 * it at once? Redlock's answer, which this checks: never, while member clocks
 * run at the real rate, members keep their rows, and a holder stops acting
 * when its validity runs out; and it CAN happen under each of a member's clock
 * jump, a holder's pause, or a member that restarts without its rows and
 * rejoins at once. Each of those is a configuration below that spin must find
 * a violation in; the plain model and the one with delayed rejoin must hold.
 *
 * Time is discrete and kept as time LEFT, so the state space stays finite: a
 * member's row has a holder (client id + 1, 0 = none) and the ticks left
 * before it expires in the member's time; a row is free when it has no holder
 * or no time left (the table lock's takeover of an expired row). A client's
 * validity is the ticks left before its validity ends. The clock process ticks
 * every counter down at once, at any moment. Per attempt, a client
 * (src/majority_locker.cpp):
 *   validity = TTL - DRIFT, counted from before the first request;
 *   asks every member, in order; each request is answered (granted or
 *     refused), granted with the answer lost, or lost; time may pass between
 *     any two steps; a member grants if its row is free (row written, TTL left);
 *   granted if a majority granted AND validity is left; otherwise it deletes
 *     its rows (those it can reach) and the attempt failed.
 * A holder acts on the resource ("writes") only after checking that its
 * validity has not ended, in the same step, unless -DPAUSE: then time may pass
 * between the check and the write (a GC pause, SIGSTOP).
 *
 * Checked with an assertion at every write: no other client was granted the
 * lock after the writer's grant (exclusion of acting holders).
 *
 * Options: -DJUMP a member's clock jumps forward by JUMPBY once, at any
 * moment (its rows lose JUMPBY ticks); -DPAUSE as above; -DLOSS a member restarts once without its rows
 * (crash with relaxed durability); -DLOSS -DREJOIN it also refuses requests
 * for TTL ticks after the restart (Redlock's delayed restart). -DVACUITY
 * asserts that no two grants happen in one run, which spin must refute: the
 * model does hand the lock from one client to the other, so "holds" is not
 * vacuous.
 */

#define NCLIENTS 2
#ifndef NACQ
#define NACQ 2          /* attempts per client */
#endif
#define NMEMBERS 3
#define QUORUM 2
#define TTL 4
#define DRIFT 1
#define JUMPBY 3

byte holder[NMEMBERS];      /* client id + 1, or 0 */
byte left[NMEMBERS];        /* ticks before the row expires, in the member's time */
byte down[NMEMBERS];        /* REJOIN: ticks before the member answers again */
byte valid[NCLIENTS];       /* ticks before the client's validity ends */
byte last_grant;            /* the client granted most recently, + 1 */
byte grants;                /* VACUITY: grants so far */

#define FREE(i) (holder[i] == 0 || left[i] == 0)
#define UP(i) (down[i] == 0)
#define TICK(x) if :: x > 0 -> x-- :: else fi

active proctype clock() {
end:
    do
    :: d_step {
           TICK(left[0]); TICK(left[1]); TICK(left[2]);
           TICK(down[0]); TICK(down[1]); TICK(down[2]);
           TICK(valid[0]); TICK(valid[1])
       }
    od
}

#ifdef JUMP
active proctype jump() {
    byte i;
    if :: i = 0 :: i = 1 :: i = 2 fi;
    d_step { if :: left[i] > JUMPBY -> left[i] = left[i] - JUMPBY :: else -> left[i] = 0 fi };
    printf("MSC: member %d's clock jumps forward by %d\n", i, JUMPBY)
}
#endif

#ifdef LOSS
active proctype loss() {
    byte i;
    if :: i = 0 :: i = 1 :: i = 2 fi;
    d_step {
        holder[i] = 0; left[i] = 0;
#ifdef REJOIN
        down[i] = TTL;
#endif
    };
    printf("MSC: member %d restarts without its rows\n", i)
}
#endif

/* A request to member i: answered (granted or refused), granted with the answer lost, or lost. */
#define ASK(i) \
    if \
    :: d_step { UP(i) && FREE(i) -> holder[i] = id + 1; left[i] = TTL; got++ } \
    :: d_step { !(UP(i) && FREE(i)) -> skip } \
    :: d_step { UP(i) && FREE(i) -> holder[i] = id + 1; left[i] = TTL }  /* answer lost */ \
    :: skip  /* request lost */ \
    fi

#define CLEAN(i) \
    if \
    :: d_step { holder[i] == id + 1 -> holder[i] = 0; left[i] = 0 } \
    :: else -> skip  /* not ours, or the request is lost: the row expires by its TTL */ \
    fi

proctype client(byte id) {
    byte acq, got;
    do
    :: acq < NACQ ->
        valid[id] = TTL - DRIFT;
        ASK(0); ASK(1); ASK(2);
        if
        :: d_step { got >= QUORUM && valid[id] > 0 -> last_grant = id + 1 };
#ifdef VACUITY
           d_step { grants++; assert(grants < NCLIENTS) };
#endif
           printf("MSC: client %d granted\n", id);
           /* act on the resource while valid (or, with PAUSE, after a check that may be stale) */
           do
#ifdef PAUSE
           :: valid[id] > 0 ->
               /* checked; a pause may let time pass before the write */
               d_step { assert(last_grant == id + 1) }
#else
           :: d_step { valid[id] > 0 -> assert(last_grant == id + 1) }
#endif
           :: break
           od;
           CLEAN(0); CLEAN(1); CLEAN(2)
        :: else -> CLEAN(0); CLEAN(1); CLEAN(2)
        fi;
        d_step { acq++; got = 0; valid[id] = 0 }
    :: acq == NACQ -> break
    od
}

init {
    atomic { run client(0); run client(1) }
}
