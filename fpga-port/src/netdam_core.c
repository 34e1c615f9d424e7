/*
 * The NetDAM packet engine (PROTOCOL.md), ported from the reference model
 * (netdam-common/src/model.rs) that the XDP program is held to.
 *
 * HLS discipline: state in static arrays of fixed size; loops with constant
 * trip counts (they stop early with `break`), per-byte and per-element loops
 * pipelined; no allocation, recursion, function pointers or variable-length
 * arrays; nothing from libc but <stdint.h> and <stdbool.h>.
 */
#include "netdam_core.h"

/* ---- State ------------------------------------------------------------------ */

typedef struct {
    bool used;
    uint32_t rkey;
    uint64_t base;
    uint64_t size;
    uint32_t perms;
} region_t;

typedef struct {
    bool used;
    uint32_t ip;
    uint8_t mac[6];
} nexthop_t;

typedef struct {
    bool used;
    uint32_t key;
    uint32_t value;
} keyed_t;

/* A region's readiness (section 6): its generation and the call word raised
 * with it (version 2; 0 when raised without one). */
typedef struct {
    uint32_t generation;
    uint32_t call;
} readiness_t;

typedef struct {
    bool used;
    uint32_t rkey;
    readiness_t now;
} generation_t;

/* A window slot: seq << 32 | state, and the old value of an atomic. */
typedef struct {
    uint64_t tag;
    uint64_t old;
} slot_t;

/* Windows are keyed by (source IP, source port, hop): hop 0 for requests,
 * idx + 1 for CHAIN hops (keyed by the origin). */
typedef struct {
    bool used;
    uint32_t ip;
    uint16_t port;
    uint16_t hop;
    slot_t slots[NETDAM_WINDOW_SLOTS];
} window_t;

#define SLOT_EMPTY 0u
#define SLOT_DONE 2u
#define SLOT_STATE_MASK 3u

static netdam_config_t cfg;
static region_t regions[NETDAM_REGION_SLOTS];
static keyed_t peers[NETDAM_PEER_SLOTS];
static nexthop_t nexthops[NETDAM_NEXTHOP_SLOTS];
static generation_t generations[NETDAM_GENERATION_SLOTS];
static window_t windows[NETDAM_WINDOW_SOURCES];
static uint64_t counters[NETDAM_COUNTER_SLOTS];
static uint32_t peer_count;
static uint32_t window_count;

/* ---- Host side ----------------------------------------------------------------- */

void netdam_reset(const netdam_config_t *c)
{
    uint32_t i, j;
    cfg = *c;
    if (cfg.window_sources > NETDAM_WINDOW_SOURCES) {
        cfg.window_sources = NETDAM_WINDOW_SOURCES;
    }
    for (i = 0; i < NETDAM_REGION_SLOTS; i++) {
        regions[i].used = false;
    }
    for (i = 0; i < NETDAM_PEER_SLOTS; i++) {
        peers[i].used = false;
    }
    for (i = 0; i < NETDAM_NEXTHOP_SLOTS; i++) {
        nexthops[i].used = false;
    }
    for (i = 0; i < NETDAM_GENERATION_SLOTS; i++) {
        generations[i].used = false;
    }
    for (i = 0; i < NETDAM_WINDOW_SOURCES; i++) {
        windows[i].used = false;
        for (j = 0; j < NETDAM_WINDOW_SLOTS; j++) {
            windows[i].slots[j].tag = 0;
            windows[i].slots[j].old = 0;
        }
    }
    for (i = 0; i < NETDAM_COUNTER_SLOTS; i++) {
        counters[i] = 0;
    }
    peer_count = 0;
    window_count = 0;
}

int netdam_add_region(uint32_t rkey, uint64_t base, uint64_t size, uint32_t perms)
{
    uint32_t i;
    if (base > cfg.mem_size || size > cfg.mem_size - base) {
        return -1;
    }
    for (i = 0; i < NETDAM_REGION_SLOTS; i++) {
        if (!regions[i].used) {
            regions[i].used = true;
            regions[i].rkey = rkey;
            regions[i].base = base;
            regions[i].size = size;
            regions[i].perms = perms;
            return 0;
        }
    }
    return -1;
}

static int put_keyed(keyed_t *table, uint32_t n, uint32_t key, uint32_t value)
{
    uint32_t i;
    for (i = 0; i < n; i++) {
        if (table[i].used && table[i].key == key) {
            table[i].value = value;
            return 0;
        }
    }
    for (i = 0; i < n; i++) {
        if (!table[i].used) {
            table[i].used = true;
            table[i].key = key;
            table[i].value = value;
            return 0;
        }
    }
    return -1;
}

int netdam_add_peer(uint32_t ip)
{
    int r = put_keyed(peers, NETDAM_PEER_SLOTS, ip, 1u);
    if (r == 0) {
        uint32_t i, n = 0;
        for (i = 0; i < NETDAM_PEER_SLOTS; i++) {
            n += peers[i].used ? 1u : 0u;
        }
        peer_count = n;
    }
    return r;
}

int netdam_add_nexthop(uint32_t ip, const uint8_t mac[6])
{
    uint32_t i, k;
    for (i = 0; i < NETDAM_NEXTHOP_SLOTS; i++) {
        if (!nexthops[i].used || nexthops[i].ip == ip) {
            nexthops[i].used = true;
            nexthops[i].ip = ip;
            for (k = 0; k < 6u; k++) {
                nexthops[i].mac[k] = mac[k];
            }
            return 0;
        }
    }
    return -1;
}

/* The generation and the call word in one entry, set together (the data
 * path never sees one without the other). */
int netdam_set_readiness(uint32_t rkey, uint32_t generation, uint32_t call)
{
    uint32_t i;
    for (i = 0; i < NETDAM_GENERATION_SLOTS; i++) {
        if (generations[i].used && generations[i].rkey == rkey) {
            generations[i].now.generation = generation;
            generations[i].now.call = call;
            return 0;
        }
    }
    for (i = 0; i < NETDAM_GENERATION_SLOTS; i++) {
        if (!generations[i].used) {
            generations[i].used = true;
            generations[i].rkey = rkey;
            generations[i].now.generation = generation;
            generations[i].now.call = call;
            return 0;
        }
    }
    return -1;
}

int netdam_set_generation(uint32_t rkey, uint32_t generation) { return netdam_set_readiness(rkey, generation, 0u); }

uint64_t netdam_counter(uint32_t index) { return index < NETDAM_COUNTER_SLOTS ? counters[index] : 0u; }

/* ---- Lookups ------------------------------------------------------------------- */

static void count(uint32_t index)
{
    if (index < NETDAM_COUNTER_SLOTS) {
        counters[index] += 1u;
    }
}

/* The counter of requests with `opcode` that ended with `status`. */
static uint32_t op_status(uint8_t opcode, uint8_t status)
{
    uint32_t slot = opcode <= 0x09u ? opcode : (opcode == NETDAM_OP_CHAIN ? 10u : 11u);
    return slot * NETDAM_STATUS_SLOTS + status;
}

static const region_t *find_region(uint32_t rkey)
{
    uint32_t i;
    for (i = 0; i < NETDAM_REGION_SLOTS; i++) {
        if (regions[i].used && regions[i].rkey == rkey) {
            return &regions[i];
        }
    }
    return 0;
}

