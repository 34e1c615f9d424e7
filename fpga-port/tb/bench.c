/*
 * The C engine's own speed on this CPU (not a hardware figure): NOP,
 * WRITE 1 KiB and ACCUMULATE 1 KiB i32 ADD through netdam_top, and the
 * cycles the loop structure implies on the card (trip count of the per-word
 * loops at II=1; an estimate from the source, not a synthesis result).
 * Prints one JSON object per op (`netdam-bench fpga` reads them).
 */
#define _POSIX_C_SOURCE 199309L
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

#include "netdam_core.h"

#define NODE_IP 0xC6120001u   /* 198.18.0.1 */
#define CLIENT_IP 0xC6120002u /* 198.18.0.2 */
#define RKEY 0x1234u
#define BASE 0x1000u
#define BATCH 20000u
#define BATCHES 25u

static uint8_t mem[1u << 20];
static uint8_t frame[NETDAM_FRAME_MAX];
static uint8_t out[NETDAM_FRAME_MAX];
static const uint8_t node_mac[6] = {0x02, 0xDA, 0, 0, 0, 1};

/* A request from the client to the node, the payload filled with a pattern. */
static uint32_t request(uint8_t op, uint8_t dtype, uint8_t alu, uint16_t len)
{
    uint8_t *ip = frame + 14, *udp = ip + 20, *h = udp + 8;
    uint32_t i, udp_len = 8u + NETDAM_HDR_LEN + len;
    uint32_t sum = 0;
    memset(frame, 0, sizeof frame);
    memcpy(frame, node_mac, 6);
    frame[6] = 0x02;
    frame[7] = 0xDA;
    frame[11] = 2;
    netdam_put_be16(frame + 12, NETDAM_ETHERTYPE_IPV4);
    ip[0] = 0x45;
    netdam_put_be16(ip + 2, (uint16_t)(20u + udp_len));
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = NETDAM_IPPROTO_UDP;
    netdam_put_be32(ip + 12, CLIENT_IP);
    netdam_put_be32(ip + 16, NODE_IP);
    for (i = 0; i < 20u; i += 2u) {
        sum += netdam_be16(ip + i);
    }
    sum = (sum & 0xFFFFu) + (sum >> 16);
    sum = (sum & 0xFFFFu) + (sum >> 16);
    netdam_put_be16(ip + 10, (uint16_t)~sum);
    netdam_put_be16(udp, 40000);
    netdam_put_be16(udp + 2, NETDAM_DEFAULT_PORT);
    netdam_put_be16(udp + 4, (uint16_t)udp_len);
    h[NETDAM_H_MAGIC] = NETDAM_MAGIC;
    h[NETDAM_H_VERSION] = NETDAM_VERSION;
    h[NETDAM_H_OPCODE] = op;
    h[NETDAM_H_DTYPE] = dtype;
    h[NETDAM_H_ALU] = alu;
    netdam_put_be32(h + NETDAM_H_SEQ, 1);
    netdam_put_be64(h + NETDAM_H_ADDR, BASE);
    netdam_put_be32(h + NETDAM_H_RKEY, RKEY);
    netdam_put_be16(h + NETDAM_H_LEN, len);
    for (i = 0; i < len; i++) {
        h[NETDAM_HDR_LEN + i] = (uint8_t)(i * 7u + 1u);
    }
    return 14u + 20u + udp_len;
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median ns per packet over BATCHES batches; `fresh_seq` gives every
 * packet a new seq (ACCUMULATE ADD goes through the at-most-once window). */
static double measure(uint32_t len, int fresh_seq)
{
    double per[BATCHES];
    uint32_t seq = 1, b, i, out_len;
    uint8_t *seq_at = frame + 14 + 20 + 8 + NETDAM_H_SEQ;
    for (b = 0; b < BATCHES; b++) {
        double t = now_ns();
        for (i = 0; i < BATCH; i++) {
            if (fresh_seq) {
                netdam_put_be32(seq_at, ++seq);
            }
            (void)netdam_top(frame, len, out, &out_len, mem);
        }
        per[b] = (now_ns() - t) / BATCH;
    }
    qsort(per, BATCHES, sizeof per[0], cmp);
    return per[BATCHES / 2];
}

static void report(const char *op, double ns, uint32_t cycles)
{
    printf("{\"op\":\"%s\",\"ns_per_packet\":%.1f,\"packets_per_s\":%.0f,\"loop_cycles_at_ii1\":%" PRIu32 "}\n", op, ns,
           1e9 / ns, cycles);
}

int main(void)
{
    netdam_config_t cfg;
    uint32_t len;
    memset(&cfg, 0, sizeof cfg);
    memcpy(cfg.mac, node_mac, 6);
    cfg.ip = NODE_IP;
    cfg.port = NETDAM_DEFAULT_PORT;
    cfg.mtu = 1500;
    cfg.mem_size = sizeof mem;
    cfg.window_sources = 16;
    cfg.window_per_source = 16;
    netdam_reset(&cfg);
    netdam_add_region(RKEY, 0, sizeof mem, NETDAM_PERM_READ | NETDAM_PERM_WRITE | NETDAM_PERM_ATOMIC);
    /* Cycles from the loop structure: the per-word loops' trip counts, one
     * word per cycle at II=1 (byte-wide copies, one element per ALU step),
     * plus the 32-byte header copy and 10-word checksum of an answer. */
    len = request(NETDAM_OP_NOP, 0, 0, 0);
    report("NOP", measure(len, 0), 32u + 10u);
    len = request(NETDAM_OP_WRITE, 0, 0, 1024);
    report("WRITE 1 KiB", measure(len, 0), 1024u);
    len = request(NETDAM_OP_ACCUMULATE, NETDAM_I32, NETDAM_ADD, 1024);
    report("ACCUMULATE 1 KiB i32 ADD", measure(len, 1), 1024u / 4u);
    return 0;
}
