/* netdam.h: the C API of NetDAM-XDP (libnetdam.so).
 *
 * Three objects, each an opaque handle owned by the caller:
 *   netdam_node    the NetDAM node served on this host (`netdam serve`),
 *                  reached through its pinned maps: its memory, mapped;
 *   netdam_client  a client of one node, local or remote (WRITE, READ,
 *                  atomics, vector ops: PROTOCOL.md section 3);
 *   netdam_group   the members of an in-network ring all-reduce
 *                  (PROTOCOL.md section 6), one of which is this host's node.
 *
 * Every function returns a netdam_status: NETDAM_OK (0) or a negative code.
 * After a failure, netdam_last_error() says what failed and why, in words,
 * for the calling thread. A handle may be used by one thread at a time.
 * Nothing in the library writes to stdout or stderr unless RUST_LOG asks.
 */
#ifndef NETDAM_H
#define NETDAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raised when a function's signature or meaning changes. */
#define NETDAM_API_VERSION 1

typedef enum netdam_status {
    NETDAM_OK = 0,
    /* An argument is wrong: a null pointer, an unknown dtype or op, a
     * bitwise op on f32, an address that is not an IPv4 address. */
    NETDAM_ERR_ARG = -1,
    /* The local node: nothing pinned at the directory (is `netdam serve`
     * running?), or its maps could not be opened (a missing privilege). */
    NETDAM_ERR_NODE = -2,
    /* No answer after every retry. */
    NETDAM_ERR_TIMEOUT = -3,
    /* A node answered with a status other than OK: netdam_last_wire_status()
     * has it (PROTOCOL.md section 5). */
    NETDAM_ERR_REFUSED = -4,
    /* The group: fewer than 2 or more than 8 members, a member twice, or
     * this host's node not among them. */
    NETDAM_ERR_GROUP = -5,
    /* An address range leaves the node's memory or the group's scratch
     * area, or the scratch area is too small for one piece. */
    NETDAM_ERR_RANGE = -6,
    /* A system call failed (the message names it). */
    NETDAM_ERR_IO = -7,
    /* A bug in the library, caught at the API boundary instead of
     * unwinding into C. */
    NETDAM_ERR_INTERNAL = -8
} netdam_status;

/* Element types, with their wire codes (PROTOCOL.md section 4). */
typedef enum netdam_dtype {
    NETDAM_I32 = 1,
    NETDAM_U32 = 2,
    NETDAM_I64 = 3,
    NETDAM_U64 = 4,
    NETDAM_F32 = 5
} netdam_dtype;

/* Operators, with their wire codes; AND, OR and XOR not on f32. */
typedef enum netdam_op {
    NETDAM_SUM = 1,
    NETDAM_MIN = 2,
    NETDAM_MAX = 3,
    NETDAM_BAND = 4,
    NETDAM_BOR = 5,
    NETDAM_BXOR = 6
} netdam_op;

typedef struct netdam_node netdam_node;
typedef struct netdam_client netdam_client;
typedef struct netdam_group netdam_group;

/* ---- Errors ---------------------------------------------------------- */

/* What the last failed call on this thread said; "" if none. Valid until
 * the next call into the library on this thread. */
const char *netdam_last_error(void);
/* The wire status of the last NETDAM_ERR_REFUSED on this thread, else 0. */
int netdam_last_wire_status(void);
/* The wire status of an all-reduce whose members passed different counts,
 * dtypes or ops (docs/PROTOCOL.md, version 2): every member's call fails
 * NETDAM_ERR_REFUSED with it. */
#define NETDAM_WIRE_MISMATCH 16
/* A static description of a netdam_status. */
const char *netdam_strerror(int status);
/* The library's version, e.g. "0.1.0". */
const char *netdam_version(void);

/* ---- The node on this host ------------------------------------------- */

/* Opens the node pinned in pin_dir; NULL: /sys/fs/bpf/netdam/IFACE with
 * IFACE from $NETDAM_IFACE, or the directory in $NETDAM_PIN_DIR. */
int netdam_node_open(const char *pin_dir, netdam_node **out);
void netdam_node_close(netdam_node *node);
/* The node's IPv4 address, in host byte order. */
uint32_t netdam_node_ipv4(const netdam_node *node);
/* The node's IP MTU. */
uint32_t netdam_node_mtu(const netdam_node *node);
/* The node's memory, mapped into this process (no copy through the
 * kernel): *base is valid until netdam_node_close. */
int netdam_node_memory(netdam_node *node, uint8_t **base, uint64_t *len);
/* The readiness generation of region rkey (PROTOCOL.md section 6). */
int netdam_node_generation(netdam_node *node, uint32_t rkey, uint32_t *generation);

/* ---- A client of one node -------------------------------------------- */

typedef struct netdam_client_config {
    uint16_t port;        /* the node's UDP port P; 0: 4793 */
    uint32_t timeout_ms;  /* per attempt; 0: 200 */
    uint32_t retries;     /* resends of an idempotent request; 0: 10 */
    uint32_t mtu;         /* IP MTU of the path; 0: 1500 */
    uint32_t window;      /* requests in flight per transfer, shared out among its stripes; 0: 192 */
    uint32_t streams;     /* threads a large WRITE or READ is striped over; 0: one per CPU (+1 with afxdp), at most 4 */
    uint32_t afxdp;       /* nonzero: answers off the kernel's UDP stack (docs/client.md; root, an interface without XDP) */
} netdam_client_config;