/* Whether `ip` is in the peer table (an empty table holds no one). */
static bool in_peer_table(uint32_t ip)
{
    uint32_t i;
    for (i = 0; i < NETDAM_PEER_SLOTS; i++) {
        if (peers[i].used && peers[i].key == ip) {
            return true;
        }
    }
    return false;
}

/* Whether a request from `ip` is served: an empty peer table means any
 * source (section 1). */
static bool is_peer(uint32_t ip) { return peer_count == 0u || in_peer_table(ip); }

/* The MAC bound to `ip` (its next-hop entry), or 0 when there is none. */
static const nexthop_t *find_nexthop(uint32_t ip)
{
    uint32_t i;
    for (i = 0; i < NETDAM_NEXTHOP_SLOTS; i++) {
        if (nexthops[i].used && nexthops[i].ip == ip) {
            return &nexthops[i];
        }
    }
    return 0;
}

/* Whether a frame from Ethernet source `eth_src` may claim to be peer `ip`:
 * a MAC is bound to it (not all zero) and it is that MAC (section 1). */
static bool sent_by_peer(uint32_t ip, const uint8_t *eth_src)
{
    const nexthop_t *nh = find_nexthop(ip);
    uint32_t k;
    bool zero = true, same = true;
    if (nh == 0) {
        return false;
    }
    for (k = 0; k < 6u; k++) {
        zero = zero && nh->mac[k] == 0u;
        same = same && nh->mac[k] == eth_src[k];
    }
    return !zero && same;
}

/* The readiness of region `rkey` (absent: generation 0, call 0). */
static readiness_t readiness_of(uint32_t rkey)
{
    readiness_t none = {0u, 0u};
    uint32_t i;
    for (i = 0; i < NETDAM_GENERATION_SLOTS; i++) {
        if (generations[i].used && generations[i].rkey == rkey) {
            return generations[i].now;
        }
    }
    return none;
}

static bool region_contains(const region_t *r, uint64_t a, uint64_t n)
{
    return a >= r->base && n <= r->size && a - r->base <= r->size - n;
}

/* Sources never answered: 0/8, 127/8, multicast, limited broadcast. */
static bool unanswerable(uint32_t ip)
{
    uint32_t first = ip >> 24;
    return first == 0u || first == 127u || (first & 0xF0u) == 0xE0u || ip == 0xFFFFFFFFu;
}

/* ---- The at-most-once window (section 7) ---------------------------------------- */

static bool serial_lt(uint32_t a, uint32_t b) { return a != b && (int32_t)(b - a) > 0; }

enum claim { CLAIM_EXECUTE, CLAIM_REPEAT, CLAIM_STALE, CLAIM_FULL };

/* window_of's answers other than an index. */
#define WINDOW_TABLE_FULL (-1)
#define WINDOW_SOURCE_FULL (-2)

/* Finds or makes the window of a source; its index, WINDOW_SOURCE_FULL when
 * the source's IPv4 address holds window_per_source windows already (checked
 * first), or WINDOW_TABLE_FULL when the table is full. */
static int32_t window_of(uint32_t ip, uint16_t port, uint16_t hop)
{
    uint32_t i, j, held = 0;
    for (i = 0; i < NETDAM_WINDOW_SOURCES; i++) {
        if (windows[i].used && windows[i].ip == ip) {
            if (windows[i].port == port && windows[i].hop == hop) {
                return (int32_t)i;
            }
            held++;
        }
    }
    if (held >= cfg.window_per_source) {
        return WINDOW_SOURCE_FULL;
    }
    if (window_count >= cfg.window_sources) {
        return WINDOW_TABLE_FULL;
    }
    for (i = 0; i < NETDAM_WINDOW_SOURCES; i++) {
        if (!windows[i].used) {
            windows[i].used = true;
            windows[i].ip = ip;
            windows[i].port = port;
            windows[i].hop = hop;
            for (j = 0; j < NETDAM_WINDOW_SLOTS; j++) {
                windows[i].slots[j].tag = 0;
                windows[i].slots[j].old = 0;
            }
            window_count++;
            return (int32_t)i;
        }
    }
    return WINDOW_TABLE_FULL;
}

/* Counts a source window_of refused. */
static void count_refused(int32_t w)
{
    count(w == WINDOW_SOURCE_FULL ? NETDAM_EV_WINDOW_SOURCE_FULL : NETDAM_EV_WINDOW_FULL);
}

static enum claim claim(int32_t w, uint32_t seq, uint64_t *old)
{
    const slot_t *s = &windows[w].slots[seq % NETDAM_WINDOW_SLOTS];
    uint64_t st = s->tag & SLOT_STATE_MASK;
    uint32_t held = (uint32_t)(s->tag >> 32);
    if (st == SLOT_EMPTY || serial_lt(held, seq)) {
        return CLAIM_EXECUTE;
    }
    if (held == seq) {
        /* One packet at a time: a slot is never left executing here. */
        *old = s->old;
        return CLAIM_REPEAT;
    }
    return CLAIM_STALE;
}

static void complete(int32_t w, uint32_t seq, uint64_t old)
{
    slot_t *s = &windows[w].slots[seq % NETDAM_WINDOW_SLOTS];
    s->tag = ((uint64_t)seq << 32) | SLOT_DONE;
    s->old = old;
}

/* ---- Frames --------------------------------------------------------------------- */

static void copy_bytes(uint8_t *dst, const uint8_t *src, uint32_t n)
{
    uint32_t i;
    for (i = 0; i < NETDAM_FRAME_MAX; i++) {
#pragma HLS PIPELINE II = 1
        if (i >= n) {
            break;
        }
        dst[i] = src[i];
    }
}

static uint16_t ipv4_checksum(const uint8_t *h, uint32_t len)
{
    uint32_t sum = 0, i;
    for (i = 0; i < 60u; i += 2u) {
#pragma HLS PIPELINE II = 1
        if (i >= len) {
            break;
        }
        sum += netdam_be16(h + i);
    }
    sum = (sum & 0xFFFFu) + (sum >> 16);
    sum = (sum & 0xFFFFu) + (sum >> 16);
    return (uint16_t)~sum;
}

/* The UDP checksum of `udp` (n bytes, its checksum field read as zero). */
static uint16_t udp_checksum(const uint8_t *ip_hdr, const uint8_t *udp, uint32_t n)
{
    uint32_t sum = 0, i;
    sum += netdam_be16(ip_hdr + NETDAM_IP_SRC) + netdam_be16(ip_hdr + NETDAM_IP_SRC + 2);
    sum += netdam_be16(ip_hdr + NETDAM_IP_DST) + netdam_be16(ip_hdr + NETDAM_IP_DST + 2);
    sum += NETDAM_IPPROTO_UDP + n;
    for (i = 0; i < NETDAM_FRAME_MAX; i += 2u) {
#pragma HLS PIPELINE II = 1
        uint32_t word;
        if (i >= n) {
            break;
        }
        if (i == NETDAM_UDP_CHECK) {
            word = 0;
        } else if (i + 1u < n) {
            word = netdam_be16(udp + i);
        } else {
            word = (uint32_t)udp[i] << 8;
        }
        sum += word;
    }
    /* At most 4,800 16-bit words plus the pseudo-header: two folds carry it all. */
    sum = (sum & 0xFFFFu) + (sum >> 16);
    sum = (sum & 0xFFFFu) + (sum >> 16);
    sum = (uint16_t)~sum;
    return sum == 0u ? 0xFFFFu : (uint16_t)sum;
}

