/* The C side of tests/tests/capi.rs: libnetdam used from C exactly as
 * netdam.h declares it, compiled with -std=c99 -Wall -Wextra -Werror.
 *
 *   capi consts                                 the header's codes and layouts
 *   capi settings                               netdam_settings_load, printed
 *   capi node-write PIN_DIR ADDR LEN SEED       a pattern into the node's memory (mmap)
 *   capi node-check PIN_DIR ADDR LEN SEED       the pattern is in the node's memory
 *   capi client NODE_IP RKEY ADDR LEN SEED      client ops against a node (another host)
 *   capi allreduce PIN_DIR RKEY SCRATCH_ADDR SCRATCH_LEN DIR MEMBERS CASE...
 *        CASE = NAME:DTYPE:OP:COUNT:MODE, MODE out (out of place), in (in
 *        place) or at (netdam_allreduce_at); input DIR/NAME.in.RANK, output
 *        DIR/NAME.out.RANK
 *   capi errors PIN_DIR RKEY PEER_IP SILENT_IP  one line per error case:
 *        NAME STATUS WIRE MESSAGE
 *   capi restart PIN_DIR RKEY SCRATCH_ADDR MEMBERS GENERATION  netdam_sync_restart
 *
 * Exit status 0 when every check held; otherwise a line on stderr says
 * which did not. */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netdam.h"

static int failed(const char *what) {
    fprintf(stderr, "%s failed: %s\n", what, netdam_last_error());
    exit(1);
}

#define CHECK(call) ((call) == NETDAM_OK ? (void)0 : (void)failed(#call))

static void expect(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "check failed: %s\n", what);
        exit(1);
    }
}

static uint64_t number(const char *s) { return strtoull(s, NULL, 0); }

static uint8_t pattern(uint64_t i, uint64_t seed) { return (uint8_t)(i * 131u + seed * 7u + (i >> 8)); }

static void fill(uint8_t *p, size_t len, uint64_t seed) {
    for (size_t i = 0; i < len; i++) p[i] = pattern(i, seed);
}

static int matches(const uint8_t *p, size_t len, uint64_t seed) {
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(i, seed)) return 0;
    return 1;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    expect(p != NULL, "malloc");
    return p;
}

static size_t width(netdam_dtype d) { return d == NETDAM_I64 || d == NETDAM_U64 ? 8 : 4; }

#define SHOW(name) printf("%s=%d\n", #name, (int)(name))
#define LAYOUT(type, field) printf("offsetof(%s,%s)=%zu\n", #type, #field, offsetof(type, field))

static int consts(void) {
    SHOW(NETDAM_API_VERSION);
    SHOW(NETDAM_OK); SHOW(NETDAM_ERR_ARG); SHOW(NETDAM_ERR_NODE); SHOW(NETDAM_ERR_TIMEOUT);
    SHOW(NETDAM_ERR_REFUSED); SHOW(NETDAM_ERR_GROUP); SHOW(NETDAM_ERR_RANGE); SHOW(NETDAM_ERR_IO);
    SHOW(NETDAM_ERR_INTERNAL);
    SHOW(NETDAM_I32); SHOW(NETDAM_U32); SHOW(NETDAM_I64); SHOW(NETDAM_U64); SHOW(NETDAM_F32);
    SHOW(NETDAM_SUM); SHOW(NETDAM_MIN); SHOW(NETDAM_MAX); SHOW(NETDAM_BAND); SHOW(NETDAM_BOR); SHOW(NETDAM_BXOR);
    printf("sizeof(netdam_client_config)=%zu\n", sizeof(netdam_client_config));
    LAYOUT(netdam_client_config, timeout_ms);
    LAYOUT(netdam_client_config, retries);
    LAYOUT(netdam_client_config, mtu);
    LAYOUT(netdam_client_config, window);
    LAYOUT(netdam_client_config, streams);
    LAYOUT(netdam_client_config, afxdp);
    printf("sizeof(netdam_group_config)=%zu\n", sizeof(netdam_group_config));
    LAYOUT(netdam_group_config, rkey);
    LAYOUT(netdam_group_config, scratch_addr);
    LAYOUT(netdam_group_config, scratch_len);
    LAYOUT(netdam_group_config, mtu);
    LAYOUT(netdam_group_config, timeout_ms);
    LAYOUT(netdam_group_config, retries);
    LAYOUT(netdam_group_config, patience_ms);
    printf("sizeof(netdam_settings)=%zu\n", sizeof(netdam_settings));
    LAYOUT(netdam_settings, group);
    LAYOUT(netdam_settings, min_bytes);
    printf("version=%s\n", netdam_version());
    for (int s = 0; s >= -8; s--) printf("strerror(%d)=%s\n", s, netdam_strerror(s));
    return 0;
}

