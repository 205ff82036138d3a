// ECN marking for one shaped egress queue (cls_bpf filter on its HTB root).
//
// This kernel has no marking qdisc (no red, codel, fq_codel), so the mark is
// decided by a virtual copy of the queue: a fluid queue drained at the link
// rate, fed with every packet the HTB is about to enqueue. While the HTB is
// backlogged it drains at that same rate, so the two backlogs agree; the
// virtual one never holds more than the real buffer (head-drop keeps the real
// one full, not longer). A packet that finds more than KMIN_NS of backlog is
// marked CE with a probability rising linearly to PMAX at KMAX_NS, and always
// beyond (RED's ramp, as DCQCN's switches use it). Only ECN-capable (ECT)
// IPv4 packets are marked; the filter never classifies (returns 0: the next
// filters pick the lane).
//
// Compile-time parameters (clang -D), all integers:
//   NS_PER_KBYTE  nanoseconds the link takes for 1000 bytes (rate)
//   KMIN_NS, KMAX_NS, CAP_NS  thresholds and buffer, as backlog in nanoseconds
//   PMAX_U32      marking probability at KMAX_NS, scaled to 2^32 - 1

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/types.h>

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)BPF_FUNC_ktime_get_ns;
static __u32 (*bpf_get_prandom_u32)(void) = (void *)BPF_FUNC_get_prandom_u32;
static long (*bpf_skb_store_bytes)(struct __sk_buff *skb, __u32 offset, const void *from,
                                   __u32 len, __u64 flags) = (void *)BPF_FUNC_skb_store_bytes;
static long (*bpf_l3_csum_replace)(struct __sk_buff *skb, __u32 offset, __u64 from, __u64 to,
                                   __u64 size) = (void *)BPF_FUNC_l3_csum_replace;
static long (*bpf_skb_load_bytes)(const struct __sk_buff *skb, __u32 offset, void *to,
                                  __u32 len) = (void *)BPF_FUNC_skb_load_bytes;

struct queue {
    __u64 empty_at;  // ns: when the virtual queue drains, if nothing more comes
    __u64 ect;       // ECN-capable packets seen
    __u64 marked;    // of them, marked CE
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct queue);
} queue_state SEC(".maps");

SEC("classifier")
int mark(struct __sk_buff *skb)
{
    __u32 key = 0;
    struct queue *q = bpf_map_lookup_elem(&queue_state, &key);
    if (!q)
        return 0;
    __u64 now = bpf_ktime_get_ns();
    __u64 start = q->empty_at > now ? q->empty_at : now;
    __u64 backlog = start - now;
    // a full real queue drops at its head and stays full: so does this one
    if (backlog < CAP_NS)
        start += (__u64)skb->len * NS_PER_KBYTE / 1000;
    // two CPUs may race here; one packet's worth of backlog is the worst error
    q->empty_at = start;

    // read through the helper, not the linear data: a jumbo frame that ovs-vswitchd
    // sent holds only its Ethernet header there (the rest in pages)
    __u16 proto;
    union {
        __u16 word;  // the 16-bit word of the header the checksum covers
        __u8 byte[2];  // version/IHL, TOS
    } first;
    if (bpf_skb_load_bytes(skb, 12, &proto, sizeof(proto)) ||
        proto != __constant_htons(ETH_P_IP) ||
        bpf_skb_load_bytes(skb, sizeof(struct ethhdr), &first, sizeof(first)))
        return 0;
    __u8 tos = first.byte[1];
    if (!(tos & 3) || (tos & 3) == 3)
        return 0;  // not ECN-capable, or already marked upstream
    __sync_fetch_and_add(&q->ect, 1);
    if (backlog < KMIN_NS)
        return 0;
    if (backlog < KMAX_NS) {
        __u64 p = (__u64)PMAX_U32 * (backlog - KMIN_NS) / (KMAX_NS - KMIN_NS);
        if (bpf_get_prandom_u32() >= p)
            return 0;
    }
    __u16 old_word = first.word;
    first.byte[1] = tos | 3;
    __u32 tos_off = sizeof(struct ethhdr) + __builtin_offsetof(struct iphdr, tos);
    if (bpf_skb_store_bytes(skb, tos_off, &first.byte[1], 1, 0))
        return 0;
    bpf_l3_csum_replace(skb, sizeof(struct ethhdr) + __builtin_offsetof(struct iphdr, check),
                        old_word, first.word, 2);
    __sync_fetch_and_add(&q->marked, 1);
    return 0;
}

char _license[] SEC("license") = "GPL";
