// A lossless switch's buffer accounting, per ingress port and lane (priority), after
// the shared-buffer MMU of the ns-3 RDMA simulators (HPCC, ConWeave): every byte a
// switch holds is charged to the port it arrived on. The first RESERVE bytes of a
// port and lane are its own; beyond them it shares the switch's buffer, and a port
// and lane that holds more than a dynamic threshold (a 2^-alpha_shift share of the
// free shared buffer) asks its upstream to pause. What arrives while paused goes to
// the port's headroom, sized to hold what is in flight while the pause takes effect;
// a packet that finds the headroom full is dropped (a lossless lane must never see
// one). The lane resumes when its headroom is empty and its shared use is back below
// the threshold by resume_offset.
//
// Plain C with no kernel or libc dependency: the XDP program (pfc.bpf.c) includes it,
// and the unit tests compile it for the host to check the accounting without root.

#ifndef FABRIC_PFC_MMU_H
#define FABRIC_PFC_MMU_H

#define PFC_MAX_PORTS 32
#define PFC_MAX_LANES 8

typedef unsigned long long pfc_u64;
typedef unsigned int pfc_u32;

// Constant per switch (bytes), set when the fabric comes up.
struct pfc_mmu_cfg {
    pfc_u64 shared_total;   // buffer minus every port's headroom and reserve
    pfc_u64 reserve;        // per ingress port and lane
    pfc_u64 headroom;       // per ingress port and lane
    pfc_u64 resume_offset;
    pfc_u32 alpha_shift;    // threshold = free shared buffer >> alpha_shift
    pfc_u32 pad;
};

// What one switch holds, by ingress port and lane.
struct pfc_mmu_counts {
    pfc_u64 shared_used;                           // of the shared buffer, all ports
    pfc_u64 ingress[PFC_MAX_PORTS][PFC_MAX_LANES]; // reserve + shared part
    pfc_u64 hdrm[PFC_MAX_PORTS][PFC_MAX_LANES];    // headroom part
    unsigned char paused[PFC_MAX_PORTS][PFC_MAX_LANES];
    // pause and resume verdicts so far (wrapping): their order, for whoever applies
    // them after the lock is gone (events from two CPUs can arrive swapped)
    unsigned short verdicts[PFC_MAX_PORTS][PFC_MAX_LANES];
};

enum pfc_verdict { PFC_NONE = 0, PFC_PAUSE = 1, PFC_RESUME = 2, PFC_DROP = 3 };

static inline pfc_u64 pfc_min(pfc_u64 a, pfc_u64 b) { return a < b ? a : b; }

static inline pfc_u64 pfc_threshold(const struct pfc_mmu_cfg *cfg,
                                    const struct pfc_mmu_counts *m)
{
    pfc_u64 used = m->shared_used < cfg->shared_total ? m->shared_used : cfg->shared_total;
    return (cfg->shared_total - used) >> (cfg->alpha_shift & 31);
}

static inline pfc_u64 pfc_shared_of(const struct pfc_mmu_cfg *cfg, pfc_u64 ingress)
{
    return ingress > cfg->reserve ? ingress - cfg->reserve : 0;
}

// A packet of `size` bytes arrives on (port, lane): account it. Returns PFC_DROP when
// the headroom is full (nothing is charged), PFC_PAUSE when the port and lane must
// now be paused, PFC_NONE otherwise. `p` < PFC_MAX_PORTS and `q` < PFC_MAX_LANES.
static inline int pfc_admit(const struct pfc_mmu_cfg *cfg, struct pfc_mmu_counts *m,
                            pfc_u32 p, pfc_u32 q, pfc_u64 size)
{
    pfc_u64 thresh = pfc_threshold(cfg, m);
    if (size + m->hdrm[p][q] > cfg->headroom &&
        size + pfc_shared_of(cfg, m->ingress[p][q]) > thresh)
        return PFC_DROP;
    pfc_u64 grown = m->ingress[p][q] + size;
    if (grown <= cfg->reserve) {
        m->ingress[p][q] = grown;
    } else if (grown - cfg->reserve > thresh) {
        m->hdrm[p][q] += size;
    } else {
        m->ingress[p][q] = grown;
        m->shared_used += pfc_min(size, grown - cfg->reserve);
    }
    if (!m->paused[p][q] &&
        (m->hdrm[p][q] > 0 || pfc_shared_of(cfg, m->ingress[p][q]) >= pfc_threshold(cfg, m))) {
        m->paused[p][q] = 1;
        m->verdicts[p][q]++;
        return PFC_PAUSE;
    }
    return PFC_NONE;
}

// A packet of `size` bytes that arrived on (port, lane) has left the switch. Returns
// PFC_RESUME when the port and lane may now resume, PFC_NONE otherwise.
static inline int pfc_release(const struct pfc_mmu_cfg *cfg, struct pfc_mmu_counts *m,
                              pfc_u32 p, pfc_u32 q, pfc_u64 size)
{
    pfc_u64 from_hdrm = pfc_min(m->hdrm[p][q], size);
    pfc_u64 rest = pfc_min(size - from_hdrm, m->ingress[p][q]);
    pfc_u64 from_shared = pfc_min(rest, pfc_shared_of(cfg, m->ingress[p][q]));
    m->hdrm[p][q] -= from_hdrm;
    m->ingress[p][q] -= rest;
    m->shared_used -= pfc_min(from_shared, m->shared_used);
    if (!m->paused[p][q] || m->hdrm[p][q] > 0)
        return PFC_NONE;
    pfc_u64 shared = pfc_shared_of(cfg, m->ingress[p][q]);
    if (shared == 0 || shared + cfg->resume_offset <= pfc_threshold(cfg, m)) {
        m->paused[p][q] = 0;
        m->verdicts[p][q]++;
        return PFC_RESUME;
    }
    return PFC_NONE;
}

// What (port, lane) holds, in bytes.
static inline pfc_u64 pfc_held(const struct pfc_mmu_counts *m, pfc_u32 p, pfc_u32 q)
{
    return m->ingress[p][q] + m->hdrm[p][q];
}

#endif