static int settings(void) {
    netdam_settings s;
    int r = netdam_settings_load(&s);
    if (r != NETDAM_OK) {
        printf("status=%d error=%s\n", r, netdam_last_error());
        return 0;
    }
    printf("pin_dir=%s port=%u rkey=%" PRIu32 " scratch_addr=%" PRIu64 " scratch_len=%" PRIu64
           " mtu=%" PRIu32 " timeout_ms=%" PRIu32 " retries=%" PRIu32 " patience_ms=%" PRIu32 " min_bytes=%" PRIu64
           "\n",
           s.pin_dir, s.group.port, s.group.rkey, s.group.scratch_addr, s.group.scratch_len, s.group.mtu,
           s.group.timeout_ms, s.group.retries, s.group.patience_ms, s.min_bytes);
    return 0;
}

static netdam_node *open_node(const char *pin_dir, uint8_t **base, uint64_t *len) {
    netdam_node *node = NULL;
    CHECK(netdam_node_open(pin_dir, &node));
    CHECK(netdam_node_memory(node, base, len));
    return node;
}

static int node_write(char **argv) {
    uint8_t *base;
    uint64_t mem, addr = number(argv[1]), len = number(argv[2]);
    netdam_node *node = open_node(argv[0], &base, &mem);
    uint32_t gen = 99;
    CHECK(netdam_node_generation(node, 0x1234, &gen));
    expect(addr + len <= mem, "the range fits the memory");
    fill(base + addr, len, number(argv[3]));
    printf("ipv4=%" PRIu32 " mtu=%" PRIu32 " mem=%" PRIu64 " gen=%" PRIu32 "\n", netdam_node_ipv4(node),
           netdam_node_mtu(node), mem, gen);
    netdam_node_close(node);
    return 0;
}

static int node_check(char **argv) {
    uint8_t *base;
    uint64_t mem;
    netdam_node *node = open_node(argv[0], &base, &mem);
    expect(matches(base + number(argv[1]), number(argv[2]), number(argv[3])), "the client's WRITE is in the mmap");
    netdam_node_close(node);
    printf("node-check ok\n");
    return 0;
}

/* op(a, b) on one element, as the node's ALU does it (the test's values
 * keep f32 sums exact). */
static void combine(netdam_dtype d, netdam_op op, uint8_t *a, const uint8_t *b) {
    if (d == NETDAM_F32) {
        float x, y;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        x = op == NETDAM_SUM ? x + y : op == NETDAM_MIN ? (y < x ? y : x) : (y > x ? y : x);
        memcpy(a, &x, 4);
        return;
    }
    uint64_t x = 0, y = 0;
    size_t w = width(d);
    memcpy(&x, a, w);
    memcpy(&y, b, w);
    int is_signed = d == NETDAM_I32 || d == NETDAM_I64;
    int64_t sx = w == 4 ? (int64_t)(int32_t)x : (int64_t)x, sy = w == 4 ? (int64_t)(int32_t)y : (int64_t)y;
    int less = is_signed ? sy < sx : y < x; /* b < a */
    switch (op) {
    case NETDAM_SUM: x += y; break;
    case NETDAM_MIN: x = less ? y : x; break;
    case NETDAM_MAX: x = less ? x : y; break;
    case NETDAM_BAND: x &= y; break;
    case NETDAM_BOR: x |= y; break;
    case NETDAM_BXOR: x ^= y; break;
    }
    memcpy(a, &x, w);
}

