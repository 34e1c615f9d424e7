/* init.c: MPI_Init, MPI_Init_thread and MPI_Finalize of libnetdam_mpi.so.
 *
 * After PMPI_Init every rank loads the NetDAM settings (netdam_settings_load:
 * $NETDAM_CONFIG, NETDAM_* variables), opens its node if a pin directory is
 * set, and tells every other rank what it has (one PMPI_Allgather on
 * MPI_COMM_WORLD). From that, every rank decides the same: whether the
 * library looks at communicators at all, and whether MPI_COMM_WORLD's ranks
 * can form NetDAM groups. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netdam_mpi.h"

struct world nd_world = {.reason = FB_OFF};

/* What each rank tells the others at MPI_Init (u64 each). */
enum { I_IPV4, I_PORT, I_RKEY, I_SCRATCH_ADDR, I_SCRATCH_LEN, I_MIN_BYTES, I_MTU, I_FLAGS, I_LEN };
enum { FLAG_CHECK_ARGS = 1, FLAG_THREAD_MULTIPLE = 2 };

static const char *const FALLBACK_NAMES[FB_COUNT_] = {
    [FB_OFF] = "off",       [FB_NO_NODE] = "no-node", [FB_SHARED_NODE] = "shared-node",
    [FB_SIZE] = "size",     [FB_SETTINGS] = "settings", [FB_SUBSET] = "subset",
    [FB_THREADS] = "threads", [FB_GROUP] = "group",   [FB_DTYPE] = "dtype",
    [FB_OP] = "op",         [FB_SMALL] = "small",     [FB_BUFFER] = "buffer",
    [FB_NOT_EVERYWHERE] = "not-everywhere",
};
static const char *const COLLECTIVE_NAMES[COLL_COUNT_] = {
    [COLL_ALLREDUCE] = "allreduce",
    [COLL_REDUCE_SCATTER_BLOCK] = "reduce_scatter_block",
    [COLL_ALLGATHER] = "allgather",
};

static unsigned long offloaded[COLL_COUNT_], fallbacks[FB_COUNT_], errors;

void nd_count_offloaded(enum collective c) { __atomic_fetch_add(&offloaded[c], 1, __ATOMIC_RELAXED); }
void nd_count_fallback(enum fallback why) { __atomic_fetch_add(&fallbacks[why], 1, __ATOMIC_RELAXED); }
void nd_count_error(void) { __atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED); }

static void vwarn(const char *fmt, va_list ap) {
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    /* One write per line, so that ranks' lines do not interleave. */
    fprintf(stderr, "netdam-mpi: rank %d: %s\n", nd_world.rank, line);
}

void nd_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
}

void nd_warn_once(int *flag, const char *fmt, ...) {
    if (__atomic_exchange_n(flag, 1, __ATOMIC_RELAXED)) return;
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
}

static int env_flag(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "1") == 0;
}