/* The addresses of a frame the node sends. */
typedef struct {
    uint8_t eth_dst[6];
    uint8_t eth_src[6];
    uint32_t ip_src;
    uint32_t ip_dst;
    uint16_t udp_src;
    uint16_t udp_dst;
    uint8_t tos;
} addressing_t;

/* The request's own addresses swapped (section 3). */
static void turned_around(const uint8_t *f, uint32_t l4, addressing_t *to)
{
    uint32_t k;
    for (k = 0; k < 6u; k++) {
        to->eth_dst[k] = f[NETDAM_ETH_SRC + k];
        to->eth_src[k] = f[NETDAM_ETH_DST + k];
    }
    to->ip_src = netdam_be32(f + NETDAM_ETH_LEN + NETDAM_IP_DST);
    to->ip_dst = netdam_be32(f + NETDAM_ETH_LEN + NETDAM_IP_SRC);
    to->udp_src = netdam_be16(f + l4 + NETDAM_UDP_DPORT);
    to->udp_dst = netdam_be16(f + l4 + NETDAM_UDP_SPORT);
    to->tos = f[NETDAM_ETH_LEN + NETDAM_IP_TOS];
}

/* The response payload buffer (READ, REDUCE, atomics, CHAIN). */
static uint8_t scratch[NETDAM_MAX_PAYLOAD];

/* Writes a frame: IPv4 IHL 5, ID 0, DF, TTL 64, UDP checksum 0; then the
 * NetDAM header `hdr`, the SR header `sr` (sr_len bytes) and payload_len
 * bytes of `scratch`. (Six arguments: a seventh would go on the stack,
 * which the stack-usage check sees as a dynamic frame.) */
static uint32_t build_frame(uint8_t *out, const addressing_t *to, const uint8_t hdr[NETDAM_HDR_LEN], const uint8_t *sr,
                            uint32_t sr_len, uint32_t payload_len)
{
    const uint8_t *payload = scratch;
    uint32_t k;
    uint32_t udp_len = NETDAM_UDP_LEN + NETDAM_HDR_LEN + sr_len + payload_len;
    uint8_t *ip = out + NETDAM_ETH_LEN;
    uint8_t *udp = ip + NETDAM_IPV4_MIN;
    for (k = 0; k < 6u; k++) {
        out[NETDAM_ETH_DST + k] = to->eth_dst[k];
        out[NETDAM_ETH_SRC + k] = to->eth_src[k];
    }
    netdam_put_be16(out + NETDAM_ETH_TYPE, NETDAM_ETHERTYPE_IPV4);
    for (k = 0; k < NETDAM_IPV4_MIN; k++) {
        ip[k] = 0;
    }
    ip[NETDAM_IP_VIHL] = 0x45;
    ip[NETDAM_IP_TOS] = to->tos;
    netdam_put_be16(ip + NETDAM_IP_TOT_LEN, (uint16_t)(NETDAM_IPV4_MIN + udp_len));
    ip[NETDAM_IP_FRAG] = 0x40;
    ip[NETDAM_IP_TTL] = 64;
    ip[NETDAM_IP_PROTO] = NETDAM_IPPROTO_UDP;
    netdam_put_be32(ip + NETDAM_IP_SRC, to->ip_src);
    netdam_put_be32(ip + NETDAM_IP_DST, to->ip_dst);
    netdam_put_be16(ip + NETDAM_IP_CHECK, ipv4_checksum(ip, NETDAM_IPV4_MIN));
    netdam_put_be16(udp + NETDAM_UDP_SPORT, to->udp_src);
    netdam_put_be16(udp + NETDAM_UDP_DPORT, to->udp_dst);
    netdam_put_be16(udp + NETDAM_UDP_LENGTH, (uint16_t)udp_len);
    netdam_put_be16(udp + NETDAM_UDP_CHECK, 0);
    copy_bytes(udp + NETDAM_UDP_LEN, hdr, NETDAM_HDR_LEN);
    copy_bytes(udp + NETDAM_UDP_LEN + NETDAM_HDR_LEN, sr, sr_len);
    copy_bytes(udp + NETDAM_UDP_LEN + NETDAM_HDR_LEN + sr_len, payload, payload_len);
    return NETDAM_ETH_LEN + NETDAM_IPV4_MIN + udp_len;
}

/* The response header: the request's with flags RESP | ACK_REQ of the
 * request, status, credit unlimited, len the response payload. */
static void response_header(uint8_t rh[NETDAM_HDR_LEN], const uint8_t *h, uint8_t status, uint32_t payload_len)
{
    copy_bytes(rh, h, NETDAM_HDR_LEN);
    rh[NETDAM_H_FLAGS] = (uint8_t)(NETDAM_FLAG_RESP | (h[NETDAM_H_FLAGS] & NETDAM_FLAG_ACK_REQ));
    rh[NETDAM_H_STATUS] = status;
    netdam_put_be16(rh + NETDAM_H_CREDIT, NETDAM_CREDIT_UNLIMITED);
    netdam_put_be16(rh + NETDAM_H_LEN, (uint16_t)payload_len);
}

/* ---- Validation (section 5) ------------------------------------------------------- */

typedef struct {
    uint8_t op;
    bool vector;
    uint8_t dtype;
    uint8_t alu;
    uint32_t perms;
    uint32_t mem_len;
    uint32_t resp_len;
} checked_t;

static uint32_t width_of(uint8_t dtype) { return (dtype == NETDAM_I64 || dtype == NETDAM_U64) ? 8u : 4u; }

static bool known_opcode(uint8_t op) { return op <= NETDAM_OP_WRITE_NOTIFY || op == NETDAM_OP_CHAIN; }

static uint8_t check_sr_len(uint8_t op, uint8_t sr_len)
{
    bool ok = op == NETDAM_OP_CHAIN ? ((sr_len % 8u) == 0u && sr_len >= NETDAM_SR_MIN && sr_len <= NETDAM_SR_MAX)
                                    : sr_len == 0u;
    return ok ? NETDAM_OK : NETDAM_BAD_SR;
}

/* An unknown dtype or alu, or a bitwise alu on f32, is BAD_DTYPE. */
static uint8_t check_vector_type(uint8_t dtype, uint8_t alu)
{
    if (dtype < NETDAM_I32 || dtype > NETDAM_F32 || alu < NETDAM_ADD || alu > NETDAM_XOR) {
        return NETDAM_BAD_DTYPE;
    }
    if (dtype == NETDAM_F32 && alu >= NETDAM_AND) {
        return NETDAM_BAD_DTYPE;
    }
    return NETDAM_OK;
}