/* Element i of vector `which`: integers of both signs; f32 small integers. */
static void element(netdam_dtype d, uint64_t i, int which, uint8_t *out) {
    uint64_t v = (i * 2654435761u + (uint64_t)which * 40503u) ^ ((uint64_t)which << 40);
    if (d == NETDAM_F32) {
        float f = (float)((int64_t)(v % 2001) - 1000);
        memcpy(out, &f, 4);
    } else {
        if (v & 1) v = ~v;
        memcpy(out, &v, width(d));
    }
}

static int client(char **argv) {
    netdam_client *c = NULL;
    /* Three stripes asked for: a transfer of 1,024 requests or more is split. */
    netdam_client_config cfg = {0, 200, 5, 0, 0, 3, 0};
    uint32_t rkey = (uint32_t)number(argv[1]);
    uint64_t addr = number(argv[2]), len = number(argv[3]), seed = number(argv[4]);
    CHECK(netdam_client_open(argv[0], &cfg, &c));
    uint64_t rtt = 0;
    CHECK(netdam_ping(c, &rtt));
    expect(rtt > 0, "a ping takes time");
    /* What the node's host wrote through the mmap is what a READ sees. */
    uint8_t *buf = xmalloc(len);
    CHECK(netdam_read(c, rkey, addr, buf, len));
    expect(matches(buf, len, seed), "READ sees what the node's host wrote through the mmap");
    /* WRITE then READ, many requests each; node-check looks at the mmap. */
    fill(buf, len, seed + 1);
    CHECK(netdam_write(c, rkey, addr + len, buf, len));
    memset(buf, 0, len);
    CHECK(netdam_read(c, rkey, addr + len, buf, len));
    expect(matches(buf, len, seed + 1), "READ returns what WRITE wrote");
    free(buf);
    /* Atomics. */
    uint64_t at = (addr + 2 * len + 7) / 8 * 8, hundred = 100, old = 0;
    CHECK(netdam_write(c, rkey, at, &hundred, 8));
    CHECK(netdam_fetch_add(c, rkey, at, 5, &old));
    expect(old == 100, "FETCH_ADD returns the value before");
    CHECK(netdam_cas(c, rkey, at, 105, 7, &old));
    expect(old == 105, "CAS that matches returns the value before");
    CHECK(netdam_cas(c, rkey, at, 105, 9, &old));
    expect(old == 7, "CAS that does not match returns the value");
    CHECK(netdam_swap(c, rkey, at, 42, &old));
    expect(old == 7, "SWAP returns the value before");
    CHECK(netdam_read(c, rkey, at, &old, 8));
    expect(old == 42, "the cell holds what SWAP wrote (CAS 105 -> 9 did not)");
    /* ACCUMULATE and REDUCE of 1000 elements (several requests). */
    const struct { netdam_dtype d; netdam_op op; } vec[] = {
        {NETDAM_U32, NETDAM_SUM}, {NETDAM_I64, NETDAM_MAX}, {NETDAM_F32, NETDAM_MIN},
        {NETDAM_I32, NETDAM_BXOR}, {NETDAM_F32, NETDAM_SUM}, {NETDAM_U64, NETDAM_BAND}};
    const uint64_t n = 1000, base = at + 64;
    for (size_t k = 0; k < sizeof vec / sizeof vec[0]; k++) {
        size_t w = width(vec[k].d), bytes = n * w;
        uint8_t *m = xmalloc(bytes), *v = xmalloc(bytes), *want = xmalloc(bytes), *got = xmalloc(bytes);
        for (uint64_t i = 0; i < n; i++) {
            element(vec[k].d, i, 1, m + i * w);
            element(vec[k].d, i, 2, v + i * w);
        }
        CHECK(netdam_write(c, rkey, base, m, bytes));
        CHECK(netdam_accumulate(c, rkey, base, vec[k].d, vec[k].op, v, n));
        memcpy(want, m, bytes);
        for (uint64_t i = 0; i < n; i++) combine(vec[k].d, vec[k].op, want + i * w, v + i * w);
        CHECK(netdam_read(c, rkey, base, got, bytes));
        expect(memcmp(got, want, bytes) == 0, "ACCUMULATE: mem = op(mem, values)");
        /* REDUCE: values = op(values, mem), mem unchanged. */
        memcpy(got, m, bytes);
        CHECK(netdam_reduce(c, rkey, base, vec[k].d, vec[k].op, got, n));
        for (uint64_t i = 0; i < n; i++) combine(vec[k].d, vec[k].op, m + i * w, want + i * w);
        expect(memcmp(got, m, bytes) == 0, "REDUCE: values = op(values, mem)");
        CHECK(netdam_read(c, rkey, base, got, bytes));
        expect(memcmp(got, want, bytes) == 0, "REDUCE leaves the memory as it was");
        free(m); free(v); free(want); free(got);
        printf("vector ok: dtype %d op %d\n", vec[k].d, vec[k].op);
    }
    netdam_client_close(c);
    printf("client ok\n");
    return 0;
}

