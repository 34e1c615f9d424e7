/*
 * NetDAM wire types (PROTOCOL.md, version 1, and version 2 of CHAIN) for the HLS port.
 *
 * Fixed-width integers only, no bitfields, no packed structs: every field
 * is read and written through the explicit big-endian (network order) or
 * little-endian accessors below, at the byte offsets the protocol gives,
 * which are checked by the static asserts at the end.
 */
#ifndef NETDAM_H
#define NETDAM_H

#include <stdbool.h>
#include <stdint.h>

/* ---- Sizes and limits ------------------------------------------------ */

#define NETDAM_DEFAULT_PORT 4793u
#define NETDAM_MAGIC 0xDAu
#define NETDAM_VERSION 1u
/* Version 2 (PROTOCOL.md, the version-2 section): CHAIN only, with hops that
 * hold early partials and stamp completion in a cell (a late copy is STALE,
 * as in version 1). */
#define NETDAM_VERSION_2 2u
#define NETDAM_HDR_LEN 32u
#define NETDAM_ETH_LEN 14u
#define NETDAM_IPV4_MIN 20u
#define NETDAM_UDP_LEN 8u
/* Ethernet II + IPv4 without options + UDP: the carrier of what a node sends. */
#define NETDAM_CARRIER_LEN (NETDAM_ETH_LEN + NETDAM_IPV4_MIN + NETDAM_UDP_LEN)
/* Largest request payload the engine copies (a 9000-byte jumbo MTU fits). */
#define NETDAM_MAX_PAYLOAD 9216u
/* Largest frame in or out: Ethernet, IPv4 with options, UDP, headers, payload. */
#define NETDAM_FRAME_MAX 9600u
/* SR header: 16 fixed bytes and 1..15 segments of 8. */
#define NETDAM_SR_FIXED_LEN 16u
#define NETDAM_SEGMENT_LEN 8u
#define NETDAM_MAX_SEGMENTS 15u
#define NETDAM_SR_MIN (NETDAM_SR_FIXED_LEN + NETDAM_SEGMENT_LEN)
#define NETDAM_SR_MAX (NETDAM_SR_FIXED_LEN + NETDAM_SEGMENT_LEN * NETDAM_MAX_SEGMENTS)
/* A version-2 CHAIN's SR header has a trailer after its segments: the call
 * word (u32, big-endian), then the cell address (u32, big-endian: NetDAM
 * memory is at most 2 GiB); sr_len = 16 + 8n + 8. */
#define NETDAM_SR_CELL_LEN 8u
#define NETDAM_TRAILER_CALL 0u
#define NETDAM_TRAILER_CELL_ADDR 4u
/* Times one node may be named in a program (docs/conformance.md 20): a ring
 * names every member at most twice, and the bound keeps one frame from
 * making a node transmit more than twice (no ping-pong amplifier). */
#define NETDAM_MAX_NAMED 2u
/* The UMEM frame an AF_XDP receiver gets (4096 bytes less the kernel's 256 of headroom). */
#define NETDAM_HANDOVER_MAX 3840u

/* ---- Code points (sections 3, 4, 5, 6) ---------------------------------- */

enum netdam_opcode {
    NETDAM_OP_NOP = 0x00,
    NETDAM_OP_WRITE = 0x01,
    NETDAM_OP_READ = 0x02,
    NETDAM_OP_ACCUMULATE = 0x03,
    NETDAM_OP_FETCH_ADD = 0x04,
    NETDAM_OP_CAS = 0x05,
    NETDAM_OP_SWAP = 0x06,
    NETDAM_OP_REDUCE = 0x07,
    NETDAM_OP_MSG = 0x08,
    NETDAM_OP_WRITE_NOTIFY = 0x09,
    NETDAM_OP_CHAIN = 0x10
};

enum netdam_hop_op {
    NETDAM_HOP_NOP = 0x00,
    NETDAM_HOP_WRITE = 0x01,
    NETDAM_HOP_ACCUMULATE = 0x03,
    NETDAM_HOP_REDUCE = 0x07,
    NETDAM_HOP_REDUCE_WRITE = 0x0B
};

enum netdam_dtype { NETDAM_I32 = 1, NETDAM_U32 = 2, NETDAM_I64 = 3, NETDAM_U64 = 4, NETDAM_F32 = 5 };

enum netdam_alu { NETDAM_ADD = 1, NETDAM_MIN = 2, NETDAM_MAX = 3, NETDAM_AND = 4, NETDAM_OR = 5, NETDAM_XOR = 6 };