static const char *ipv4_str(uint32_t ip, char buf[16]) {
    snprintf(buf, 16, "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255);
    return buf;
}

/* This rank's settings and node into mine[]; s gets the settings. */
static void open_node(netdam_settings *s, uint64_t mine[I_LEN]) {
    if (netdam_settings_load(s) != NETDAM_OK) {
        nd_warn("NetDAM settings: %s; this rank has no node, every call goes to MPI", netdam_last_error());
        return;
    }
    if (s->pin_dir[0] == '\0') return; /* no node configured: out of the way */
    if (netdam_node_open(s->pin_dir, &nd_world.node) != NETDAM_OK) {
        nd_warn("the NetDAM node at %s did not open: %s; every call goes to MPI", s->pin_dir, netdam_last_error());
        nd_world.node = NULL;
        return;
    }
    mine[I_IPV4] = netdam_node_ipv4(nd_world.node);
    mine[I_PORT] = s->group.port;
    mine[I_RKEY] = s->group.rkey;
    mine[I_SCRATCH_ADDR] = s->group.scratch_addr;
    mine[I_SCRATCH_LEN] = s->group.scratch_len;
    mine[I_MIN_BYTES] = s->min_bytes;
    mine[I_MTU] = s->group.mtu ? s->group.mtu : netdam_node_mtu(nd_world.node);
}

/* Why MPI_COMM_WORLD's ranks cannot form groups, in words into why[], or -1. */
static int world_reason(const uint64_t *all, int n, char *why, size_t len) {
    for (int r = 0; r < n; r++) {
        if (all[r * I_LEN + I_IPV4] == 0) {
            snprintf(why, len, "rank %d has no node", r);
            return FB_NO_NODE;
        }
    }
    if (n < 2 || n > 8) {
        snprintf(why, len, "%d ranks: a NetDAM ring has 2 to 8 members", n);
        return FB_SIZE;
    }
    for (int r = 0; r < n; r++) {
        for (int q = 0; q < r; q++) {
            if (all[r * I_LEN + I_IPV4] == all[q * I_LEN + I_IPV4]) {
                char ip[16];
                snprintf(why, len, "ranks %d and %d share node %s", q, r, ipv4_str(all[r * I_LEN + I_IPV4], ip));
                return FB_SHARED_NODE;
            }
        }
        for (int i = I_PORT; i <= I_SCRATCH_LEN; i++) {
            if (all[r * I_LEN + i] != all[i]) {
                snprintf(why, len, "rank %d's port, rkey or scratch area differs from rank 0's", r);
                return FB_SETTINGS;
            }
        }
    }
    return -1;
}

/* Starts the job's groups from one generation on every node. A job that
 * failed mid-collective (a rank that never came, a killed job) leaves its
 * nodes' generations and sync areas apart, and a later job's members would
 * pick different generations: at best every ring times out, at worst a
 * member's chunks run at a generation another node was left at, against
 * that node's old input. So G, the highest readiness generation of any
 * node, restarts every node's sync area (netdam_sync_restart), and a
 * second agreement that every rank did is the barrier netdam.h asks for.
 * Collective over MPI_COMM_WORLD; 0 if a rank could not (or was not
 * `ready`), and then no group runs. */
static int align_generations(int ready) {
    uint32_t generation = 0;
    int ok = ready && netdam_node_generation(nd_world.node, nd_world.group.rkey, &generation) == NETDAM_OK;
    if (ready && !ok) nd_warn("the node's generation: %s", netdam_last_error());
    uint64_t v[2] = {generation, !ok};
    if (PMPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS || v[1]) return 0;
    ok = netdam_sync_restart(nd_world.node, &nd_world.group, (size_t)nd_world.size, (uint32_t)v[0]) == NETDAM_OK;
    if (!ok) nd_warn("restarting the node's sync area: %s", netdam_last_error());
    v[0] = !ok;
    return PMPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD) == MPI_SUCCESS && !v[0];
}

