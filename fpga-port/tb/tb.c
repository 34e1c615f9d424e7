/*
 * C testbench: every conformance vector of tests/vectors/netdam.jsonl (the
 * file the XDP program's conformance test reads) through netdam_top, bit
 * for bit: verdict, output frame, memory.
 *
 * Usage: tb [VECTORS.jsonl]   (default ../tests/vectors/netdam.jsonl)
 * Exit status 0 when every vector matches.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "netdam_core.h"

#define MEM_BYTES (2u << 20)

static uint8_t mem[MEM_BYTES];
static uint8_t in[NETDAM_FRAME_MAX];
static uint8_t out[NETDAM_FRAME_MAX];

static size_t unhex(const char *s, uint8_t *dst, size_t cap)
{
    size_t n = strlen(s) / 2, i;
    if (n > cap) {
        fprintf(stderr, "a hex string of %zu bytes does not fit %zu\n", n, cap);
        exit(2);
    }
    for (i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) {
            fprintf(stderr, "bad hex at %zu of %s\n", i, s);
            exit(2);
        }
        dst[i] = (uint8_t)v;
    }
    return n;
}

static uint32_t parse_ip(const char *s)
{
    unsigned a, b, c, d;
    if (sscanf(s, "%u.%u.%u.%u", &a, &b, &c, &d) != 4) {
        fprintf(stderr, "bad IPv4 address %s\n", s);
        exit(2);
    }
    return (a << 24) | (b << 16) | (c << 8) | d;
}

static const char *verdict_name(enum netdam_verdict v)
{
    switch (v) {
    case NETDAM_VERDICT_PASS:
        return "pass";
    case NETDAM_VERDICT_DROP:
        return "drop";
    case NETDAM_VERDICT_TX:
        return "tx";
    default:
        return "redirect";
    }
}

static void configure(const json_t *node)
{
    netdam_config_t cfg;
    const json_t *list;
    size_t i;
    memset(&cfg, 0, sizeof cfg);
    unhex(json_str(json_get(node, "mac")), cfg.mac, 6);
    cfg.ip = parse_ip(json_str(json_get(node, "ip")));
    cfg.port = (uint16_t)json_u64(json_get(node, "port"));
    cfg.mtu = (uint32_t)json_u64(json_get(node, "mtu"));
    cfg.mem_size = json_u64(json_get(node, "mem_size"));
    cfg.verify_csum = json_bool(json_get(node, "verify_csum"));
    cfg.window_sources = (uint32_t)json_u64(json_get(node, "window_sources"));
    cfg.window_per_source = (uint32_t)json_u64(json_get(node, "window_per_source"));
    cfg.receiver = json_get(node, "receiver") != NULL && json_bool(json_get(node, "receiver"));
    if (cfg.mem_size > MEM_BYTES) {
        fprintf(stderr, "mem_size %" PRIu64 " exceeds the testbench's %u bytes\n", cfg.mem_size, MEM_BYTES);
        exit(2);
    }
    netdam_reset(&cfg);
    list = json_get(node, "regions");
    for (i = 0; i < json_len(list); i++) {
        const json_t *r = json_at(list, i);
        if (netdam_add_region((uint32_t)json_u64(json_get(r, "rkey")), json_u64(json_get(r, "base")),
                              json_u64(json_get(r, "size")), (uint32_t)json_u64(json_get(r, "perms"))) != 0) {
            fprintf(stderr, "region %zu refused\n", i);
            exit(2);
        }
    }
    list = json_get(node, "peers");
    for (i = 0; i < json_len(list); i++) {
        netdam_add_peer(parse_ip(json_str(json_at(list, i))));
    }
    list = json_get(node, "neighbours");
    for (i = 0; i < json_len(list); i++) {
        uint8_t mac[6];
        unhex(json_str(json_get(json_at(list, i), "mac")), mac, 6);
        netdam_add_nexthop(parse_ip(json_str(json_get(json_at(list, i), "ip"))), mac);
    }
    list = json_get(node, "generations");
    for (i = 0; i < json_len(list); i++) {
        const json_t *g = json_at(list, i);
        const json_t *call = json_get(g, "call"); /* version 2's call word: absent when 0 */
        netdam_set_readiness((uint32_t)json_u64(json_get(g, "rkey")), (uint32_t)json_u64(json_get(g, "generation")),
                             call != NULL ? (uint32_t)json_u64(call) : 0u);
    }
}