enum netdam_status {
    NETDAM_OK = 0,
    NETDAM_BAD_VERSION = 1,
    NETDAM_BAD_OPCODE = 2,
    NETDAM_OUT_OF_BOUNDS = 3,
    NETDAM_BAD_KEY = 4,
    NETDAM_BAD_LENGTH = 5,
    NETDAM_MISALIGNED = 6,
    NETDAM_BAD_DTYPE = 7,
    NETDAM_NOT_READY = 8,
    NETDAM_NO_RECEIVER = 9,
    NETDAM_DUPLICATE = 10,
    NETDAM_STALE = 11,
    NETDAM_BAD_SR = 12,
    NETDAM_TOO_LARGE = 13,
    NETDAM_FORBIDDEN = 14,
    NETDAM_HELD = 15,    /* version 2: the partial is held at this hop (not a failure) */
    NETDAM_MISMATCH = 16 /* version 2: this hop's member contributed to another call (its call word differs) */
};

/* Header flag bits. */
#define NETDAM_FLAG_ACK_REQ 0x01u
#define NETDAM_FLAG_RESP 0x02u
#define NETDAM_CREDIT_UNLIMITED 0xFFFFu

/* Region permissions (section 8). */
#define NETDAM_PERM_READ 0x1u
#define NETDAM_PERM_WRITE 0x2u
#define NETDAM_PERM_ATOMIC 0x4u
#define NETDAM_PERM_MSG 0x8u

/* ---- Byte offsets ------------------------------------------------------- */

/* Ethernet. */
#define NETDAM_ETH_DST 0u
#define NETDAM_ETH_SRC 6u
#define NETDAM_ETH_TYPE 12u
#define NETDAM_ETHERTYPE_IPV4 0x0800u
/* IPv4, from the start of its header. */
#define NETDAM_IP_VIHL 0u
#define NETDAM_IP_TOS 1u
#define NETDAM_IP_TOT_LEN 2u
#define NETDAM_IP_FRAG 6u
#define NETDAM_IP_TTL 8u
#define NETDAM_IP_PROTO 9u
#define NETDAM_IP_CHECK 10u
#define NETDAM_IP_SRC 12u
#define NETDAM_IP_DST 16u
#define NETDAM_IPPROTO_UDP 17u
/* UDP, from the start of its header. */
#define NETDAM_UDP_SPORT 0u
#define NETDAM_UDP_DPORT 2u
#define NETDAM_UDP_LENGTH 4u
#define NETDAM_UDP_CHECK 6u
/* NetDAM header (section 2), from its start. */
#define NETDAM_H_MAGIC 0u
#define NETDAM_H_VERSION 1u
#define NETDAM_H_OPCODE 2u
#define NETDAM_H_FLAGS 3u
#define NETDAM_H_STATUS 4u
#define NETDAM_H_DTYPE 5u
#define NETDAM_H_ALU 6u
#define NETDAM_H_SR_LEN 7u
#define NETDAM_H_SEQ 8u
#define NETDAM_H_TAG 12u
#define NETDAM_H_ADDR 16u
#define NETDAM_H_RKEY 24u
#define NETDAM_H_LEN 28u
#define NETDAM_H_CREDIT 30u
/* SR header (section 6), from its start. */
#define NETDAM_SR_N 0u
#define NETDAM_SR_IDX 1u
#define NETDAM_SR_ORIGIN_PORT 2u
#define NETDAM_SR_ORIGIN_IP 4u
#define NETDAM_SR_DST_ADDR 8u
/* A segment, from its start. */
#define NETDAM_SEG_IP 0u
#define NETDAM_SEG_PORT 4u
#define NETDAM_SEG_OP 6u
#define NETDAM_SEG_FLAGS 7u
/* The completion cell of a version-2 CHAIN, from cell_addr (little-endian in memory). */
#define NETDAM_CELL_DONE 0u     /* u32: the generation whose result the node stored last */
#define NETDAM_CELL_HELD 4u     /* u32: the generation of the partial held in HOLD */
#define NETDAM_CELL_HELD_SEQ 8u /* u32: seq of the held packet */
#define NETDAM_CELL_HELD_IDX 12u /* u8: SR idx of the held hop (then a zero byte) */
#define NETDAM_CELL_HELD_PORT 14u /* u16: the held packet's origin_port */
#define NETDAM_CELL_HELD_CALL 16u /* u32: the held packet's call word (then 4 zero bytes) */
#define NETDAM_CELL_HOLD 24u    /* the held partial, len bytes */
#define NETDAM_CELL_HDR_LEN 24u
#define NETDAM_CELL_ALIGN 8u

