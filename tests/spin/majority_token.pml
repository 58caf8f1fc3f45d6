/*
 * The majority token protocol of src/majority_locker.cpp (settle_token), for
 * spin. scripts/model-check.sh runs it; docs/majority.md explains it.
 *
 * N = 3 members, each with a durable max-register c[i] (the row of a name in
 * <prefix>_majority_tokens). A client that holds the lock on a majority M
 * (any majority: mutual exclusion is NOT assumed, two clients may hold the
 * lock at once, as after a clock jump or a pause) settles a token:
 *   round 1: read c[i] from the members of M; a majority of the N must answer;
 *            T = max + 1;
 *   round 2: on each member of M, atomically
 *              if c[i] < T then c[i] := T, won else not won;
 *            T is handed out only if a majority of the N answered "won";
 *            otherwise read again (at most MAXROUNDS rounds), then give up.
 * Any read may be lost (no answer in time); any write may be applied with its
 * answer lost, never arrive, or arrive late: at any later moment, after the
 * client has moved on (the network process below).
 *
 * Since issue 21 the first round 1 is the read each member makes in the same
 * call as its grant, and every round settles as soon as a majority answered:
 * the reads of the members that had not answered yet are lost reads, their
 * writes are writes that land late. Both are behaviours the model already has
 * (it assumes nothing of when a read is made within the attempt, nor that the
 * lock is held then). -DEARLYWRITE is the tempting wrong way to settle the
 * write round early: a write still in flight counts as won (settled once a
 * majority was *sent* the write, not once it *won*). It must fail. Every client asks all three
 * members: a member outside its M is one whose read and write are lost, so
 * this covers every choice of M, overlapping the other clients' or not.
 *
 * Bounds, to keep the check to seconds (scripts/model-check.sh runs several):
 * NCLIENTS clients, NACQ acquisitions each, MAXROUNDS rounds per acquisition
 * (settle_token has 3: each round is a fresh read, so a third adds nothing a
 * second does not), one late write in flight at a time, members visited in
 * the order 0, 1, 2 within a round unless -DANYORDER.
 *
 * Checked at every hand-out, with assertions:
 *   (a) uniqueness:   no two hand-outs carry the same token;
 *   (b) monotonicity: a hand-out whose attempt started after another hand-out
 *       completed carries a larger token (floor = the largest token handed out
 *       when the attempt began; the attempt's last round 1 starts later still).
 *
 * -DLOSS adds a member that restarts once without its data (its counter back
 * to 0, under a new identity), with the rule of src/majority_locker.cpp
 * (join_members) that must make it safe: a member counts only while its
 * counters were seeded under its present identity ("joined"); a client reads
 * and writes only members it read as joined, and a write wins only on the
 * identity it read (a write in flight to the lost data wins nothing on the new
 * one); the lost member is seeded, from the counters of the majority of the
 * others, only once every attempt that began before the loss has ended (its
 * identity is older than the ttl: every such attempt's validity is over), and
 * then counts again. The check must hold. -DLOSS -DNOSEED is the old
 * behaviour (the member counts at once with its counter at 0): it must fail.
 *
 * -DTWOROUNDS: issue 40, design 3, checked before it is implemented (two rounds
 * per cycle: the grant, with the token in it, and the release). The call that
 * asks a member for the grant also writes, in the grant's own statement,
 * T = hint + 1 on that member's counter, as the write round does: won only where
 * the counter is below T (strictly), and only on a member whose present identity
 * has joined, checked in that same statement (no read precedes it to name an
 * identity: the statement's own check is the rule). The hint is the largest
 * token the client has seen (handed out, or read in a read round), 0 at first:
 * a per-name cache that outlives the attempt. T is handed out when that write
 * won on a majority of the N (settled as the write round is); otherwise the
 * attempt goes on with the read and write rounds above (MAXROUNDS of them). The
 * grant's write may be lost, land with its answer lost, land late (after its
 * client moved on), or never arrive, as any write. It must hold.
 *   -DANYHINT     the hint is any value 0..HINTMAX instead (a stale cache, one filled
 *                 from one member only or by another process, none, one ahead): must
 *                 hold too, as a hand-out rests on the strict win on a majority alone,
 *                 never on where T came from;
 *   -DCARRY       the grant's statement also returns the counter after its write (and
 *                 the member's identity), and the first read round is those answers
 *                 when a majority of joined members gave one (no read round of its
 *                 own, as the grant's read today): must hold;
 *   -DFASTONLY=k  a bound: client k ends its attempt when the grant's write did not
 *                 win (as when its validity ran out), without the read and write
 *                 rounds; what keeps 2 acquisitions, 3 clients and -DLOSS in seconds.
 * With -DLOSS -DTWOROUNDS the loss comes in one step, and only once the group has
 * formed (the process of today's -DLOSS may run before init forms the group, which
 * then counts the member at once: a loss of nothing, but extra states).
 * Negative controls, spin must find a violation:
 *   -DFASTFEW     the grant's write hands out after a win on fewer than a majority (one);
 *   -DFASTEQ      the grant's write also "wins" where the counter already is T
 *                 (non-strict: e.g. an upsert whose found row counts as affected);
 *   -DFASTNOJOIN  (with -DLOSS) the grant's write without the joined check: it wins
 *                 on a member that restarted without its data, before it is seeded;
 *   -DFASTDRAW    the grant's statement draws instead (counter := max(counter + 1,
 *                 T), always taken) and the client hands out the largest a majority
 *                 drew: the one-round shortcut with a hint.
 * Non-vacuity, spin must find the assert: -DVACUITY=1 no grant's-write hand-out of a
 * token above 1 (the cached hint wins); -DVACUITY=2 no hand-out by the read and write
 * rounds after another client's counter refused the grant's write; -DVACUITY=3
 * (with -DLOSS) no grant's-write hand-out, after an earlier hand-out, that won on the
 * member that lost its data and was seeded since.
 */