static uint32_t required_perms(uint8_t op)
{
    switch (op) {
    case NETDAM_OP_READ:
    case NETDAM_OP_REDUCE:
        return NETDAM_PERM_READ;
    case NETDAM_OP_WRITE:
    case NETDAM_OP_WRITE_NOTIFY:
        return NETDAM_PERM_WRITE;
    case NETDAM_OP_ACCUMULATE:
    case NETDAM_OP_FETCH_ADD:
    case NETDAM_OP_CAS:
    case NETDAM_OP_SWAP:
        return NETDAM_PERM_ATOMIC;
    case NETDAM_OP_MSG:
        return NETDAM_PERM_MSG;
    default:
        return 0u;
    }
}

/* Version, opcode, sr_len, dtype/alu, length, alignment. */
static uint8_t check_header(const uint8_t *h, uint32_t avail, checked_t *c)
{
    uint8_t op = h[NETDAM_H_OPCODE], s;
    uint32_t len = netdam_be16(h + NETDAM_H_LEN), align = 1u, answer_ip_len;
    /* Version 2 is CHAIN's alone: a version-2 CHAIN here failed its sr_len. */
    if (h[NETDAM_H_VERSION] != NETDAM_VERSION && !(h[NETDAM_H_VERSION] == NETDAM_VERSION_2 && op == NETDAM_OP_CHAIN)) {
        return NETDAM_BAD_VERSION;
    }
    if (!known_opcode(op)) {
        return NETDAM_BAD_OPCODE;
    }
    s = check_sr_len(op, h[NETDAM_H_SR_LEN]);
    if (s != NETDAM_OK) {
        return s;
    }
    c->op = op;
    c->vector = op == NETDAM_OP_ACCUMULATE || op == NETDAM_OP_REDUCE;
    c->dtype = h[NETDAM_H_DTYPE];
    c->alu = h[NETDAM_H_ALU];
    if (c->vector) {
        s = check_vector_type(c->dtype, c->alu);
        if (s != NETDAM_OK) {
            return s;
        }
    }
    switch (op) {
    case NETDAM_OP_NOP:
        if (len != 0u) {
            return NETDAM_BAD_LENGTH;
        }
        c->mem_len = 0;
        c->resp_len = 0;
        break;
    case NETDAM_OP_WRITE:
        c->mem_len = len;
        c->resp_len = 0;
        break;
    case NETDAM_OP_READ:
        if (len > avail) {
            return NETDAM_BAD_LENGTH;
        }
        c->mem_len = len;
        c->resp_len = len;
        break;
    case NETDAM_OP_FETCH_ADD:
    case NETDAM_OP_SWAP:
        if (len != 8u) {
            return NETDAM_BAD_LENGTH;
        }
        c->mem_len = 8;
        c->resp_len = 8;
        break;
    case NETDAM_OP_CAS:
        if (len != 16u) {
            return NETDAM_BAD_LENGTH;
        }
        c->mem_len = 8;
        c->resp_len = 8;
        break;
    default:
        if (len == 0u) {
            return NETDAM_BAD_LENGTH;
        }
        c->mem_len = (op == NETDAM_OP_MSG || op == NETDAM_OP_CHAIN) ? 0u : len;
        c->resp_len = op == NETDAM_OP_REDUCE ? len : 0u;
        break;
    }
    answer_ip_len = NETDAM_IPV4_MIN + NETDAM_UDP_LEN + NETDAM_HDR_LEN + h[NETDAM_H_SR_LEN] + c->resp_len;
    if (len > NETDAM_MAX_PAYLOAD || answer_ip_len > cfg.mtu) {
        return NETDAM_TOO_LARGE;
    }
    if (c->vector) {
        align = width_of(c->dtype);
    } else if (op == NETDAM_OP_FETCH_ADD || op == NETDAM_OP_SWAP || op == NETDAM_OP_CAS) {
        align = 8u;
    }
    if ((netdam_be32(h + NETDAM_H_ADDR + 4) % align) != 0u || (c->vector && (len % align) != 0u)) {
        return NETDAM_MISALIGNED;
    }
    c->perms = required_perms(op);
    return NETDAM_OK;
}

/* rkey, permission, bounds. */
static uint8_t check_access(const region_t *r, const checked_t *c, uint64_t addr)
{
    if (c->op == NETDAM_OP_NOP) {
        return NETDAM_OK;
    }
    if (r == 0) {
        return NETDAM_BAD_KEY;
    }
    if ((r->perms & c->perms) != c->perms) {
        return NETDAM_FORBIDDEN;
    }
    if (!region_contains(r, addr, c->mem_len)) {
        return NETDAM_OUT_OF_BOUNDS;
    }
    return NETDAM_OK;
}

static bool needs_window(const checked_t *c)
{
    if (c->op == NETDAM_OP_ACCUMULATE) {
        return c->alu == NETDAM_ADD || c->alu == NETDAM_XOR;
    }
    return c->op == NETDAM_OP_FETCH_ADD || c->op == NETDAM_OP_CAS || c->op == NETDAM_OP_SWAP;
}

static bool answers(uint8_t op, uint8_t flags, uint8_t status)
{
    if (status != NETDAM_OK) {
        return true;
    }
    if (op == NETDAM_OP_WRITE || op == NETDAM_OP_ACCUMULATE || op == NETDAM_OP_MSG) {
        return (flags & NETDAM_FLAG_ACK_REQ) != 0u;
    }
    return op != NETDAM_OP_WRITE_NOTIFY;
}

/* ---- Execution ------------------------------------------------------------------ */

/* out[i] = alu(a[i], b[i]) over `len` bytes of `dtype` elements (a, b, out may alias). */
static void combine(uint8_t dtype, uint8_t alu, const uint8_t *a, const uint8_t *b, uint8_t *out, uint32_t len)
{
    uint32_t i;
    if (width_of(dtype) == 4u) {
        for (i = 0; i < NETDAM_MAX_PAYLOAD; i += 4u) {
#pragma HLS PIPELINE II = 1
            if (i >= len) {
                break;
            }
            netdam_put_le32(out + i, netdam_combine32(dtype, alu, netdam_le32(a + i), netdam_le32(b + i)));
        }
    } else {
        for (i = 0; i < NETDAM_MAX_PAYLOAD; i += 8u) {
#pragma HLS PIPELINE II = 1
            if (i >= len) {
                break;
            }
            netdam_put_le64(out + i, netdam_combine64(dtype, alu, netdam_le64(a + i), netdam_le64(b + i)));
        }
    }
}

/* Runs a validated op on memory; returns the response payload length (in scratch). */
static uint32_t run(const checked_t *c, const uint8_t *h, const uint8_t *payload, uint8_t *mem)
{
    uint64_t a = netdam_be64(h + NETDAM_H_ADDR);
    uint32_t n = c->mem_len;
    uint8_t *m = mem + a;
    switch (c->op) {
    case NETDAM_OP_WRITE:
    case NETDAM_OP_WRITE_NOTIFY:
        copy_bytes(m, payload, n);
        return 0;
    case NETDAM_OP_READ:
        copy_bytes(scratch, m, n);
        return n;
    case NETDAM_OP_REDUCE:
        combine(c->dtype, c->alu, payload, m, scratch, n);
        return n;
    case NETDAM_OP_ACCUMULATE:
        combine(c->dtype, c->alu, m, payload, m, n);
        return 0;
    case NETDAM_OP_FETCH_ADD:
    case NETDAM_OP_SWAP:
    case NETDAM_OP_CAS: {
        uint64_t old = netdam_le64(m), x = netdam_le64(payload), nv;
        if (c->op == NETDAM_OP_FETCH_ADD) {
            nv = old + x;
        } else if (c->op == NETDAM_OP_SWAP) {
            nv = x;
        } else {
            nv = old == x ? netdam_le64(payload + 8) : old;
        }
        netdam_put_le64(m, nv);
        netdam_put_le64(scratch, old);
        return 8;
    }
    default:
        return 0;
    }
}