static uint32_t ipv4(const char *s) {
    struct in_addr a;
    expect(inet_pton(AF_INET, s, &a) == 1, "an IPv4 address");
    return ntohl(a.s_addr);
}

/* Comma-separated addresses into host-order members; their count. */
static size_t members_of(char *list, uint32_t *out, size_t max) {
    size_t n = 0;
    for (char *t = strtok(list, ","); t && n < max; t = strtok(NULL, ",")) out[n++] = ipv4(t);
    return n;
}

static uint8_t *load(const char *path, size_t len) {
    FILE *f = fopen(path, "rb");
    expect(f != NULL, path);
    uint8_t *p = xmalloc(len);
    expect(fread(p, 1, len, f) == len, path);
    fclose(f);
    return p;
}

static void save(const char *path, const uint8_t *p, size_t len) {
    FILE *f = fopen(path, "wb");
    expect(f != NULL && fwrite(p, 1, len, f) == len && fclose(f) == 0, path);
}

static int allreduce(int argc, char **argv) {
    uint8_t *base;
    uint64_t mem;
    netdam_node *node = open_node(argv[0], &base, &mem);
    netdam_group_config cfg = {0};
    cfg.rkey = (uint32_t)number(argv[1]);
    cfg.scratch_addr = number(argv[2]);
    cfg.scratch_len = number(argv[3]);
    cfg.patience_ms = 20000;
    const char *dir = argv[4];
    uint32_t members[8];
    size_t n = members_of(argv[5], members, 8);
    netdam_group *g = NULL;
    CHECK(netdam_group_open(node, members, n, &cfg, &g));
    size_t rank = netdam_group_rank(g);
    printf("rank=%zu chunk_elems_i32=%" PRIu64 " chunk_elems_u64=%" PRIu64 "\n", rank,
           netdam_group_chunk_elems(g, NETDAM_I32), netdam_group_chunk_elems(g, NETDAM_U64));
    for (int k = 6; k < argc; k++) {
        char name[64], mode[8], path[512];
        int d, op;
        uint64_t count;
        expect(sscanf(argv[k], "%63[^:]:%d:%d:%" SCNu64 ":%7s", name, &d, &op, &count, mode) == 5, argv[k]);
        size_t bytes = count * width((netdam_dtype)d);
        snprintf(path, sizeof path, "%s/%s.in.%zu", dir, name, rank);
        uint8_t *in = load(path, bytes), *out = xmalloc(bytes);
        if (strcmp(mode, "out") == 0) {
            uint8_t *send = xmalloc(bytes);
            memcpy(send, in, bytes);
            memset(out, 0xA5, bytes);
            CHECK(netdam_allreduce(g, send, out, count, (netdam_dtype)d, (netdam_op)op));
            expect(memcmp(send, in, bytes) == 0, "out of place leaves sendbuf as it was");
            free(send);
        } else if (strcmp(mode, "in") == 0) {
            memcpy(out, in, bytes);
            CHECK(netdam_allreduce(g, k % 2 ? NULL : out, out, count, (netdam_dtype)d, (netdam_op)op));
        } else {
            /* In the node's memory, past the scratch area, no copy by the library. */
            uint64_t input = cfg.scratch_addr + cfg.scratch_len, output = input + (bytes + 4095) / 4096 * 4096;
            /* The ring's cells follow the output: about the vector's size again. */
            expect(output + 3 * bytes <= mem, "the vectors and the ring's cells fit the memory");
            memcpy(base + input, in, bytes);
            CHECK(netdam_allreduce_at(g, input, output, count, (netdam_dtype)d, (netdam_op)op));
            memcpy(out, base + output, bytes);
        }
        uint32_t gen = 0;
        CHECK(netdam_node_generation(node, cfg.rkey, &gen));
        printf("case %s generation %" PRIu32 "\n", name, gen);
        snprintf(path, sizeof path, "%s/%s.out.%zu", dir, name, rank);
        save(path, out, bytes);
        free(in);
        free(out);
    }
    netdam_group_close(g);
    netdam_node_close(node);
    printf("allreduce ok\n");
    return 0;
}

