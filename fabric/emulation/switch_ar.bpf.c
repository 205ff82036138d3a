// Switch-local adaptive routing: a tc (clsact) egress program on every switch port
// that leads to another switch.
//
// Open vSwitch has already chosen the packet's port by hashing (its select group);
// this program may send it out of a sibling port of the same route instead, when
// that one is less occupied (fabric/routing/switch_ar.h decides, as the simulator
// does). Occupancy is each port's fluid virtual queue, kept here: every packet that
// leaves by a port adds its bytes, drained at the port's link rate, and a full
// queue stays full (the real head-drop queue does). A redirected packet carries
// AR_MARK through the sibling's own program, which counts it and lets it pass on
// to that port's qdisc (its HTB and lanes).
//
// One object is loaded for the whole fabric and attached to every such port, so
// its maps are shared: `ports` (by ifindex: the switch, the link rate, the virtual
// queue, counters), `routes` (by switch and destination address: the route's
// ports), `flowlets` (the port each flow last took) and `settings`. Under flow
// control, `gate_stats` and `dscp_lane` are the flow-control accounting's own maps
// (pfc.bpf.c; shared by fd): a port whose gate for the packet's lane is closed is
// paused, and loses to any port that is not.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/types.h>

#include "pfc_mmu.h"
#include "switch_ar.h"

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

#define AR_MARK 0xfab1c0deU
#define MAX_PORTS 4096
#define MAX_ROUTES 65536
#define MAX_FLOWS 65536

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value,
                                   __u64 flags) = (void *)BPF_FUNC_map_update_elem;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)BPF_FUNC_ktime_get_ns;
static long (*bpf_redirect)(__u32 ifindex, __u64 flags) = (void *)BPF_FUNC_redirect;
static long (*bpf_skb_load_bytes)(const struct __sk_buff *skb, __u32 offset, void *to,
                                  __u32 len) = (void *)BPF_FUNC_skb_load_bytes;
static long (*bpf_loop)(__u32 nr_loops, void *callback_fn, void *callback_ctx,
                        __u64 flags) = (void *)BPF_FUNC_loop;

#define PFC_MAX_LINKS 2048  // pfc.bpf.c's MAX_LINKS: the size of its maps by link
#define GATE_CLOSED_SINCE 2  // the gate statistic that is nonzero while the gate is shut

struct port {
    __u32 sw;            // the switch's index
    __u32 link;          // the flow-control link id of the link it sends on (0: none)
    __u64 ns_per_kbyte;  // the link's rate: ns for 1000 bytes
    __u64 cap_ns;        // its buffer, as backlog in ns
    __u64 empty_at;      // ns: when the virtual queue drains, if nothing more comes
    __u64 kept;          // packets routed here that left here
    __u64 moved_out;     // packets routed here that left by a sibling
    __u64 moved_in;      // packets of a sibling's that left here
    __u64 turns;         // decisions made here as the hashed port (equal ports take turns)
};

struct route_key {
    __u32 sw;
    __u32 dst;  // IPv4 destination, network order
};

struct route {
    __u32 n;
    __u32 ifindex[AR_MAX_PORTS];
};

struct flow_key {
    __u32 sw, src, dst;
    __u16 sport, dport;
    __u32 proto;
};

struct packet {
    struct flow_key flow;
    __u32 dscp;
};

struct flowlet {
    __u64 last_ns;
    __u32 ifindex;
    __u32 pad;
};

struct gate_stat {  // pfc.bpf.c's
    __u64 value[8];
};