/* ---- CHAIN (section 6) ------------------------------------------------------------ */

/* The packet being handled: its frame, the offset of its UDP header, its
 * NetDAM and SR headers, where the answer goes, and NetDAM memory. (Passed
 * as one pointer: more than six arguments would go on the stack, which the
 * stack-usage check sees as a dynamic frame.) */
typedef struct {
    const uint8_t *f;
    uint32_t l4;
    const uint8_t *h;
    const uint8_t *sr;
    uint8_t *out;
    uint32_t *out_len;
    uint8_t *mem;
    bool v2;       /* a version-2 CHAIN: it has a trailer */
    uint64_t cell; /* its trailer's cell address (once the SR shape is checked) */
    uint32_t call; /* its trailer's call word (once the SR shape is checked) */
} pkt_t;

static bool hop_known(uint8_t op)
{
    return op == NETDAM_HOP_NOP || op == NETDAM_HOP_WRITE || op == NETDAM_HOP_ACCUMULATE || op == NETDAM_HOP_REDUCE ||
           op == NETDAM_HOP_REDUCE_WRITE;
}

static bool hop_is_vector(uint8_t op)
{
    return op == NETDAM_HOP_ACCUMULATE || op == NETDAM_HOP_REDUCE || op == NETDAM_HOP_REDUCE_WRITE;
}

static uint32_t hop_perms(uint8_t op)
{
    switch (op) {
    case NETDAM_HOP_WRITE:
        return NETDAM_PERM_WRITE;
    case NETDAM_HOP_REDUCE:
        return NETDAM_PERM_READ;
    case NETDAM_HOP_REDUCE_WRITE:
        return NETDAM_PERM_READ | NETDAM_PERM_WRITE;
    case NETDAM_HOP_ACCUMULATE:
        return NETDAM_PERM_ATOMIC;
    default:
        return 0u;
    }
}

/* Whether a segment names this node: its IPv4 address and port P. */
static bool names_me(const uint8_t *seg)
{
    return netdam_be32(seg + NETDAM_SEG_IP) == cfg.ip && netdam_be16(seg + NETDAM_SEG_PORT) == cfg.port;
}

/* How many of the program's n segments name this node. */
static uint32_t times_named(const uint8_t *sr, uint8_t n)
{
    uint32_t i, times = 0;
    for (i = 0; i < NETDAM_MAX_SEGMENTS; i++) {
#pragma HLS UNROLL
        times += (i < n && names_me(sr + NETDAM_SR_FIXED_LEN + NETDAM_SEGMENT_LEN * i)) ? 1u : 0u;
    }
    return times;
}

/* Everything a hop checks after the SR shape, in section 5 order, but
 * readiness and the window: the segment names this node, its op is known,
 * the next segment is a peer on port P and not this node again, and the
 * program names this node at most NETDAM_MAX_NAMED times (BAD_SR); dtype
 * and alu; length; alignment; rkey, permission and both ranges, for every
 * hop op including NOP (docs/conformance.md 20). Version 2: the cell is
 * 8-aligned (MISALIGNED) and [cell, cell + 24 + len) lies in the region
 * (OUT_OF_BOUNDS), for every hop op but NOP. */
static uint8_t check_hop(const pkt_t *p, bool forwards, bool next_is_peer, uint32_t named, const uint8_t *here,
                         const region_t *r)
{
    const uint8_t *h = p->h, *sr = p->sr;
    const uint8_t *next = forwards ? here + NETDAM_SEGMENT_LEN : here;
    uint8_t op = here[NETDAM_SEG_OP], s;
    uint32_t len = netdam_be16(h + NETDAM_H_LEN), ip_len;
    uint64_t addr = netdam_be64(h + NETDAM_H_ADDR), dst = netdam_be64(sr + NETDAM_SR_DST_ADDR);
    bool has_cell = p->v2 && op != NETDAM_HOP_NOP;
    if (!names_me(here)) {
        return NETDAM_BAD_SR;
    }
    if (!hop_known(op)) {
        return NETDAM_BAD_SR;
    }
    /* A segment on another port names no NetDAM node of this fabric. */
    if (forwards && (!next_is_peer || netdam_be16(next + NETDAM_SEG_PORT) != cfg.port ||
                     netdam_be32(next + NETDAM_SEG_IP) == cfg.ip)) {
        return NETDAM_BAD_SR;
    }
    if (named > NETDAM_MAX_NAMED) {
        return NETDAM_BAD_SR;
    }
    if (hop_is_vector(op)) {
        s = check_vector_type(h[NETDAM_H_DTYPE], h[NETDAM_H_ALU]);
        if (s != NETDAM_OK) {
            return s;
        }
    }
    if (len == 0u) {
        return NETDAM_BAD_LENGTH;
    }
    ip_len = NETDAM_IPV4_MIN + NETDAM_UDP_LEN + NETDAM_HDR_LEN + h[NETDAM_H_SR_LEN] + len;
    if (len > NETDAM_MAX_PAYLOAD || ip_len > cfg.mtu) {
        return NETDAM_TOO_LARGE;
    }
    if (hop_is_vector(op)) {
        uint32_t w = width_of(h[NETDAM_H_DTYPE]);
        if (((uint32_t)addr % w) != 0u || (len % w) != 0u) {
            return NETDAM_MISALIGNED;
        }
    }
    if (has_cell && (p->cell % NETDAM_CELL_ALIGN) != 0u) {
        return NETDAM_MISALIGNED;
    }
    /* NOP too: a key is what makes a node forward a stranger's bytes (NOP
     * needs no permission bits). */
    if (r == 0) {
        return NETDAM_BAD_KEY;
    }
    if ((r->perms & hop_perms(op)) != hop_perms(op)) {
        return NETDAM_FORBIDDEN;
    }
    if (!region_contains(r, addr, len) || !region_contains(r, dst, len)) {
        return NETDAM_OUT_OF_BOUNDS;
    }
    if (has_cell && !region_contains(r, p->cell, NETDAM_CELL_HDR_LEN + (uint64_t)len)) {
        return NETDAM_OUT_OF_BOUNDS;
    }
    return NETDAM_OK;
}

/* What readiness lets a hop do. */
enum ready {
    READY_RUN = 0, /* run the hop */
    READY_HOLD = 1 /* version 2, tag one ahead, REDUCE or REDUCE_WRITE: hold the partial in the cell */
};

/* Readiness: a hop other than NOP runs only when tag == the region's
 * generation; a later tag is NOT_READY, an earlier one STALE (version 2
 * too: a copy one generation behind is STALE, and its origin repairs the
 * chunk). Version 2 also holds a REDUCE or REDUCE_WRITE one ahead (WRITE,
 * ACCUMULATE: NOT_READY), and answers a hop at the generation whose
 * trailer's call word differs from the region's MISMATCH (`call` is ignored
 * in version 1, and for NOP). OK and what to do in `ready`, or the status. */
