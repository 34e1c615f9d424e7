/*
 * The NetDAM packet engine: the interface of the top function and of the
 * tables the host fills (on the card, through its control interface).
 */
#ifndef NETDAM_CORE_H
#define NETDAM_CORE_H

#include "netdam.h"

/* Table sizes: fixed, as on the card. */
#define NETDAM_REGION_SLOTS 64u
#define NETDAM_PEER_SLOTS 64u
#define NETDAM_NEXTHOP_SLOTS 64u
#define NETDAM_GENERATION_SLOTS 64u
#define NETDAM_WINDOW_SOURCES 256u
#define NETDAM_WINDOW_SLOTS 1024u
#define NETDAM_COUNTER_SLOTS 512u

/* What becomes of a frame. */
enum netdam_verdict {
    NETDAM_VERDICT_PASS = 0,     /* to the host, untouched */
    NETDAM_VERDICT_DROP = 1,     /* dropped (and counted) */
    NETDAM_VERDICT_TX = 2,       /* the output frame goes out of the port */
    NETDAM_VERDICT_REDIRECT = 3  /* the output frame goes to the host's receiver (MSG, WRITE_NOTIFY) */
};

/* The node's configuration. */
typedef struct {
    uint8_t mac[6];
    uint32_t ip;        /* IPv4, host order */
    uint16_t port;      /* port P */
    uint32_t mtu;       /* IP MTU: no answer is larger */
    uint64_t mem_size;  /* bytes of NetDAM memory */
    bool verify_csum;   /* verify the IPv4 header checksum and the UDP checksum (zero is dropped) */
    bool receiver;      /* the host has a receiver for MSG and WRITE_NOTIFY */
    uint32_t window_sources; /* at-most-once windows held, at most NETDAM_WINDOW_SOURCES */
    uint32_t window_per_source; /* windows one source IPv4 address may hold (its ports and hops together) */
} netdam_config_t;

/* Counter indices: one per (opcode slot, status), then one per event, as
 * the XDP program counts (netdam-common/src/counters.rs). */
#define NETDAM_STATUS_SLOTS 32u
#define NETDAM_OP_SLOTS 12u
enum netdam_event {
    NETDAM_EV_DROP_TRUNCATED = NETDAM_OP_SLOTS * NETDAM_STATUS_SLOTS,
    NETDAM_EV_DROP_BAD_MAGIC,
    NETDAM_EV_DROP_LEN_PAST_DATAGRAM,
    NETDAM_EV_DROP_FRAGMENT,
    NETDAM_EV_DROP_BAD_SOURCE,
    NETDAM_EV_DROP_NOT_PEER,
    NETDAM_EV_DROP_BAD_CHECKSUM,
    NETDAM_EV_PASS_RESPONSE,
    NETDAM_EV_DROP_TX_FAILED,
    NETDAM_EV_CAS_CONTENDED,
    NETDAM_EV_DROP_IN_FLIGHT,
    NETDAM_EV_WINDOW_FULL,
    NETDAM_EV_DROP_BAD_ORIGIN,
    NETDAM_EV_DROP_PEER_UNRESOLVED, /* a CHAIN forward or answer to a peer with no MAC bound */
    NETDAM_EV_CHAIN_FORWARDED,
    NETDAM_EV_PASS_LOCAL_ANSWER,
    NETDAM_EV_DROP_TOO_LARGE_FOR_UMEM,
    NETDAM_EV_SPLIT,                 /* XDP only (split ports): never counted here */
    NETDAM_EV_PASS_SPLIT_UNSERVED,   /* XDP only (split ports): never counted here */
    NETDAM_EV_DROP_PEER_MAC,         /* a peer's address from another MAC, or from a peer with none bound */
    NETDAM_EV_DROP_OWN_ADDRESS,      /* a datagram whose IPv4 source is the node's own address */
    NETDAM_EV_DROP_CHAIN_NO_PEERS,   /* a CHAIN while the peer table is empty */
    NETDAM_EV_DROP_MEM_COPY_FAILED,  /* XDP only (a helper refused a copy): never counted here */
    NETDAM_EV_BAD_KEY_LIMITED,       /* XDP only (--bad-key-limit): never counted here; the engine answers every BAD_KEY */
    NETDAM_EV_DROP_BAD_KEY_LOCKOUT,  /* XDP only (--bad-key-limit): never counted here */
    NETDAM_EV_PASS_SPLIT_STRANGER,   /* XDP only (header split, section 9): never counted here */
    NETDAM_EV_WINDOW_SOURCE_FULL,    /* a new source whose IPv4 address holds window_per_source windows */
    NETDAM_EV_DROP_WINDOW_RETIRING   /* XDP only (the sweep removing a window): never counted here */
};
_Static_assert(NETDAM_EV_DROP_TRUNCATED == 384u && NETDAM_EV_DROP_PEER_UNRESOLVED == 397u &&
                   NETDAM_EV_DROP_MEM_COPY_FAILED == 406u && NETDAM_EV_BAD_KEY_LIMITED == 407u &&
                   NETDAM_EV_DROP_BAD_KEY_LOCKOUT == 408u && NETDAM_EV_PASS_SPLIT_STRANGER == 409u &&
                   NETDAM_EV_WINDOW_SOURCE_FULL == 410u && NETDAM_EV_DROP_WINDOW_RETIRING == 411u,
               "event indices as in netdam-common/src/counters.rs");
_Static_assert(NETDAM_MISMATCH < NETDAM_STATUS_SLOTS, "every status has a counter per opcode");
_Static_assert(NETDAM_EV_DROP_WINDOW_RETIRING < NETDAM_COUNTER_SLOTS, "every event has a counter");

/* Host side: empties every table and sets the configuration. */
void netdam_reset(const netdam_config_t *cfg);
/* Adds a region, a peer, the MAC bound to a peer (its next-hop entry: its
 * frames must come from that MAC and CHAIN packets to it go there; all zero
 * while unresolved), or sets a region's readiness: its generation and the
 * call word raised with it (version 2), together; netdam_set_generation
 * sets call word 0. 0, or -1 when the table is full or the entry is invalid. */
int netdam_add_region(uint32_t rkey, uint64_t base, uint64_t size, uint32_t perms);
int netdam_add_peer(uint32_t ip);
int netdam_add_nexthop(uint32_t ip, const uint8_t mac[6]);
int netdam_set_generation(uint32_t rkey, uint32_t generation);
int netdam_set_readiness(uint32_t rkey, uint32_t generation, uint32_t call);
uint64_t netdam_counter(uint32_t index);

/* The top function: one frame in, the verdict, and the frame out for TX
 * and REDIRECT. `mem` is NetDAM memory (mem_size bytes). */
enum netdam_verdict netdam_top(const uint8_t in[NETDAM_FRAME_MAX], uint32_t in_len, uint8_t out[NETDAM_FRAME_MAX],
                               uint32_t *out_len, uint8_t *mem);

/* The ALU (section 4), integer-only IEEE 754 binary32 for f32. */
uint32_t netdam_f32_add(uint32_t a, uint32_t b);
uint32_t netdam_combine32(uint8_t dtype, uint8_t alu, uint32_t a, uint32_t b);
uint64_t netdam_combine64(uint8_t dtype, uint8_t alu, uint64_t a, uint64_t b);

#endif