/* restart PIN_DIR RKEY SCRATCH_ADDR MEMBERS GENERATION: this node's sync
 * area restarted at GENERATION (the test runs it on every member before any
 * all-reduce: the barrier netdam.h asks for). */
static int restart(char **argv) {
    netdam_node *node = NULL;
    CHECK(netdam_node_open(argv[0], &node));
    netdam_group_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.rkey = (uint32_t)number(argv[1]);
    cfg.scratch_addr = number(argv[2]);
    CHECK(netdam_sync_restart(node, &cfg, (size_t)number(argv[3]), (uint32_t)number(argv[4])));
    netdam_node_close(node);
    printf("restart ok\n");
    return 0;
}

static void report(const char *name, int status) {
    printf("%s %d %d %s\n", name, status, netdam_last_wire_status(), status ? netdam_last_error() : "");
}

static int errors(char **argv) {
    const char *pin_dir = argv[0];
    uint32_t rkey = (uint32_t)number(argv[1]);
    char peer[32], silent[32];
    snprintf(peer, sizeof peer, "%s", argv[2]);
    snprintf(silent, sizeof silent, "%s", argv[3]);
    uint8_t *base;
    uint64_t mem;
    netdam_node *node = open_node(pin_dir, &base, &mem), *none = NULL;
    uint32_t me = netdam_node_ipv4(node), other = ipv4(peer), third = ipv4(silent);
    uint64_t old;
    int32_t v[4] = {1, 2, 3, 4};

    report("null_out", netdam_node_open(pin_dir, NULL));
    report("null_client", netdam_write(NULL, rkey, 0, v, sizeof v));
    report("null_group", netdam_allreduce(NULL, v, v, 4, NETDAM_I32, NETDAM_SUM));
    report("nothing_served", netdam_node_open("/sys/fs/bpf/netdam-capi-test-nothing-here", &none));
    report("empty_pin_dir", netdam_node_open("", &none));
    netdam_client *c = NULL;
    report("not_ipv4", netdam_client_open("198.18.0", NULL, &c));
    expect(c == NULL, "a failed open leaves its handle NULL");

    netdam_client_config quick = {0, 50, 1, 0, 0, 0, 0};
    if (netdam_client_open(peer, &quick, &c) != NETDAM_OK) failed("netdam_client_open");
    report("bad_key", netdam_read(c, 0xDEAD, 0, v, sizeof v));
    report("out_of_bounds", netdam_read(c, rkey, mem - 8, v, sizeof v));
    report("bitwise_f32_client", netdam_accumulate(c, rkey, 0, NETDAM_F32, NETDAM_BXOR, v, 4));
    report("unknown_dtype", netdam_accumulate(c, rkey, 0, (netdam_dtype)9, NETDAM_SUM, v, 4));
    report("unknown_op", netdam_reduce(c, rkey, 0, NETDAM_I32, (netdam_op)0, v, 4));
    report("null_old", netdam_swap(c, rkey, 0, 1, NULL));
    netdam_client_close(c);

    netdam_client *nobody = NULL;
    if (netdam_client_open(silent, &quick, &nobody) != NETDAM_OK) failed("netdam_client_open");
    uint64_t rtt;
    report("timeout", netdam_ping(nobody, &rtt));
    report("timeout_cas", netdam_cas(nobody, rkey, 0, 1, 2, &old));
    netdam_client_close(nobody);

    netdam_group *g = NULL;
    netdam_group_config cfg = {0};
    cfg.rkey = rkey;
    cfg.scratch_len = 64 * 1024;
    uint32_t without_me[2] = {other, third}, twice[3] = {me, other, other}, alone[1] = {me};
    uint32_t group[3] = {me, other, third};
    report("not_member", netdam_group_open(node, without_me, 2, &cfg, &g));
    report("duplicate", netdam_group_open(node, twice, 3, &cfg, &g));
    report("one_member", netdam_group_open(node, alone, 1, &cfg, &g));
    report("null_members", netdam_group_open(node, NULL, 3, &cfg, &g));
    report("null_config", netdam_group_open(node, group, 3, NULL, &g));
    cfg.scratch_len = mem + 64;
    report("scratch_outside", netdam_group_open(node, group, 3, &cfg, &g));
    cfg.scratch_len = 64 * 1024;
    cfg.scratch_addr = 4;
    report("scratch_misaligned", netdam_group_open(node, group, 3, &cfg, &g));
    /* Room for the sync area and three parts of 640 bytes: not even one
     * chunk's cell (16 + 346 i32 elements at MTU 1500). */
    cfg.scratch_addr = 0;
    cfg.scratch_len = 64 + 2 * 1024;
    if (netdam_group_open(node, group, 3, &cfg, &g) != NETDAM_OK) failed("netdam_group_open");
    size_t count = 100000;
    int32_t *big = xmalloc(count * 4);
    memset(big, 0, count * 4);
    report("scratch_too_small", netdam_allreduce(g, NULL, big, count, NETDAM_I32, NETDAM_SUM));
    report("bitwise_f32_allreduce", netdam_allreduce(g, NULL, big, count, NETDAM_F32, NETDAM_BAND));
    report("overlap", netdam_allreduce(g, big, big + 1, 1000, NETDAM_I32, NETDAM_SUM));
    report("at_outside", netdam_allreduce_at(g, mem - 64, 1 << 20, 1000, NETDAM_I32, NETDAM_SUM));
    report("null_recvbuf", netdam_allreduce(g, big, NULL, 1000, NETDAM_I32, NETDAM_SUM));
    report("nothing_to_do", netdam_allreduce(g, NULL, NULL, 0, NETDAM_I32, NETDAM_SUM));
    free(big);
    netdam_group_close(g);
    netdam_group_close(NULL);
    netdam_client_close(NULL);
    netdam_node_close(NULL);
    netdam_node_close(node);
    uint32_t none_ip = netdam_node_ipv4(NULL);
    printf("null_node_ipv4 %" PRIu32 " %s\n", none_ip, netdam_last_error());
    return 0;
}

int main(int argc, char **argv) {
    const char *cmd = argc > 1 ? argv[1] : "";
    if (strcmp(cmd, "consts") == 0) return consts();
    if (strcmp(cmd, "settings") == 0) return settings();
    if (strcmp(cmd, "node-write") == 0 && argc == 6) return node_write(argv + 2);
    if (strcmp(cmd, "node-check") == 0 && argc == 6) return node_check(argv + 2);
    if (strcmp(cmd, "client") == 0 && argc == 7) return client(argv + 2);
    if (strcmp(cmd, "allreduce") == 0 && argc >= 8) return allreduce(argc - 2, argv + 2);
    if (strcmp(cmd, "errors") == 0 && argc == 6) return errors(argv + 2);
    if (strcmp(cmd, "restart") == 0 && argc == 7) return restart(argv + 2);
    fprintf(stderr, "usage: see the top of tests/c/capi.c\n");
    return 2;
}