static uint8_t check_ready(bool v2, uint8_t op, uint32_t tag, uint32_t call, const readiness_t *now, enum ready *ready)
{
    uint32_t generation = now->generation;
    *ready = READY_RUN;
    if (op == NETDAM_HOP_NOP) {
        return NETDAM_OK;
    }
    if (tag == generation) {
        return v2 && call != now->call ? NETDAM_MISMATCH : NETDAM_OK;
    }
    if (v2 && generation != 0xFFFFFFFFu && tag == generation + 1u &&
        (op == NETDAM_HOP_REDUCE || op == NETDAM_HOP_REDUCE_WRITE)) {
        *ready = READY_HOLD;
        return NETDAM_OK;
    }
    return tag > generation ? NETDAM_NOT_READY : NETDAM_STALE;
}

/* Holds the partial in scratch (n bytes) in the cell: hold, then the 8
 * bytes at offset 8 at once (held_seq, held_idx, a zero byte, held_port:
 * the origin_port), then the 8 at offset 16 at once (held_call, the
 * trailer's call word, and a zero word), then held = tag (last: the host
 * reads the others after it). */
static void hold(const pkt_t *p, uint32_t n)
{
    uint8_t *c = p->mem + p->cell;
    uint32_t idx_port = (uint32_t)p->sr[NETDAM_SR_IDX] | ((uint32_t)netdam_be16(p->sr + NETDAM_SR_ORIGIN_PORT) << 16);
    copy_bytes(c + NETDAM_CELL_HOLD, scratch, n);
    netdam_put_le64(c + NETDAM_CELL_HELD_SEQ, (uint64_t)netdam_be32(p->h + NETDAM_H_SEQ) | ((uint64_t)idx_port << 32));
    netdam_put_le64(c + NETDAM_CELL_HELD_CALL, (uint64_t)p->call);
    netdam_put_le32(c + NETDAM_CELL_HELD, netdam_be32(p->h + NETDAM_H_TAG));
}

/* Runs hop `op` on the payload in scratch (n bytes) and memory. */
static void run_hop(const pkt_t *p, uint8_t op, uint32_t n)
{
    uint8_t dtype = p->h[NETDAM_H_DTYPE], alu = p->h[NETDAM_H_ALU], *mem = p->mem;
    uint64_t a = netdam_be64(p->h + NETDAM_H_ADDR), dst = netdam_be64(p->sr + NETDAM_SR_DST_ADDR);
    switch (op) {
    case NETDAM_HOP_WRITE:
        copy_bytes(mem + dst, scratch, n);
        break;
    case NETDAM_HOP_REDUCE:
    case NETDAM_HOP_REDUCE_WRITE:
        combine(dtype, alu, scratch, mem + a, scratch, n);
        if (op == NETDAM_HOP_REDUCE_WRITE) {
            copy_bytes(mem + dst, scratch, n);
        }
        break;
    case NETDAM_HOP_ACCUMULATE:
        combine(dtype, alu, mem + a, scratch, mem + a, n);
        break;
    default:
        break;
    }
}

/* An answer to the CHAIN's origin: to the MAC bound to it, or to this host
 * when the origin is this node. */
static enum netdam_verdict to_origin(const pkt_t *p, uint8_t status, const uint8_t *sr_out, uint32_t payload_len)
{
    const uint8_t *f = p->f, *h = p->h, *sr = p->sr;
    addressing_t to;
    uint8_t rh[NETDAM_HDR_LEN];
    uint32_t origin = netdam_be32(sr + NETDAM_SR_ORIGIN_IP), k;
    enum netdam_verdict v = NETDAM_VERDICT_TX;
    if (origin == cfg.ip) {
        count(NETDAM_EV_PASS_LOCAL_ANSWER);
        v = NETDAM_VERDICT_PASS;
        for (k = 0; k < 6u; k++) {
            to.eth_dst[k] = cfg.mac[k];
        }
    } else {
        const nexthop_t *nh = find_nexthop(origin);
        if (nh == 0) {
            count(NETDAM_EV_DROP_PEER_UNRESOLVED);
            return NETDAM_VERDICT_DROP;
        }
        for (k = 0; k < 6u; k++) {
            to.eth_dst[k] = nh->mac[k];
        }
    }
    for (k = 0; k < 6u; k++) {
        to.eth_src[k] = cfg.mac[k];
    }
    to.ip_src = cfg.ip;
    to.ip_dst = origin;
    to.udp_src = cfg.port;
    to.udp_dst = netdam_be16(sr + NETDAM_SR_ORIGIN_PORT);
    to.tos = f[NETDAM_ETH_LEN + NETDAM_IP_TOS];
    if (status != NETDAM_OK) {
        payload_len = 0;
    }
    response_header(rh, h, status, payload_len);
    *p->out_len = build_frame(p->out, &to, rh, sr_out, h[NETDAM_H_SR_LEN], payload_len);
    return v;
}

/* Bytes of the SR header of a CHAIN of version `v2` with n segments. */
static uint32_t sr_len_of(bool v2, uint8_t n)
{
    return NETDAM_SR_FIXED_LEN + NETDAM_SEGMENT_LEN * (uint32_t)n + (v2 ? NETDAM_SR_CELL_LEN : 0u);
}