/* ---- Accessors ------------------------------------------------------------ */

static inline uint16_t netdam_be16(const uint8_t *p) { return (uint16_t)(((uint16_t)p[0] << 8) | p[1]); }

static inline uint32_t netdam_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline uint64_t netdam_be64(const uint8_t *p)
{
    return ((uint64_t)netdam_be32(p) << 32) | (uint64_t)netdam_be32(p + 4);
}

static inline void netdam_put_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void netdam_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void netdam_put_be64(uint8_t *p, uint64_t v)
{
    netdam_put_be32(p, (uint32_t)(v >> 32));
    netdam_put_be32(p + 4, (uint32_t)v);
}

/* Vector elements, atomic operands and old values are little-endian (section 1). */
static inline uint32_t netdam_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t netdam_le64(const uint8_t *p) { return (uint64_t)netdam_le32(p) | ((uint64_t)netdam_le32(p + 4) << 32); }

static inline void netdam_put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void netdam_put_le64(uint8_t *p, uint64_t v)
{
    netdam_put_le32(p, (uint32_t)v);
    netdam_put_le32(p + 4, (uint32_t)(v >> 32));
}

/* ---- Checks of the layout ------------------------------------------------- */

_Static_assert(NETDAM_H_CREDIT + 2u == NETDAM_HDR_LEN, "the NetDAM header is 32 bytes, credit last");
_Static_assert(NETDAM_H_ADDR == 16u && NETDAM_H_RKEY == 24u && NETDAM_H_LEN == 28u, "section 2 offsets");
_Static_assert(NETDAM_H_SEQ == 8u && NETDAM_H_TAG == 12u && NETDAM_H_SR_LEN == 7u, "section 2 offsets");
_Static_assert(NETDAM_SR_DST_ADDR + 8u == NETDAM_SR_FIXED_LEN, "the SR header's fixed part is 16 bytes");
_Static_assert(NETDAM_SEG_FLAGS + 1u == NETDAM_SEGMENT_LEN, "a segment is 8 bytes");
_Static_assert(NETDAM_SR_MAX == 136u && NETDAM_SR_MIN == 24u, "1 to 15 segments");
_Static_assert(NETDAM_CELL_HELD_SEQ + 4u == NETDAM_CELL_HELD_IDX && NETDAM_CELL_HELD_PORT + 2u == NETDAM_CELL_HELD_CALL &&
                   NETDAM_CELL_HELD_CALL + 8u == NETDAM_CELL_HOLD && NETDAM_CELL_HOLD == NETDAM_CELL_HDR_LEN &&
                   NETDAM_CELL_HDR_LEN == 24u,
               "the version-2 cell: done, held, held_seq, held_idx, held_port, held_call and a zero word, then the "
               "held partial at 24");
_Static_assert(NETDAM_TRAILER_CALL + 4u == NETDAM_TRAILER_CELL_ADDR && NETDAM_TRAILER_CELL_ADDR + 4u == NETDAM_SR_CELL_LEN,
               "the version-2 trailer: call word, then cell address");
_Static_assert(NETDAM_SR_FIXED_LEN + NETDAM_SEGMENT_LEN * 14u + NETDAM_SR_CELL_LEN <= NETDAM_SR_MAX,
               "a version-2 ring program (14 segments at most) and its trailer fit an SR header");
_Static_assert(NETDAM_CARRIER_LEN == 42u, "Ethernet + IPv4 + UDP");
_Static_assert(NETDAM_IP_DST + 4u == NETDAM_IPV4_MIN, "IPv4 without options is 20 bytes");
_Static_assert(NETDAM_UDP_CHECK + 2u == NETDAM_UDP_LEN, "UDP header is 8 bytes");
_Static_assert(NETDAM_FRAME_MAX >= NETDAM_ETH_LEN + 60u + NETDAM_UDP_LEN + NETDAM_HDR_LEN + NETDAM_SR_MAX + NETDAM_MAX_PAYLOAD,
               "the largest request fits a frame buffer");
_Static_assert(sizeof(uint64_t) == 8u && sizeof(uint32_t) == 4u, "fixed-width integers");

#endif
