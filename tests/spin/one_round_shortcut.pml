/*
 * The one-round shortcut that majority mode does NOT use, for spin: each
 * member draws its own token (its counter + 1, committed with its grant) and
 * the client takes the largest of a majority. scripts/model-check.sh expects
 * spin to find a violation here; docs/majority.md shows the trail.
 *
 * N = 3 members A, B, C (0, 1, 2). Their counters start apart, as per-member
 * counters do (each starts at its own database's clock in microseconds, and
 * each member sees the acquisitions that reached it, not the others'): A 10,
 * B 50, C 5. Each member's grant may be lost (that member is busy, down or too
 * slow); a majority of grants is a hand-out. Same checks as majority_token.pml:
 *   (a) uniqueness:   no two hand-outs carry the same token;
 *   (b) monotonicity: a hand-out whose attempt started after another hand-out
 *       completed carries a larger token.
 * Violated by {A:11, B:51} -> 51, then {A:12, C:6} -> 12.
 */

#ifndef NCLIENTS
#define NCLIENTS 2
#endif
#ifndef NACQ
#define NACQ 2
#endif
#define NMEMBERS 3
#define QUORUM 2
#define MAXTOKEN 64

byte c[NMEMBERS];      /* per member: its own token counter */
bool used[MAXTOKEN];   /* tokens handed out */
byte handed_max;       /* the largest token handed out so far */

/* Member i grants and draws its token (one atomic statement), or the answer is lost. */
#define GRANT(i) \
    if \
    :: skip               /* busy, down, or too slow */ \
    :: d_step { c[i]++; grants++; got[i] = c[i]; if :: c[i] > best -> best = c[i] :: c[i] <= best fi } \
    :: d_step { c[i]++ }  /* granted, answer lost */ \
    fi

proctype client(byte id) {
    byte acq, floor, best, grants;
    byte got[NMEMBERS];  /* the tokens answered, 0: none */

    do
    :: acq < NACQ ->
        floor = handed_max;  /* hand-outs completed before this attempt began */
        GRANT(0); GRANT(1); GRANT(2);
        if
        :: grants >= QUORUM ->
            atomic {
                printf("MSC: client %d hands out token %d from {A:%d, B:%d, C:%d} (0: no answer), after %d\n",
                       id, best, got[0], got[1], got[2], floor);
                assert(best < MAXTOKEN);
                assert(!used[best]);    /* (a) uniqueness */
                assert(best > floor);   /* (b) monotonicity */
                used[best] = true;
                if :: best > handed_max -> handed_max = best :: best <= handed_max fi
            }
        :: grants < QUORUM
        fi;
        atomic { acq++; best = 0; grants = 0; floor = 0; got[0] = 0; got[1] = 0; got[2] = 0 }
    :: acq == NACQ -> break
    od
}

init {
    byte k;
    atomic {
        c[0] = 10; c[1] = 50; c[2] = 5;
        do
        :: k < NCLIENTS -> run client(k); k++
        :: else -> break
        od
    }
}
