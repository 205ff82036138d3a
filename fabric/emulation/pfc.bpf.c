// Link-level flow control (PFC) accounting: XDP programs on every port of the fabric.
//
// A lossless lane's packet is charged to the switch that holds it, by the port it
// arrived on (pfc_mmu.h), from the moment it reaches that switch until it reaches the
// next node. Both moments are arrivals, which XDP sees before ovs-vswitchd does:
//
//   pfc_switch  on every switch port (root namespace). The packet's IPv4 ID carries
//               the link it entered the previous switch by (its "tag"): that switch
//               releases it. This switch admits it (or drops it: headroom full), and
//               the tag becomes the link it arrived on here.
//   pfc_host    on every endpoint NIC: the last switch releases it.
//
// A port and lane that crosses its pause or resume threshold is reported on the
// `events` ring buffer; the flow-control daemon (pfc_daemon.py) then closes or opens
// that lane's gate on the upstream sender's egress. Lossy lanes and non-IPv4 frames
// pass untouched; the daemon's kick frames (KICK_ETHERTYPE, sent to wake a resumed
// queue) are dropped on arrival. Generic (skb) XDP: it runs before packet sockets.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/types.h>

#include "pfc_mmu.h"

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

#define MAX_SWITCHES 256
#define MAX_LINKS 2048      // directed links into switches; 0 is "no tag"
#define KICK_ETHERTYPE 0x88B5

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)BPF_FUNC_ktime_get_ns;
static long (*bpf_spin_lock)(struct bpf_spin_lock *lock) = (void *)BPF_FUNC_spin_lock;
static long (*bpf_spin_unlock)(struct bpf_spin_lock *lock) = (void *)BPF_FUNC_spin_unlock;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) =
    (void *)BPF_FUNC_ringbuf_output;

struct port_cfg {
    __u32 link;         // id of the link into this switch through this port
    __u32 from_switch;  // 1: the far end is a switch, so the packet's tag is valid
};

struct link_cfg {
    __u32 sw;    // index of the switch the link leads into
    __u32 port;  // that switch's port index (< PFC_MAX_PORTS)
};

struct switch_mmu {
    struct bpf_spin_lock lock;
    struct pfc_mmu_cfg cfg;
    struct pfc_mmu_counts counts;
};

struct link_stat {     // per link and lane, cumulative
    __u64 max_held;    // bytes
    __u64 drops;       // packets dropped: headroom full
    __u64 drop_bytes;
    __u64 pause_events;
};

// Written by the daemon only: pauses, ns paused, closed since (ns), watchdog trips,
// pause events ignored, reactions, their sum and maximum (ns).
struct gate_stat {
    __u64 value[8];
};

struct event {
    __u32 link;
    __u8 lane;
    __u8 verdict;  // PFC_PAUSE or PFC_RESUME
    __u16 seq;     // the port and lane's verdict count after this one (pfc_mmu.h)
    __u64 ns;      // CLOCK_MONOTONIC
    __u64 held;    // bytes the port and lane held
};

struct settings {
    __u32 lossless;  // bit i: lane i is lossless
    __u32 pad;
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);  // ifindex in the root namespace
    __type(value, struct port_cfg);
} ports SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, MAX_LINKS);
    __type(key, __u32);
    __type(value, struct link_cfg);
} links SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, MAX_SWITCHES);
    __type(key, __u32);
    __type(value, struct switch_mmu);
} mmus SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, MAX_LINKS * PFC_MAX_LANES);
    __type(key, __u32);
    __type(value, struct link_stat);
} stats SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, MAX_LINKS * PFC_MAX_LANES);
    __type(key, __u32);
    __type(value, struct gate_stat);
} gate_stats SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 64);
    __type(key, __u32);  // DSCP
    __type(value, __u32);  // lane
} dscp_lane SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct settings);
} config SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 1 << 18);
} events SEC(".maps");

// The lane of an IPv4 packet of a lossless lane, or -1 (not IPv4, lossy, too short).
static __always_inline int lossless_lane(struct iphdr *ip, void *data_end)
{
    if ((void *)(ip + 1) > data_end)
        return -1;
    __u32 dscp = ip->tos >> 2;
    __u32 *lane = bpf_map_lookup_elem(&dscp_lane, &dscp);
    __u32 zero = 0;
    struct settings *s = bpf_map_lookup_elem(&config, &zero);
    if (!lane || !s || *lane >= PFC_MAX_LANES || !(s->lossless & (1u << *lane)))
        return -1;
    return *lane;
}

static __always_inline void report(__u32 link, __u32 lane, int verdict, __u64 held,
                                   __u16 seq)
{
    struct event ev = {.link = link, .lane = lane, .verdict = verdict, .seq = seq,
                       .ns = bpf_ktime_get_ns(), .held = held};
    bpf_ringbuf_output(&events, &ev, sizeof(ev), 0);
}