/* node_ip: dotted IPv4, e.g. "198.18.0.2"; config NULL: every default. */
int netdam_client_open(const char *node_ip, const netdam_client_config *config, netdam_client **out);
void netdam_client_close(netdam_client *client);
int netdam_ping(netdam_client *client, uint64_t *rtt_ns);
/* Any length: split into requests that fit the MTU, windowed, resent. */
int netdam_write(netdam_client *client, uint32_t rkey, uint64_t addr, const void *data, size_t len);
int netdam_read(netdam_client *client, uint32_t rkey, uint64_t addr, void *out, size_t len);
/* 8-byte atomics at an 8-aligned addr; *old is the value before. */
int netdam_fetch_add(netdam_client *client, uint32_t rkey, uint64_t addr, uint64_t add, uint64_t *old);
int netdam_cas(netdam_client *client, uint32_t rkey, uint64_t addr, uint64_t expected, uint64_t desired,
               uint64_t *old);
int netdam_swap(netdam_client *client, uint32_t rkey, uint64_t addr, uint64_t desired, uint64_t *old);
/* mem[addr+i] = op(mem[addr+i], values[i]) for count elements of dtype. */
int netdam_accumulate(netdam_client *client, uint32_t rkey, uint64_t addr, netdam_dtype dtype, netdam_op op,
                      const void *values, uint64_t count);
/* values[i] = op(values[i], mem[addr+i]): the node's memory is not changed. */
int netdam_reduce(netdam_client *client, uint32_t rkey, uint64_t addr, netdam_dtype dtype, netdam_op op,
                  void *values, uint64_t count);

/* ---- The collective --------------------------------------------------- */

typedef struct netdam_group_config {
    uint16_t port;         /* the members' UDP port P; 0: 4793 */
    uint32_t rkey;         /* region holding the scratch area at every member (rwa) */
    uint64_t scratch_addr; /* the scratch area's first byte, the same at every member */
    uint64_t scratch_len;  /* its bytes: the sync area, then an input and an output half */
    uint32_t mtu;          /* IP MTU of the group's paths; 0: the node's */
    uint32_t timeout_ms;   /* per chunk attempt; 0: 200 */
    uint32_t retries;      /* resends of a chunk; 0: 10 */
    uint32_t patience_ms;  /* waiting for other members; 0: 30000 */
} netdam_group_config;

/* members: n IPv4 addresses in host byte order, in group (rank) order, one
 * of them node's. The group keeps using node: close the group first. */
int netdam_group_open(netdam_node *node, const uint32_t *members, size_t n, const netdam_group_config *config,
                      netdam_group **out);
void netdam_group_close(netdam_group *group);
/* This node's rank in the group. */
size_t netdam_group_rank(const netdam_group *group);
/* Elements per ring chunk for dtype (PROTOCOL.md section 6: E). */
uint64_t netdam_group_chunk_elems(const netdam_group *group, netdam_dtype dtype);

/* The all-reduce of count elements: every member calls it with the same
 * count, dtype and op. sendbuf is copied into the scratch area, the ring
 * runs, the result is copied to recvbuf. sendbuf NULL or equal to recvbuf:
 * in place. Vectors larger than the scratch area run as several rings whose
 * pieces are whole multiples of members x chunk elements, so the result is
 * bit-exact with one ring over the whole vector (the f32 order of section 6). */
int netdam_allreduce(netdam_group *group, const void *sendbuf, void *recvbuf, uint64_t count, netdam_dtype dtype,
                     netdam_op op);
/* The same on vectors already in the node's memory (no copy): input and
 * output at the same addresses of every member, in region rkey of the
 * config, the sync area at scratch_addr. The ring's cells (a completion cell
 * and room for a held partial per chunk: about the vector's size, see
 * docs/collective.md) follow the output, 8-aligned, and must fit there. */
int netdam_allreduce_at(netdam_group *group, uint64_t input_addr, uint64_t output_addr, uint64_t count,
                        netdam_dtype dtype, netdam_op op);

/* Restarts the rounds of a group of `members` on this node at generation
 * + 1: every slot and the raised cell of the sync area at the config's
 * scratch_addr hold `generation`. For a new job on nodes an earlier one may
 * have left mid-collective (their generations and sync areas apart):
 * every member agrees on G, at least the highest netdam_node_generation of
 * the config's rkey over the members' nodes, calls this with G, and starts
 * no all-reduce before all have (a barrier). */
int netdam_sync_restart(netdam_node *node, const netdam_group_config *config, size_t members, uint32_t generation);

/* ---- Settings from the environment (what libnetdam_mpi reads) --------- */

typedef struct netdam_settings {
    char pin_dir[256];            /* the node's pin directory; "" when none is set */
    netdam_group_config group;    /* the collective's settings */
    uint64_t min_bytes;           /* smaller calls are left to MPI */
} netdam_settings;

/* Defaults, then the TOML file named by $NETDAM_CONFIG (if set), then the
 * variables NETDAM_PIN_DIR, NETDAM_IFACE, NETDAM_RKEY, NETDAM_SCRATCH_ADDR,
 * NETDAM_SCRATCH_LEN, NETDAM_PORT, NETDAM_MTU, NETDAM_TIMEOUT_MS,
 * NETDAM_RETRIES, NETDAM_PATIENCE_MS, NETDAM_MIN_BYTES. A bad value is
 * NETDAM_ERR_ARG naming the variable or key and what is right. */
int netdam_settings_load(netdam_settings *out);

#ifdef __cplusplus
}
#endif

#endif /* NETDAM_H */