#ifndef NCLIENTS
#define NCLIENTS 2
#endif
#ifndef NACQ
#define NACQ 2          /* acquisitions per client */
#endif
#define NMEMBERS 3
#define QUORUM 2        /* N/2 + 1 of the configured N */
#ifndef MAXROUNDS
#define MAXROUNDS 3     /* as settle_token */
#endif
#define MAXTOKEN 32     /* > NCLIENTS * NACQ * MAXROUNDS + 1: tokens stay below */

byte c[NMEMBERS];                /* per member: the durable max-register */
bool joined[NMEMBERS];           /* counters seeded under the member's present identity */
bit inc[NMEMBERS];               /* the member's identity: 1 after it lost its data */
byte busy;                       /* bit per client: inside an attempt */
byte stale;                      /* clients whose attempt began before the loss and has not ended */
byte pend_t, pend_i;             /* a write in flight, token and member (pend_t 0: none) */
bit pend_inc;                    /* the identity the write in flight was read on */
bool used[MAXTOKEN];             /* tokens handed out */
byte handed_max;                 /* the largest token handed out so far */
#ifdef TWOROUNDS
bit pend_any;                    /* the write in flight is a grant's: on the identity present when it lands */
#ifndef VACUITY
#define VACUITY 0
#endif
#ifndef HINTMAX
#define HINTMAX 3
#endif
#endif

/* One member's conditional write, atomic on the member (one statement): only on
   the identity `e` it was read on, and only while that identity has joined. */
inline write(i, t, e, won) {
    won = (joined[i] && inc[i] == e && c[i] < t);
    if
    :: won -> c[i] = t
    :: !won
    fi
}

#ifdef TWOROUNDS
/* The grant's own statement on member i, T = hint + 1: as write(), but the
   identity is the member's present one (checked in the statement itself). */
#ifdef FASTNOJOIN
#define FASTJOINED(i) true   /* wrong: no joined check */
#else
#define FASTJOINED(i) joined[i]
#endif
#ifdef FASTEQ
#define FASTBELOW(i, t) (c[i] <= t)   /* wrong: "won" where the counter already is T */
#else
#define FASTBELOW(i, t) (c[i] < t)
#endif
#ifdef FASTDRAW
/* Wrong: a draw, counter := max(counter + 1, T), always taken. */
inline fastwrite(i, t, won) {
    won = FASTJOINED(i);
    if
    :: won && c[i] + 1 < t -> c[i] = t
    :: won && c[i] + 1 >= t -> c[i]++
    :: !won
    fi
}
#else
inline fastwrite(i, t, won) {
    won = (FASTJOINED(i) && FASTBELOW(i, t));
    if
    :: won -> c[i] = t
    :: !won
    fi
}
#endif
#endif