// The switch and port a link leads into, with its MMU; NULL when unknown.
static __always_inline struct switch_mmu *mmu_of(__u32 link, __u32 *port)
{
    if (link == 0 || link >= MAX_LINKS)
        return 0;
    struct link_cfg *lc = bpf_map_lookup_elem(&links, &link);
    if (!lc || lc->port >= PFC_MAX_PORTS)
        return 0;
    *port = lc->port;
    __u32 sw = lc->sw;
    return bpf_map_lookup_elem(&mmus, &sw);
}

static __always_inline void release(__u32 link, __u32 lane, __u64 size)
{
    __u32 port;
    struct switch_mmu *m = mmu_of(link, &port);
    if (!m || port >= PFC_MAX_PORTS || lane >= PFC_MAX_LANES)
        return;
    bpf_spin_lock(&m->lock);
    int verdict = pfc_release(&m->cfg, &m->counts, port, lane, size);
    __u64 held = pfc_held(&m->counts, port, lane);
    __u16 seq = m->counts.verdicts[port][lane];
    bpf_spin_unlock(&m->lock);
    if (verdict == PFC_RESUME)
        report(link, lane, verdict, held, seq);
}

// Admit the packet on `link`; 0 when it must be dropped.
static __always_inline int admit(__u32 link, __u32 lane, __u64 size)
{
    __u32 port;
    struct switch_mmu *m = mmu_of(link, &port);
    if (!m || port >= PFC_MAX_PORTS || lane >= PFC_MAX_LANES)
        return 1;
    bpf_spin_lock(&m->lock);
    int verdict = pfc_admit(&m->cfg, &m->counts, port, lane, size);
    __u64 held = pfc_held(&m->counts, port, lane);
    __u16 seq = m->counts.verdicts[port][lane];
    bpf_spin_unlock(&m->lock);
    __u32 key = link * PFC_MAX_LANES + lane;
    struct link_stat *st = bpf_map_lookup_elem(&stats, &key);
    if (st) {
        if (verdict == PFC_DROP) {
            __sync_fetch_and_add(&st->drops, 1);
            __sync_fetch_and_add(&st->drop_bytes, size);
        } else if (held > st->max_held) {
            st->max_held = held;  // racy between CPUs: off by a packet at most
        }
        if (verdict == PFC_PAUSE)
            __sync_fetch_and_add(&st->pause_events, 1);
    }
    if (verdict == PFC_PAUSE)
        report(link, lane, verdict, held, seq);
    return verdict != PFC_DROP;
}

// Write `tag` into the IPv4 ID, keeping the header checksum right (RFC 1624).
static __always_inline void set_tag(struct iphdr *ip, __u16 tag)
{
    __u16 old = ip->id;
    __u16 new = __builtin_bswap16(tag);
    __u32 sum = (__u16)~ip->check + (__u16)~old + new;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    ip->id = new;
    ip->check = ~sum;
}

// Parse to the IPv4 header; -1: not IPv4, -2: a kick frame.
static __always_inline int ip_header(struct xdp_md *ctx, struct iphdr **ip)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > data_end)
        return -1;
    if (eth->h_proto == __builtin_bswap16(KICK_ETHERTYPE))
        return -2;
    if (eth->h_proto != __builtin_bswap16(ETH_P_IP))
        return -1;
    *ip = (void *)(eth + 1);
    return 0;
}

SEC("xdp")
int pfc_switch(struct xdp_md *ctx)
{
    struct iphdr *ip;
    int parsed = ip_header(ctx, &ip);
    if (parsed == -2)
        return XDP_DROP;
    if (parsed < 0)
        return XDP_PASS;
    void *data_end = (void *)(long)ctx->data_end;
    int lane = lossless_lane(ip, data_end);
    if (lane < 0)
        return XDP_PASS;
    __u32 ifindex = ctx->ingress_ifindex;
    struct port_cfg *pc = bpf_map_lookup_elem(&ports, &ifindex);
    if (!pc)
        return XDP_PASS;
    __u64 size = (__u64)(data_end - (void *)(long)ctx->data);
    if (pc->from_switch)
        release(__builtin_bswap16(ip->id), lane, size);
    if (!admit(pc->link, lane, size))
        return XDP_DROP;
    set_tag(ip, pc->link);
    return XDP_PASS;
}

SEC("xdp")
int pfc_host(struct xdp_md *ctx)
{
    struct iphdr *ip;
    int parsed = ip_header(ctx, &ip);
    if (parsed == -2)
        return XDP_DROP;
    if (parsed < 0)
        return XDP_PASS;
    void *data_end = (void *)(long)ctx->data_end;
    int lane = lossless_lane(ip, data_end);
    if (lane >= 0)
        release(__builtin_bswap16(ip->id), lane,
                (__u64)(data_end - (void *)(long)ctx->data));
    return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