struct settings {
    __s64 keep;            // the hashed port is kept while it holds at most this many
                           // packets (-1: never for its own sake)
    __u64 frame_bytes;     // a full-size frame: the unit queues are compared in
    __u64 flowlet_gap_ns;  // 0: every packet is decided
    __u64 flow_control;    // nonzero: gate_stats and dscp_lane are flow control's
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, MAX_PORTS);
    __type(key, __u32);
    __type(value, struct port);
} ports SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, MAX_ROUTES);
    __type(key, struct route_key);
    __type(value, struct route);
} routes SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, MAX_FLOWS);
    __type(key, struct flow_key);
    __type(value, struct flowlet);
} flowlets SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct settings);
} settings SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, PFC_MAX_LINKS * PFC_MAX_LANES);
    __type(key, __u32);
    __type(value, struct gate_stat);
} gate_stats SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 64);
    __type(key, __u32);    // DSCP
    __type(value, __u32);  // lane
} dscp_lane SEC(".maps");

static __always_inline __u64 queued_bytes(const struct port *p, __u64 now)
{
    return p->empty_at > now ? (p->empty_at - now) * 1000 / p->ns_per_kbyte : 0;
}

// the packet leaves by port p: its bytes join p's virtual queue
static __always_inline void account(struct port *p, __u32 len, __u64 now)
{
    __u64 start = p->empty_at > now ? p->empty_at : now;
    if (start - now < p->cap_ns)  // a full real queue drops at its head and stays full
        start += (__u64)len * p->ns_per_kbyte / 1000;
    p->empty_at = start;  // two CPUs may race here; one packet is the worst error
}

// the flow and DSCP of an IPv4 packet (ports 0 for what is neither UDP nor TCP); -1:
// not IPv4
static __always_inline int parse(struct __sk_buff *skb, struct packet *pkt)
{
    struct flow_key *key = &pkt->flow;
    __u16 proto;
    struct iphdr ip;
    // through the helper: a frame ovs-vswitchd sent holds only its Ethernet header linear
    if (bpf_skb_load_bytes(skb, 12, &proto, sizeof(proto)) ||
        proto != __constant_htons(ETH_P_IP) ||
        bpf_skb_load_bytes(skb, sizeof(struct ethhdr), &ip, sizeof(ip)))
        return -1;
    pkt->dscp = ip.tos >> 2;
    key->src = ip.saddr;
    key->dst = ip.daddr;
    key->proto = ip.protocol;
    key->sport = key->dport = 0;
    __u16 l4[2];
    if ((ip.protocol == IPPROTO_UDP || ip.protocol == IPPROTO_TCP) &&
        !bpf_skb_load_bytes(skb, sizeof(struct ethhdr) + ip.ihl * 4, l4, sizeof(l4))) {
        key->sport = l4[0];
        key->dport = l4[1];
    }
    return 0;
}

// The decision's state. Both loops run in bpf_loop, whose callback is verified once
// whatever the number of ports: the verifier cannot follow a plain loop's choices.
struct choice {
    unsigned long long queued[AR_MAX_PORTS];
    unsigned char paused[AR_MAX_PORTS];
    struct route *route;
    __u64 now, frame_bytes;
    __u32 lane;           // the packet's lane (under flow control)
    int flow_control;
    __u32 here;           // the hashed port (the one this program runs on)
    __u32 flowlet;        // the flow's last port, if its flowlet goes on (else 0)
    int n, hashed, start, best;
    int flowlet_listed;   // the flowlet's port is still one of the route's
    int missing;          // a port of the route this program does not know
};

// reads the i-th port of the route: its occupancy, whether it is the hashed one
static long read_port(__u32 index, struct choice *c)
{
    int i = index & (AR_MAX_PORTS - 1);
    __u32 ifindex = c->route->ifindex[i];
    struct port *q = bpf_map_lookup_elem(&ports, &ifindex);
    if (!q) {
        c->missing = 1;
        return 1;  // stop
    }
    c->queued[i] = queued_bytes(q, c->now) / c->frame_bytes;
    c->paused[i] = 0;
    if (c->flow_control && q->link) {
        __u32 key = q->link * PFC_MAX_LANES + c->lane;
        struct gate_stat *gate = bpf_map_lookup_elem(&gate_stats, &key);
        c->paused[i] = gate && gate->value[GATE_CLOSED_SINCE] != 0;
    }
    if (ifindex == c->here)
        c->hashed = i;
    if (ifindex == c->flowlet)
        c->flowlet_listed = 1;
    return 0;
}