/* Runs one vector; returns 0 when it matches. */
static int run_vector(const json_t *v)
{
    const char *name = json_str(json_get(v, "name"));
    const char *rule = json_str(json_get(v, "rule"));
    const json_t *list;
    static uint8_t want[NETDAM_FRAME_MAX];
    size_t i;
    configure(json_get(v, "node"));
    memset(mem, 0, sizeof mem);
    list = json_get(v, "memory");
    for (i = 0; i < json_len(list); i++) {
        const json_t *seg = json_at(list, i);
        uint64_t addr = json_u64(json_get(seg, "addr"));
        unhex(json_str(json_get(seg, "hex")), mem + addr, MEM_BYTES - addr);
    }
    list = json_get(v, "steps");
    for (i = 0; i < json_len(list); i++) {
        const json_t *step = json_at(list, i);
        size_t n = unhex(json_str(json_get(step, "input")), in, sizeof in);
        uint32_t out_len = 0;
        enum netdam_verdict got = netdam_top(in, (uint32_t)n, out, &out_len, mem);
        const char *verdict = json_str(json_get(step, "verdict"));
        if (strcmp(verdict_name(got), verdict) != 0) {
            printf("FAIL %s (%s): step %zu verdict %s, want %s\n", name, rule, i, verdict_name(got), verdict);
            return 1;
        }
        if (strcmp(verdict, "drop") != 0) {
            size_t wn = unhex(json_str(json_get(step, "output")), want, sizeof want);
            const uint8_t *frame = got == NETDAM_VERDICT_PASS ? in : out;
            size_t len = got == NETDAM_VERDICT_PASS ? n : out_len;
            if (got == NETDAM_VERDICT_PASS && out_len != 0u) {
                /* A CHAIN answer to this very host is passed as the answer frame. */
                frame = out;
                len = out_len;
            }
            if (wn != len || memcmp(want, frame, wn) != 0) {
                size_t k = 0;
                while (k < wn && k < len && want[k] == frame[k]) {
                    k++;
                }
                printf("FAIL %s (%s): step %zu output frame differs at byte %zu (%zu bytes, want %zu)\n", name, rule, i,
                       k, len, wn);
                return 1;
            }
        }
    }
    list = json_get(v, "memory_after");
    for (i = 0; i < json_len(list); i++) {
        const json_t *seg = json_at(list, i);
        uint64_t addr = json_u64(json_get(seg, "addr"));
        size_t wn = unhex(json_str(json_get(seg, "hex")), want, sizeof want);
        if (memcmp(mem + addr, want, wn) != 0) {
            printf("FAIL %s (%s): memory at %#" PRIx64 " differs\n", name, rule, addr);
            return 1;
        }
    }
    return 0;
}

/* The engine's integer f32 add against this host's IEEE 754 addition
 * (round to nearest even, subnormals kept; NaN results made canonical) on
 * random pairs biased to exponents near each other, specials and subnormals. */
static unsigned check_f32(void)
{
    uint64_t x = 0x9E3779B97F4A7C15u;
    unsigned i, bad = 0;
    for (i = 0; i < 2000000u; i++) {
        uint32_t a, b, got, want;
        float fa, fb, fr;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        a = (uint32_t)x;
        b = (uint32_t)(x >> 32);
        if ((i & 3u) == 1u) {
            b = (b & 0x807FFFFFu) | (a & 0x7F800000u); /* same exponent */
        } else if ((i & 3u) == 2u) {
            b &= 0x80FFFFFFu; /* subnormal or tiny */
        } else if ((i & 15u) == 3u) {
            b = (b & 0x80000000u) | 0x7F800000u | (b & (i & 16u ? 0x7FFFFFu : 0u)); /* inf or NaN */
        }
        memcpy(&fa, &a, 4);
        memcpy(&fb, &b, 4);
        fr = fa + fb;
        memcpy(&want, &fr, 4);
        if ((want & 0x7F800000u) == 0x7F800000u && (want & 0x7FFFFFu) != 0u) {
            want = 0x7FC00000u;
        }
        got = netdam_f32_add(a, b);
        if (got != want && bad++ < 5u) {
            printf("FAIL f32 add %#010x + %#010x: engine %#010x, host %#010x\n", a, b, got, want);
        }
    }
    printf("f32 add: %u of 2000000 random pairs differ from the host's IEEE 754 addition\n", bad);
    return bad;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "../tests/vectors/netdam.jsonl";
    FILE *fp = fopen(path, "r");
    static char line[1 << 20];
    unsigned total = 0, failed = 0;
    if (fp == NULL) {
        perror(path);
        return 2;
    }
    while (fgets(line, sizeof line, fp) != NULL) {
        json_t *v;
        if (line[0] == '\n' || line[0] == '\0') {
            continue;
        }
        v = json_parse(line);
        if (v == NULL) {
            fprintf(stderr, "%s: line %u is not JSON\n", path, total + 1);
            return 2;
        }
        total++;
        failed += (unsigned)run_vector(v);
        json_free(v);
    }
    fclose(fp);
    printf("%u of %u vectors matched (%s)\n", total - failed, total, path);
    failed += check_f32() != 0u ? 1u : 0u;
    if (total < 100) {
        printf("the vector set is unexpectedly small\n");
        return 1;
    }
    return failed == 0 ? 0 : 1;
}