static enum netdam_verdict chain(pkt_t *p, const uint8_t *payload, uint32_t payload_len)
{
    const uint8_t *f = p->f, *h = p->h, *sr = p->sr;
    uint8_t n = sr[NETDAM_SR_N], idx = sr[NETDAM_SR_IDX], sr_len = h[NETDAM_H_SR_LEN], status, op;
    uint32_t origin = netdam_be32(sr + NETDAM_SR_ORIGIN_IP), len = payload_len;
    uint32_t tag = netdam_be32(h + NETDAM_H_TAG), rkey = netdam_be32(h + NETDAM_H_RKEY);
    const uint8_t *here, *next;
    bool forwards, next_is_peer;
    const region_t *r;
    enum ready ready = READY_RUN;
    uint8_t sr_out[NETDAM_SR_MAX];
    if (peer_count == 0u) {
        /* No node is trusted to be forwarded to or answered: a CHAIN could only relay. */
        count(NETDAM_EV_DROP_CHAIN_NO_PEERS);
        return NETDAM_VERDICT_DROP;
    }
    if (n == 0u || n > NETDAM_MAX_SEGMENTS || sr_len_of(p->v2, n) != sr_len || idx >= n) {
        /* The origin cannot be trusted: the sender gets the answer. */
        addressing_t to;
        uint8_t rh[NETDAM_HDR_LEN];
        count(op_status(NETDAM_OP_CHAIN, NETDAM_BAD_SR));
        turned_around(f, p->l4, &to);
        response_header(rh, h, NETDAM_BAD_SR, 0);
        *p->out_len = build_frame(p->out, &to, rh, sr, sr_len, 0);
        return NETDAM_VERDICT_TX;
    }
    /* The node's own host may originate; any other origin must be a peer. */
    if (unanswerable(origin) || !(origin == cfg.ip || in_peer_table(origin))) {
        count(NETDAM_EV_DROP_BAD_ORIGIN);
        return NETDAM_VERDICT_DROP;
    }
    if (p->v2) {
        const uint8_t *trailer = sr + NETDAM_SR_FIXED_LEN + NETDAM_SEGMENT_LEN * (uint32_t)n;
        p->call = netdam_be32(trailer + NETDAM_TRAILER_CALL);
        p->cell = netdam_be32(trailer + NETDAM_TRAILER_CELL_ADDR);
    }
    forwards = (uint32_t)idx + 1u < n;
    here = sr + NETDAM_SR_FIXED_LEN + NETDAM_SEGMENT_LEN * idx;
    next = forwards ? here + NETDAM_SEGMENT_LEN : here;
    r = find_region(rkey);
    op = here[NETDAM_SEG_OP];
    copy_bytes(scratch, payload, len);
    copy_bytes(sr_out, sr, sr_len);
    next_is_peer = !forwards || in_peer_table(netdam_be32(next + NETDAM_SEG_IP));
    status = check_hop(p, forwards, next_is_peer, times_named(sr, n), here, r);
    if (status == NETDAM_OK) {
        readiness_t now = readiness_of(rkey);
        status = check_ready(p->v2, op, tag, p->call, &now, &ready);
    }
    if (status == NETDAM_OK && ready == READY_HOLD) {
        hold(p, len);
        /* The host may have raised the generation meanwhile (not in this
         * single-threaded engine, where it reads the same): then it may have
         * read the cell before this hold, and the origin resends at once. */
        status = readiness_of(rkey).generation == tag ? NETDAM_NOT_READY : NETDAM_HELD;
    }
    if (status == NETDAM_OK) {
        bool windowed = op == NETDAM_HOP_ACCUMULATE && (h[NETDAM_H_ALU] == NETDAM_ADD || h[NETDAM_H_ALU] == NETDAM_XOR);
        int32_t w = -1;
        uint32_t seq = netdam_be32(h + NETDAM_H_SEQ);
        if (windowed) {
            uint64_t old = 0;
            w = window_of(origin, netdam_be16(sr + NETDAM_SR_ORIGIN_PORT), (uint16_t)(idx + 1u));
            if (w < 0) {
                count_refused(w);
                status = NETDAM_STALE;
            } else {
                enum claim cl = claim(w, seq, &old);
                status = cl == CLAIM_EXECUTE ? NETDAM_OK : (cl == CLAIM_REPEAT ? NETDAM_DUPLICATE : NETDAM_STALE);
            }
        }
        if (status == NETDAM_OK) {
            run_hop(p, op, len);
            if (windowed) {
                complete(w, seq, 0);
            }
            /* Version 2: completion, after the data. */
            if (p->v2 && (op == NETDAM_HOP_WRITE || op == NETDAM_HOP_REDUCE_WRITE)) {
                netdam_put_le32(p->mem + p->cell + NETDAM_CELL_DONE, tag);
            }
        }
    }
    count(op_status(NETDAM_OP_CHAIN, status));
    if (status != NETDAM_OK) {
        return to_origin(p, status, sr, 0);
    }
    if (!forwards) {
        /* The last segment's answer. */
        bool carries = op == NETDAM_HOP_REDUCE || op == NETDAM_HOP_NOP;
        return to_origin(p, NETDAM_OK, sr_out, carries ? len : 0u);
    }
    {
        const nexthop_t *nh = find_nexthop(netdam_be32(next + NETDAM_SEG_IP));
        addressing_t to;
        uint32_t k;
        if (nh == 0) {
            count(NETDAM_EV_DROP_PEER_UNRESOLVED);
            return NETDAM_VERDICT_DROP;
        }
        count(NETDAM_EV_CHAIN_FORWARDED);
        for (k = 0; k < 6u; k++) {
            to.eth_dst[k] = nh->mac[k];
            to.eth_src[k] = cfg.mac[k];
        }
        to.ip_src = cfg.ip;
        to.ip_dst = netdam_be32(next + NETDAM_SEG_IP);
        to.udp_src = cfg.port;
        to.udp_dst = netdam_be16(next + NETDAM_SEG_PORT);
        to.tos = f[NETDAM_ETH_LEN + NETDAM_IP_TOS];
        sr_out[NETDAM_SR_IDX] = (uint8_t)(idx + 1u);
        *p->out_len = build_frame(p->out, &to, h, sr_out, sr_len, len);
        return NETDAM_VERDICT_TX;
    }
}

/* ---- The top function ------------------------------------------------------------- */