/* Round 1 on member i (bit i of done: each member once per round, in any order
   with -DANYORDER, else in the order 0, 1, 2): the read is answered in time,
   or not. */
#ifdef ANYORDER
#define NEXT(i) ((done & (1 << i)) == 0)
#else
#define NEXT(i) (done == (1 << i) - 1)
#endif
#ifdef LOSS
/* The members read as joined, and on which identity: a write goes only there. */
#define NOTE_READ(i) seen = seen | (1 << i); if :: inc[i] -> seeninc = seeninc | (1 << i) :: else fi
#define SENT(i) (seen & (1 << i))
#define FORGET_READS seen = 0; seeninc = 0
#define ENTER busy = busy | (1 << id)
#define LEAVE busy = busy & ~(1 << id); stale = stale & ~(1 << id)
#else
/* Without a loss every member has joined, on its one identity: a write to a member
   whose read was lost is one more behaviour (it may also never arrive), so the
   check covers the protocol's, with fewer states. */
#define NOTE_READ(i) skip
#define SENT(i) true
#define FORGET_READS skip
#define ENTER skip
#define LEAVE skip
#endif
#define READ(i) \
    :: d_step { NEXT(i) && joined[i] -> done = done | (1 << i); reads++; NOTE_READ(i); \
                if :: c[i] > best -> best = c[i] :: c[i] <= best fi } \
    :: d_step { NEXT(i) -> done = done | (1 << i) }  /* lost, too late, or not in M */

/* Round 2 on member i, same order rule: T where it is still the largest. */
#define READINC(i) ((seeninc >> i) & 1)
#ifdef EARLYWRITE
#define OPTIMISTIC wins++  /* wrong: a write in flight counted as won */
#else
#define OPTIMISTIC skip
#endif
#define SEND(i) \
    :: d_step { NEXT(i) && SENT(i) -> done = done | (1 << i); \
                write(i, t, READINC(i), won); if :: won -> wins++ :: !won fi; won = false }  /* answered */ \
    :: d_step { NEXT(i) && SENT(i) -> done = done | (1 << i); \
                write(i, t, READINC(i), won); won = false }          /* lands, answer lost */ \
    :: d_step { NEXT(i) && SENT(i) && pend_t == 0 -> done = done | (1 << i); \
                pend_t = t; pend_i = i; pend_inc = READINC(i); OPTIMISTIC }  /* lands later, answer lost */ \
    :: d_step { NEXT(i) -> done = done | (1 << i) }   /* never arrives, or not in M */

#ifdef TWOROUNDS
/* The grant's call on member i: its statement's write of T is answered (won or
   not), lands with its answer lost, lands later, or never arrives (the member is
   down, slow, or busy and so not in M). */
#if defined(FASTDRAW)
#define WON(i) if :: c[i] > best -> best = c[i] :: else fi  /* the largest drawn */
#elif VACUITY == 3
#define WON(i) if :: inc[i] -> reborn = true :: else fi
#else
#define WON(i) skip
#endif
#ifdef CARRY
/* The statement returns the counter after its write, and the member's identity. */
#define CARRIED(i) if :: joined[i] -> reads++; NOTE_READ(i); if :: c[i] > best -> best = c[i] :: else fi :: else fi
#else
#define CARRIED(i) skip
#endif
#if VACUITY == 2
#define REFUSED(i) if :: joined[i] -> refused = true :: else fi
#else
#define REFUSED(i) skip
#endif
#define FAST(i) \
    :: d_step { NEXT(i) -> done = done | (1 << i); fastwrite(i, t, won); \
                if :: won -> wins++; WON(i) :: !won -> REFUSED(i) fi; CARRIED(i); won = false }  /* answered */ \
    :: d_step { NEXT(i) -> done = done | (1 << i); fastwrite(i, t, won); won = false }  /* lands, answer lost */ \
    :: d_step { NEXT(i) && pend_t == 0 -> done = done | (1 << i); \
                pend_t = t; pend_i = i; pend_any = 1 }  /* lands later, answer lost */ \
    :: d_step { NEXT(i) -> done = done | (1 << i) }   /* never arrives, or not in M */
