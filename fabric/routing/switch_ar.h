/* Switch-local adaptive routing: the choice among a route's equal-cost ports.
 *
 * The C twin of fabric/routing/switch_ar.py's choose_port, included by the
 * simulator (fabric/simulation/ns3/routing.h) and by the emulator's datapath
 * (fabric/emulation/switch_ar.bpf.c), so that both backends decide alike on the
 * same occupancies; tests/unit/test_switch_ar.py holds the three to one vector.
 *
 * A port's key is (paused, queued full-size packets). With keep >= 0 the hashed port
 * is kept while it is not paused and holds at most keep packets. Otherwise the port
 * with the smallest key wins; ties go to the first in port order from `start` (the
 * hashed port's index plus its turn, so that equal ports take turns).
 */
#ifndef FABRIC_SWITCH_AR_H
#define FABRIC_SWITCH_AR_H

#define AR_MAX_PORTS 16

/* the hashed port is kept (keep < 0: never for its own sake) */
static inline int ar_keeps(unsigned long long queued, unsigned char paused, long long keep)
{
    return keep >= 0 && !paused && queued <= (unsigned long long)keep;
}

/* port a is less occupied than port b */
static inline int ar_beats(unsigned long long queued_a, unsigned char paused_a,
                           unsigned long long queued_b, unsigned char paused_b)
{
    return paused_a < paused_b || (paused_a == paused_b && queued_a < queued_b);
}

/* the step-th port after `start`, in port order (0 <= start < n, 0 <= step < n) */
static inline int ar_after(int start, int step, int n)
{
    int i = start + step;
    return i >= n ? i - n : i;
}

/* where the scan starts: the hashed port's index plus its turn, modulo n */
static inline int ar_start(int hashed, unsigned long long turn, int n)
{
    return (int)(((unsigned long long)hashed + turn % (unsigned long long)n) %
                 (unsigned long long)n);
}

/* the index of the port a packet leaves by (the BPF program runs the same steps in a
 * bpf_loop: the verifier cannot follow this loop's choices) */
static inline int ar_choose(int n, int hashed, unsigned long long turn,
                            const unsigned long long *queued, const unsigned char *paused,
                            long long keep)
{
    if (n <= 1 || n > AR_MAX_PORTS || hashed < 0 || hashed >= n)
        return hashed;
    if (ar_keeps(queued[hashed], paused[hashed], keep))
        return hashed;
    int start = ar_start(hashed, turn, n), best = start;
    for (int step = 1; step < n; step++) {
        int i = ar_after(start, step, n);
        if (ar_beats(queued[i], paused[i], queued[best], paused[best]))
            best = i;
    }
    return best;
}

#endif