enum netdam_verdict netdam_top(const uint8_t in[NETDAM_FRAME_MAX], uint32_t in_len, uint8_t out[NETDAM_FRAME_MAX],
                               uint32_t *out_len, uint8_t *mem)
{
#pragma HLS INTERFACE axis port = in
#pragma HLS INTERFACE axis port = out
#pragma HLS INTERFACE m_axi port = mem offset = slave bundle = gmem
#pragma HLS INTERFACE s_axilite port = in_len
#pragma HLS INTERFACE s_axilite port = out_len
#pragma HLS INTERFACE s_axilite port = return
    const uint8_t *f = in, *ipv4 = in + NETDAM_ETH_LEN, *udp, *dg, *h, *payload;
    uint32_t ihl, l4, udp_len, ip_len, src, headers, avail, len, frag, dg_len;
    uint8_t status, op, flags;
    checked_t c = {0, false, 0, 0, 0, 0, 0};
    uint32_t resp_len = 0, k;
    *out_len = 0;
    if (in_len > NETDAM_FRAME_MAX) {
        return NETDAM_VERDICT_PASS;
    }
    /* Section 1: only unicast IPv4/UDP to this node's MAC, IP and port P. */
    if (in_len < 34u || netdam_be16(f + NETDAM_ETH_TYPE) != NETDAM_ETHERTYPE_IPV4) {
        return NETDAM_VERDICT_PASS;
    }
    for (k = 0; k < 6u; k++) {
        if (f[k] != cfg.mac[k]) {
            return NETDAM_VERDICT_PASS;
        }
    }
    ihl = ipv4[NETDAM_IP_VIHL] & 0x0Fu;
    if ((ipv4[NETDAM_IP_VIHL] >> 4) != 4u || ihl < 5u || ipv4[NETDAM_IP_PROTO] != NETDAM_IPPROTO_UDP ||
        netdam_be32(ipv4 + NETDAM_IP_DST) != cfg.ip) {
        return NETDAM_VERDICT_PASS;
    }
    frag = netdam_be16(ipv4 + NETDAM_IP_FRAG);
    if ((frag & 0x1FFFu) != 0u) {
        return NETDAM_VERDICT_PASS;
    }
    l4 = NETDAM_ETH_LEN + ihl * 4u;
    if (in_len < l4 + NETDAM_UDP_LEN || netdam_be16(f + l4 + NETDAM_UDP_DPORT) != cfg.port) {
        return NETDAM_VERDICT_PASS;
    }
    if ((frag & 0x2000u) != 0u) {
        count(NETDAM_EV_DROP_FRAGMENT);
        return NETDAM_VERDICT_DROP;
    }
    udp = f + l4;
    udp_len = netdam_be16(udp + NETDAM_UDP_LENGTH);
    ip_len = netdam_be16(ipv4 + NETDAM_IP_TOT_LEN);
    if (udp_len < NETDAM_UDP_LEN || l4 + udp_len > in_len || udp_len + ihl * 4u > ip_len) {
        count(NETDAM_EV_DROP_TRUNCATED);
        return NETDAM_VERDICT_DROP;
    }
    src = netdam_be32(ipv4 + NETDAM_IP_SRC);
    if (unanswerable(src)) {
        count(NETDAM_EV_DROP_BAD_SOURCE);
        return NETDAM_VERDICT_DROP;
    }
    if (src == cfg.ip) {
        count(NETDAM_EV_DROP_OWN_ADDRESS);
        return NETDAM_VERDICT_DROP;
    }
    /* A peer's address counts only from the peer's own MAC (RESP too: a
     * spoofed answer must not reach the host). */
    if (in_peer_table(src) && !sent_by_peer(src, f + NETDAM_ETH_SRC)) {
        count(NETDAM_EV_DROP_PEER_MAC);
        return NETDAM_VERDICT_DROP;
    }
    /* With verify_csum: the IPv4 header checksum (IHL * 4 bytes, options
     * included) and a UDP checksum, which must be right and, except from a
     * peer (nodes send zero, section 1), there (not zero). */
    if (cfg.verify_csum &&
        (ipv4_checksum(ipv4, ihl * 4u) != 0u ||
         (netdam_be16(udp + NETDAM_UDP_CHECK) == 0u ? !in_peer_table(src)
                                                     : udp_checksum(ipv4, udp, udp_len) !=
                                                           netdam_be16(udp + NETDAM_UDP_CHECK)))) {
        count(NETDAM_EV_DROP_BAD_CHECKSUM);
        return NETDAM_VERDICT_DROP;
    }
    dg = udp + NETDAM_UDP_LEN;
    dg_len = udp_len - NETDAM_UDP_LEN;
    if (dg_len < NETDAM_HDR_LEN) {
        count(NETDAM_EV_DROP_TRUNCATED);
        return NETDAM_VERDICT_DROP;
    }
    h = dg;
    if (h[NETDAM_H_MAGIC] != NETDAM_MAGIC) {
        count(NETDAM_EV_DROP_BAD_MAGIC);
        return NETDAM_VERDICT_DROP;
    }
    flags = h[NETDAM_H_FLAGS];
    if ((flags & NETDAM_FLAG_RESP) != 0u) {
        count(NETDAM_EV_PASS_RESPONSE);
        return NETDAM_VERDICT_PASS;
    }
    if (!is_peer(src)) {
        count(NETDAM_EV_DROP_NOT_PEER);
        return NETDAM_VERDICT_DROP;
    }
    headers = NETDAM_HDR_LEN + h[NETDAM_H_SR_LEN];
    if (headers > dg_len) {
        count(NETDAM_EV_DROP_TRUNCATED);
        return NETDAM_VERDICT_DROP;
    }
    avail = dg_len - headers;
    len = netdam_be16(h + NETDAM_H_LEN);
    op = h[NETDAM_H_OPCODE];
    if (op != NETDAM_OP_READ && len > avail) {
        count(NETDAM_EV_DROP_LEN_PAST_DATAGRAM);
        return NETDAM_VERDICT_DROP;
    }
    payload = dg + headers;
    /* CHAIN of version 1 or 2 (version 2 means nothing for another opcode:
     * check_header answers it BAD_VERSION; a CHAIN whose sr_len fails, BAD_SR). */
    if (op == NETDAM_OP_CHAIN &&
        (h[NETDAM_H_VERSION] == NETDAM_VERSION || h[NETDAM_H_VERSION] == NETDAM_VERSION_2) &&
        check_sr_len(op, h[NETDAM_H_SR_LEN]) == NETDAM_OK) {
        pkt_t p = {f, l4, h, dg + NETDAM_HDR_LEN, out, out_len, mem, h[NETDAM_H_VERSION] == NETDAM_VERSION_2, 0u, 0u};
        return chain(&p, payload, len < avail ? len : avail);
    }
    status = check_header(h, avail, &c);
    if (status == NETDAM_OK && c.op == NETDAM_OP_CHAIN) {
        status = NETDAM_BAD_OPCODE;
    }
    if (status == NETDAM_OK) {
        status = check_access(find_region(netdam_be32(h + NETDAM_H_RKEY)), &c, netdam_be64(h + NETDAM_H_ADDR));
    }
    if (status == NETDAM_OK && (c.op == NETDAM_OP_MSG || c.op == NETDAM_OP_WRITE_NOTIFY) && !cfg.receiver) {
        status = NETDAM_NO_RECEIVER;
    }
    if (status == NETDAM_OK && needs_window(&c)) {
        int32_t w = window_of(src, netdam_be16(udp + NETDAM_UDP_SPORT), 0);
        uint32_t seq = netdam_be32(h + NETDAM_H_SEQ);
        uint64_t old = 0;
        if (w < 0) {
            count_refused(w);
            status = NETDAM_STALE;
        } else {
            enum claim cl = claim(w, seq, &old);
            if (cl == CLAIM_EXECUTE) {
                resp_len = run(&c, h, payload, mem);
                complete(w, seq, c.op == NETDAM_OP_ACCUMULATE ? 0u : netdam_le64(scratch));
            } else if (cl == CLAIM_REPEAT && c.op != NETDAM_OP_ACCUMULATE) {
                netdam_put_le64(scratch, old);
                resp_len = 8;
            } else {
                status = cl == CLAIM_REPEAT ? NETDAM_DUPLICATE : NETDAM_STALE;
            }
        }
    } else if (status == NETDAM_OK) {
        resp_len = run(&c, h, payload, mem);
    }
    if (status == NETDAM_OK && (c.op == NETDAM_OP_MSG || c.op == NETDAM_OP_WRITE_NOTIFY)) {
        /* Hand over: MSG from IPv4 on; WRITE_NOTIFY cut after its NetDAM header. */
        uint32_t n = c.op == NETDAM_OP_MSG ? in_len - NETDAM_ETH_LEN : l4 + NETDAM_UDP_LEN + NETDAM_HDR_LEN - NETDAM_ETH_LEN;
        if (n > NETDAM_HANDOVER_MAX) {
            count(NETDAM_EV_DROP_TOO_LARGE_FOR_UMEM);
            return NETDAM_VERDICT_DROP;
        }
        count(op_status(op, NETDAM_OK));
        copy_bytes(out, f + NETDAM_ETH_LEN, n);
        *out_len = n;
        return NETDAM_VERDICT_REDIRECT;
    }
    count(op_status(op, status));
    if (known_opcode(op) && !answers(op, flags, status)) {
        return NETDAM_VERDICT_DROP;
    }
    {
        addressing_t to;
        uint8_t rh[NETDAM_HDR_LEN];
        if (status != NETDAM_OK) {
            resp_len = 0;
        }
        turned_around(f, l4, &to);
        response_header(rh, h, status, resp_len);
        *out_len = build_frame(out, &to, rh, dg + NETDAM_HDR_LEN, h[NETDAM_H_SR_LEN], resp_len);
        return NETDAM_VERDICT_TX;
    }
}