#ifdef FASTFEW
#define FASTQUORUM 1   /* wrong: fewer than a majority */
#else
#define FASTQUORUM QUORUM
#endif
#ifdef ANYHINT
#define SEEN(x) skip
#else
#define SEEN(x) if :: x > last -> last = x :: else fi
#endif
#endif

proctype client(byte id) {
    byte acq, round, floor, best, t, reads, wins, done, seen, seeninc;
    bool won;
#if defined(TWOROUNDS) && !defined(ANYHINT)
    byte last;   /* the largest token this client has seen: the hint (a per-name cache) */
#endif
#if defined(TWOROUNDS) && defined(CARRY)
    bool carried;
#endif
#if defined(TWOROUNDS) && VACUITY == 2
    bool refused;
#endif
#if defined(TWOROUNDS) && VACUITY == 3
    bool reborn;   /* the grant's write won on the member that lost its data, seeded since */
#endif

    do
    :: acq < NACQ ->
        /* The lock is held on some majority M, the members that granted it. A
           member outside M is one whose read and write are lost: asking all
           three and losing answers covers every M (and keeps the state space
           small). */
        atomic { floor = handed_max; ENTER }  /* hand-outs completed before this attempt began */
#ifdef TWOROUNDS
        /* The grant's call: T = hint + 1, written in the grant's own statement. */
#ifdef ANYHINT
        atomic {
            t = 1;
            do
            :: t <= HINTMAX -> t++
            :: break
            od
        };
#else
        t = last + 1;
#endif
        assert(t < MAXTOKEN);
        do
        FAST(0) FAST(1) FAST(2)
        :: done == 7 -> done = 0; break
        od;
#ifdef FASTDRAW
        t = best; best = 0;
#endif
        if
        :: wins >= FASTQUORUM ->
            atomic {
                printf("MSC: client %d hands out token %d (floor %d), won by the grant's write\n", id, t, floor);
                assert(!used[t]);    /* (a) uniqueness */
                assert(t > floor);   /* (b) monotonicity */
#if VACUITY == 1
                assert(t <= 1);      /* non-vacuity: a hint from the cache wins */
#elif VACUITY == 3
                assert(!reborn || floor == 0);  /* non-vacuity: after a hand-out, a win on the seeded member counts */
#endif
                used[t] = true;
                if :: t > handed_max -> handed_max = t :: t <= handed_max fi;
                SEEN(t)
            };
            goto settled
#ifdef FASTONLY
        :: wins < FASTQUORUM && id == FASTONLY -> d_step { wins = 0; t = 0; best = 0; reads = 0; FORGET_READS }; goto settled
        :: wins < FASTQUORUM && id != FASTONLY ->
#else
        :: wins < FASTQUORUM ->
#endif
#ifdef CARRY
            /* The answers carry a first read when a majority of joined members gave one. */
            d_step { wins = 0; t = 0; if :: reads >= QUORUM -> carried = true :: else -> reads = 0; best = 0; FORGET_READS fi }
#else
            d_step { wins = 0; t = 0 }
#endif
        fi;
#endif
        do
        :: round < MAXROUNDS ->
#if defined(TWOROUNDS) && defined(CARRY)
            if
            :: carried -> carried = false
            :: else ->
                do
                READ(0) READ(1) READ(2)
                :: done == 7 -> done = 0; break
                od
            fi;
#else
            do
            READ(0) READ(1) READ(2)
            :: done == 7 -> done = 0; break
            od;
#endif
            if
            :: reads < QUORUM -> break  /* fewer than a majority answered: give up */
            :: reads >= QUORUM
            fi;
#ifdef TWOROUNDS
            atomic { SEEN(best); t = best + 1; best = 0; reads = 0 };
#else
            atomic { t = best + 1; best = 0; reads = 0 };
#endif
            assert(t < MAXTOKEN);
            do
            SEND(0) SEND(1) SEND(2)
            :: done == 7 -> done = 0; break
            od;
            if
            :: wins >= QUORUM ->
                /* Handed out. (settle_token's caller may still give it back when the
                   validity ran out meanwhile: that only removes a hand-out.) */
                atomic {
                    printf("MSC: client %d hands out token %d (floor %d)\n", id, t, floor);
                    assert(!used[t]);    /* (a) uniqueness */
                    assert(t > floor);   /* (b) monotonicity */
#if defined(TWOROUNDS) && VACUITY == 2
                    assert(!refused);    /* non-vacuity: the rounds recover from a refused grant's write */
#endif
                    used[t] = true;
#ifdef TWOROUNDS
                    if :: t > handed_max -> handed_max = t :: t <= handed_max fi;
                    SEEN(t)
#else
                    if :: t > handed_max -> handed_max = t :: t <= handed_max fi
#endif
                };
                break
            :: wins < QUORUM -> d_step { round++; wins = 0; t = 0; FORGET_READS }  /* read again */
            fi
        :: round == MAXROUNDS -> break
        od;
#ifdef TWOROUNDS
settled:
#if VACUITY == 2
        refused = false;
#elif VACUITY == 3
        reborn = false;
#endif
#endif
        atomic { acq++; round = 0; t = 0; wins = 0; reads = 0; best = 0; floor = 0; FORGET_READS; LEAVE }
    :: acq == NACQ -> break
    od
}