// ar_choose's loop body: does the port `index + 1` places after the start beat the
// best so far?
static long choice_step(__u32 index, struct choice *c)
{
    int i = ar_after(c->start, (int)index + 1, c->n) & (AR_MAX_PORTS - 1);
    int best = c->best & (AR_MAX_PORTS - 1);
    if (ar_beats(c->queued[i], c->paused[i], c->queued[best], c->paused[best]))
        c->best = i;
    return 0;
}

SEC("classifier")
int route(struct __sk_buff *skb)
{
    __u32 here = skb->ifindex;
    struct port *p = bpf_map_lookup_elem(&ports, &here);
    if (!p)
        return TC_ACT_OK;
    __u64 now = bpf_ktime_get_ns();
    if (skb->mark == AR_MARK) {  // a sibling sent it here
        skb->mark = 0;
        __sync_fetch_and_add(&p->moved_in, 1);
        account(p, skb->len, now);
        return TC_ACT_OK;
    }
    struct packet pkt = {.flow = {.sw = p->sw}};
    struct route_key rk = {.sw = p->sw};
    struct route *r = 0;
    if (parse(skb, &pkt) == 0) {
        rk.dst = pkt.flow.dst;
        r = bpf_map_lookup_elem(&routes, &rk);
    }
    __u32 zero = 0;
    struct settings *set = bpf_map_lookup_elem(&settings, &zero);
    if (!set || !set->frame_bytes || !r || r->n <= 1 || r->n > AR_MAX_PORTS) {
        account(p, skb->len, now);
        return TC_ACT_OK;
    }
    struct choice c = {.route = r, .now = now, .frame_bytes = set->frame_bytes, .here = here,
                       .n = r->n, .hashed = -1, .flow_control = set->flow_control != 0};
    if (c.flow_control) {
        __u32 *lane = bpf_map_lookup_elem(&dscp_lane, &pkt.dscp);
        c.lane = lane ? *lane & (PFC_MAX_LANES - 1) : 0;
    }
    if (set->flowlet_gap_ns) {
        struct flowlet *fl = bpf_map_lookup_elem(&flowlets, &pkt.flow);
        if (fl && now - fl->last_ns < set->flowlet_gap_ns)
            c.flowlet = fl->ifindex;
    }
    bpf_loop(c.n, read_port, &c, 0);
    if (c.missing || c.hashed < 0) {  // the routes changed under it: leave the packet be
        account(p, skb->len, now);
        return TC_ACT_OK;
    }
    __u32 target = c.flowlet;
    if (!c.flowlet_listed) {  // ar_choose
        int hashed = c.hashed & (AR_MAX_PORTS - 1);
        c.best = hashed;
        if (!ar_keeps(c.queued[hashed], c.paused[hashed], set->keep)) {
            c.start = c.best = ar_start(hashed, __sync_fetch_and_add(&p->turns, 1), c.n);
            bpf_loop(c.n - 1, choice_step, &c, 0);
        }
        target = r->ifindex[c.best & (AR_MAX_PORTS - 1)];
    }
    if (set->flowlet_gap_ns) {
        struct flowlet last = {.last_ns = now, .ifindex = target};
        bpf_map_update_elem(&flowlets, &pkt.flow, &last, BPF_ANY);
    }
    if (target == here) {
        __sync_fetch_and_add(&p->kept, 1);
        account(p, skb->len, now);
        return TC_ACT_OK;
    }
    __sync_fetch_and_add(&p->moved_out, 1);
    skb->mark = AR_MARK;
    return bpf_redirect(target, 0);
}

char _license[] SEC("license") = "GPL";