static void world_setup(void) {
    PMPI_Comm_rank(MPI_COMM_WORLD, &nd_world.rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &nd_world.size);
    nd_world.verbose = env_flag("NETDAM_MPI_VERBOSE");
    int provided = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&provided);
    netdam_settings s;
    memset(&s, 0, sizeof s);
    uint64_t mine[I_LEN] = {0};
    open_node(&s, mine);
    mine[I_FLAGS] = (env_flag("NETDAM_MPI_CHECK_ARGS") ? FLAG_CHECK_ARGS : 0) |
                    (provided == MPI_THREAD_MULTIPLE ? FLAG_THREAD_MULTIPLE : 0);
    int n = nd_world.size;
    uint64_t *all = calloc((size_t)n * I_LEN, sizeof *all);
    nd_world.nodes = calloc((size_t)n, sizeof *nd_world.nodes);
    if (!all || !nd_world.nodes) {
        /* Every rank must take part in the exchange; a few bytes a rank. */
        nd_warn("no memory for %d ranks' NetDAM nodes", n);
        PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
    }
    nd_world.active = 0;
    if (PMPI_Allgather(mine, I_LEN, MPI_UINT64_T, all, I_LEN, MPI_UINT64_T, MPI_COMM_WORLD) != MPI_SUCCESS) {
        nd_warn("exchanging the ranks' NetDAM nodes failed: every call goes to MPI");
        memset(all, 0, (size_t)n * I_LEN * sizeof *all);
    }
    nd_world.min_bytes = 0;
    nd_world.check_args = 0;
    nd_world.group = s.group;
    nd_world.group.mtu = 0;
    for (int r = 0; r < n; r++) {
        const uint64_t *in = all + (size_t)r * I_LEN;
        nd_world.nodes[r] = (uint32_t)in[I_IPV4];
        nd_world.active |= in[I_IPV4] != 0;
        if (in[I_MIN_BYTES] > nd_world.min_bytes) nd_world.min_bytes = in[I_MIN_BYTES];
        if (in[I_IPV4] && (nd_world.group.mtu == 0 || in[I_MTU] < nd_world.group.mtu))
            nd_world.group.mtu = (uint32_t)in[I_MTU];
        nd_world.check_args |= (in[I_FLAGS] & FLAG_CHECK_ARGS) != 0;
        nd_world.thread_multiple |= (in[I_FLAGS] & FLAG_THREAD_MULTIPLE) != 0;
    }
    char why[160] = "no rank has a NetDAM node";
    nd_world.reason = nd_world.active ? world_reason(all, n, why, sizeof why) : FB_OFF;
    int keyval = !nd_world.active || nd_comm_keyval_create() == MPI_SUCCESS;
    if (!keyval) nd_warn("no attribute keyval for communicators: every call goes to MPI");
    /* Every rank of a world that can form groups takes part, whatever it has. */
    if ((int)nd_world.reason == -1 && !align_generations(keyval)) {
        snprintf(why, sizeof why, "a rank could not align its node's generation (or has no keyval)");
        nd_world.reason = FB_GROUP;
    }
    if (!keyval) {
        nd_world.active = 0;
        nd_world.reason = FB_OFF;
    }
    /* MPI_COMM_WORLD's group now, while every rank is here: opening it on
     * its first collective would be a collective inside that one. */
    if ((int)nd_world.reason == -1 && !nd_comm_state(MPI_COMM_WORLD)->group) {
        snprintf(why, sizeof why, "MPI_COMM_WORLD's group did not open on every rank");
        nd_world.reason = FB_GROUP;
    }
    if (nd_world.verbose && nd_world.rank == 0) {
        if ((int)nd_world.reason == -1)
            nd_warn("NetDAM for MPI_COMM_WORLD's %d ranks (MTU %u, min_bytes %llu%s)", n, nd_world.group.mtu,
                    (unsigned long long)nd_world.min_bytes, nd_world.check_args ? ", arguments agreed before every call" : "");
        else
            nd_warn("every call goes to MPI: %s", why);
    }
    if ((int)nd_world.reason != -1 && nd_world.node) {
        netdam_node_close(nd_world.node);
        nd_world.node = NULL;
    }
    free(all);
}

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) world_setup();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) world_setup();
    return rc;
}

static void print_counters(void) {
    char line[1024];
    unsigned long total = 0, fell = 0;
    for (int c = 0; c < COLL_COUNT_; c++) total += offloaded[c];
    int at = snprintf(line, sizeof line, "offloaded %lu (", total);
    for (int c = 0; c < COLL_COUNT_; c++)
        at += snprintf(line + at, sizeof line - at, "%s%s %lu", c ? ", " : "", COLLECTIVE_NAMES[c], offloaded[c]);
    for (int f = 0; f < FB_COUNT_; f++) fell += fallbacks[f];
    at += snprintf(line + at, sizeof line - at, "), fell back %lu (", fell);
    const char *sep = "";
    for (int f = 0; f < FB_COUNT_; f++) {
        if (!fallbacks[f]) continue;
        at += snprintf(line + at, sizeof line - at, "%s%s %lu", sep, FALLBACK_NAMES[f], fallbacks[f]);
        sep = ", ";
    }
    snprintf(line + at, sizeof line - at, "), errors %lu", errors);
    nd_warn("%s", line);
}

int MPI_Finalize(void) {
    if (nd_world.active) nd_comm_finalize();
    if (nd_world.verbose) print_counters();
    if (nd_world.node) netdam_node_close(nd_world.node);
    nd_world.node = NULL;
    nd_world.active = 0;
    free(nd_world.nodes);
    nd_world.nodes = NULL;
    return PMPI_Finalize();
}