/* The write in flight lands on its member at any moment (one at a time: a
   bound of the model, which keeps the state space small). */
active proctype network() {
    bool won;
end:
    do
#ifdef TWOROUNDS
    :: d_step { pend_t != 0 && pend_any -> fastwrite(pend_i, pend_t, won); won = false; pend_t = 0; pend_i = 0; pend_any = 0 }
    :: d_step { pend_t != 0 && !pend_any -> write(pend_i, pend_t, pend_inc, won); won = false; pend_t = 0; pend_i = 0; pend_inc = 0 }
#else
    :: d_step { pend_t != 0 -> write(pend_i, pend_t, pend_inc, won); won = false; pend_t = 0; pend_i = 0; pend_inc = 0 }
#endif
    od
}

#ifdef LOSS
/* A member restarts without its data: its counter is 0 again, under a new
   identity that has not joined. */
#if defined(TWOROUNDS) && !defined(NOSEED)
/* The same, in fewer steps (the member chosen as it restarts; the process's
   variables cleared once it has joined), and only once the group has formed
   (before, init would count the member at once: a loss that is no loss). */
active proctype data_loss() {
    byte i, m;
    atomic {
        joined[0] && joined[1] && joined[2];
        if
        :: i = 0
        :: i = 1
        :: i = 2
        fi;
        c[i] = 0; joined[i] = false; inc[i] = 1; stale = busy;
        printf("MSC: member %d restarts without its data (a new identity)\n", i)
    }
    stale == 0;
    d_step { m = c[(i + 1) % NMEMBERS] }
    d_step { if :: c[(i + 2) % NMEMBERS] > m -> m = c[(i + 2) % NMEMBERS] :: else fi }
    atomic { if :: c[i] < m -> c[i] = m :: else fi; joined[i] = true;
             printf("MSC: member %d seeded with %d, joined\n", i, m); i = 0; m = 0 }
}
#else
active proctype data_loss() {
    byte i, m, j;
    if
    :: i = 0
    :: i = 1
    :: i = 2
    fi;
#ifdef NOSEED
    /* The old behaviour: it counts at once, with its counter at 0. */
    atomic { c[i] = 0; printf("MSC: member %d restarts without its data and counts at once\n", i) }
#else
    atomic { c[i] = 0; joined[i] = false; inc[i] = 1; stale = busy;
             printf("MSC: member %d restarts without its data (a new identity)\n", i) }
    /* Seeded once its identity is older than the ttl: every attempt that began
       before the loss has ended. Then the counters of the other two (the one
       majority without it), read one at a time while clients go on. */
    stale == 0;
    j = (i + 1) % NMEMBERS;
    d_step { if :: c[j] > m -> m = c[j] :: else fi }
    j = (i + 2) % NMEMBERS;
    d_step { if :: c[j] > m -> m = c[j] :: else fi }
    atomic { if :: c[i] < m -> c[i] = m :: else fi; joined[i] = true;
             printf("MSC: member %d seeded with %d, joined\n", i, m) }
#endif
}
#endif
#endif

init {
    byte k;
    atomic {
        joined[0] = true; joined[1] = true; joined[2] = true;  /* a group formed */
        do
        :: k < NCLIENTS -> run client(k); k++
        :: else -> break
        od
    }
}
