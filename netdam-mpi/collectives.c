/* collectives.c: MPI_Allreduce, MPI_Reduce_scatter_block and MPI_Allgather
 * through NetDAM's ring when every rank can, PMPI_* otherwise.
 *
 * On a communicator with a group, a call that NetDAM can take goes straight
 * to the ring: its count, type and operator travel in every chunk (the call
 * word of docs/PROTOCOL.md, version 2), and ranks whose calls differ all
 * fail with the ring's MISMATCH. Only then do the ranks agree (one small
 * PMPI_Allreduce, MPI_MAX over {count, -count, type, -type, op, -op,
 * eligible, -eligible}) to tell which differs: MPI_ERR_COUNT, MPI_ERR_TYPE
 * or MPI_ERR_OP through the communicator's error handler on every rank.
 * NETDAM_MPI_CHECK_ARGS=1 on any rank agrees before every call instead, as
 * a program needs whose ranks may pass a type or operator that NetDAM has
 * on some ranks only (docs/mpi.md). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "netdam_mpi.h"

_Static_assert(sizeof(int) == 4 && sizeof(unsigned) == 4 && sizeof(float) == 4, "MPI_INT, MPI_UNSIGNED and "
               "MPI_FLOAT map to NetDAM's i32, u32 and f32");

/* The NetDAM element type of an MPI datatype, or 0 when NetDAM has none. */
static netdam_dtype reduce_dtype(MPI_Datatype t) {
    if (t == MPI_INT || t == MPI_INT32_T) return NETDAM_I32;
    if (t == MPI_UNSIGNED || t == MPI_UINT32_T) return NETDAM_U32;
    if (t == MPI_FLOAT) return NETDAM_F32;
    if (t == MPI_INT64_T || t == MPI_LONG_LONG) return NETDAM_I64;
    if (t == MPI_UINT64_T || t == MPI_UNSIGNED_LONG_LONG) return NETDAM_U64;
#if LONG_MAX == INT64_MAX
    if (t == MPI_LONG) return NETDAM_I64;
    if (t == MPI_UNSIGNED_LONG) return NETDAM_U64;
#endif
    return 0;
}

static uint64_t dtype_width(netdam_dtype t) { return t == NETDAM_I64 || t == NETDAM_U64 ? 8 : 4; }

/* The NetDAM operator of an MPI operator, or 0. */
static netdam_op reduce_op(MPI_Op op) {
    if (op == MPI_SUM) return NETDAM_SUM;
    if (op == MPI_MIN) return NETDAM_MIN;
    if (op == MPI_MAX) return NETDAM_MAX;
    if (op == MPI_BAND) return NETDAM_BAND;
    if (op == MPI_BOR) return NETDAM_BOR;
    if (op == MPI_BXOR) return NETDAM_BXOR;
    return 0;
}

/* What the ranks compare of a datatype: its size and NetDAM type, so that
 * MPI_INT against MPI_FLOAT, or MPI_DOUBLE against MPI_INT, is told apart. */
static int64_t dtype_id(MPI_Datatype t) {
    int size = 0;
    if (t != MPI_DATATYPE_NULL) PMPI_Type_size(t, &size);
    return (int64_t)size << 8 | reduce_dtype(t);
}

/* What the ranks compare of an operator: NetDAM's, the other predefined
 * ones numbered after them, 0 for user-defined operators. */
static int64_t op_id(MPI_Op op) {
    const MPI_Op others[] = {MPI_PROD, MPI_LAND, MPI_LOR, MPI_LXOR, MPI_MAXLOC, MPI_MINLOC, MPI_REPLACE, MPI_NO_OP};
    if (reduce_op(op)) return reduce_op(op);
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (op == others[i]) return 16 + (int64_t)i;
    return 0;
}

/* A call's fallback reason when nothing keeps it from NetDAM. */
#define ELIGIBLE FB_COUNT_

/* One call as the ranks compare it. */
struct call {
    int64_t count, dtype, op;
    enum fallback why; /* what keeps it from NetDAM here, or ELIGIBLE */
};

/* Whether every rank runs this call on NetDAM (*use), or the MPI error
 * class of arguments that differ between ranks. */
static int agree(MPI_Comm comm, const struct call *c, int *use) {
    int64_t eligible = c->why == ELIGIBLE;
    int64_t v[8] = {c->count, -c->count, c->dtype, -c->dtype, c->op, -c->op, eligible, -eligible};
    int rc = PMPI_Allreduce(MPI_IN_PLACE, v, 8, MPI_INT64_T, MPI_MAX, comm);
    if (rc != MPI_SUCCESS) return rc;
    if (v[0] != -v[1]) return MPI_ERR_COUNT;
    if (v[2] != -v[3]) return MPI_ERR_TYPE;
    if (v[4] != -v[5]) return MPI_ERR_OP;
    *use = -v[7] == 1;
    return MPI_SUCCESS;
}

/* An error of the call, through comm's error handler (which may abort). */
static int fail(MPI_Comm comm, int err) {
    nd_count_error();
    PMPI_Comm_call_errhandler(comm, err);
    return err;
}

/* A NetDAM call of c that failed. When the ring found that the ranks' calls
 * differ (MISMATCH: every rank of the call fails so), the ranks agree to
 * tell which argument; otherwise MPI_ERR_OTHER with the library's reason. */
static int netdam_failed(MPI_Comm comm, const struct call *c) {
    if (netdam_last_wire_status() == NETDAM_WIRE_MISMATCH) {
        int use = 0;
        int err = agree(comm, c, &use);
        if (err == MPI_ERR_COUNT || err == MPI_ERR_TYPE || err == MPI_ERR_OP) return fail(comm, err);
    }
    static int warned;
    nd_warn_once(&warned, "a NetDAM all-reduce failed (MPI_ERR_OTHER returned; later failures are not printed): %s",
                 netdam_last_error());
    return fail(comm, MPI_ERR_OTHER);
}

/* Decides a call of comm: 1 to run it on NetDAM, 0 on PMPI (counted), or
 * an MPI error already through the error handler (*err). Without
 * check_args a rank decides alone: ranks with the same arguments decide
 * the same, and the ring catches the ones that differ. */
static int decide(MPI_Comm comm, const struct call *c, int *err) {
    int use = 0;
    if (!nd_world.check_args) {
        *err = MPI_SUCCESS;
        use = c->why == ELIGIBLE;
        if (!use) nd_count_fallback(c->why);
        return use;
    }
    *err = agree(comm, c, &use);
    if (*err != MPI_SUCCESS) {
        if (*err == MPI_ERR_COUNT || *err == MPI_ERR_TYPE || *err == MPI_ERR_OP) fail(comm, *err);
        return 0;
    }
    if (!use) nd_count_fallback(c->why != ELIGIBLE ? c->why : FB_NOT_EVERYWHERE);
    return use;
}

/* What keeps a reduction of count elements (bytes in all) from NetDAM. */
static enum fallback reduce_why(netdam_dtype t, netdam_op op, int64_t count, int64_t bytes) {
    if (!t) return FB_DTYPE;
    if (!op || (t == NETDAM_F32 && (op == NETDAM_BAND || op == NETDAM_BOR || op == NETDAM_BXOR))) return FB_OP;
    if (count <= 0 || (uint64_t)bytes < nd_world.min_bytes) return FB_SMALL;
    return ELIGIBLE;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    struct comm_state *s = nd_comm_state(comm);
    if (!s->group) {
        nd_count_fallback(s->reason);
        return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    }
    netdam_dtype t = reduce_dtype(datatype);
    netdam_op nop = reduce_op(op);
    struct call c = {count, dtype_id(datatype), op_id(op), reduce_why(t, nop, count, count * (int64_t)dtype_width(t))};
    /* MPI_IN_PLACE as recvbuf, or a send buffer that is the receive buffer: erroneous, PMPI says so. */
    if (c.why == ELIGIBLE && (recvbuf == MPI_IN_PLACE || sendbuf == recvbuf)) c.why = FB_BUFFER;
    int err;
    if (!decide(comm, &c, &err))
        return err != MPI_SUCCESS ? err : PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    if (netdam_allreduce(s->group, sendbuf == MPI_IN_PLACE ? NULL : sendbuf, recvbuf, (uint64_t)count, t, nop) !=
        NETDAM_OK)
        return netdam_failed(comm, &c);
    nd_count_offloaded(COLL_ALLREDUCE);
    return MPI_SUCCESS;
}

/* Through the all-reduce of the whole vector, then this rank's block copied
 * out: the ring has no reduce-scatter of its own (every member's output
 * gets every chunk), so this costs what MPI_Allreduce of size x recvcount does. */
int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op,
                             MPI_Comm comm) {
    struct comm_state *s = nd_comm_state(comm);
    if (!s->group) {
        nd_count_fallback(s->reason);
        return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
    }
    netdam_dtype t = reduce_dtype(datatype);
    netdam_op nop = reduce_op(op);
    int64_t total = (int64_t)recvcount * s->size;
    uint64_t block = (uint64_t)recvcount * dtype_width(t);
    struct call c = {recvcount, dtype_id(datatype), op_id(op),
                     reduce_why(t, nop, recvcount, total * (int64_t)dtype_width(t))};
    int in_place = sendbuf == MPI_IN_PLACE;
    if (c.why == ELIGIBLE && (recvbuf == MPI_IN_PLACE || sendbuf == recvbuf)) c.why = FB_BUFFER;
    /* Out of place, the whole result needs a buffer of its own. */
    void *whole = NULL;
    if (c.why == ELIGIBLE && !in_place && !(whole = malloc((size_t)total * dtype_width(t)))) c.why = FB_BUFFER;
    int err;
    if (!decide(comm, &c, &err)) {
        free(whole);
        return err != MPI_SUCCESS ? err : PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
    }
    uint8_t *out = in_place ? recvbuf : whole;
    int rc = netdam_allreduce(s->group, in_place ? NULL : sendbuf, out, (uint64_t)total, t, nop);
    if (rc == NETDAM_OK) memmove(recvbuf, out + (uint64_t)s->rank * block, block);
    free(whole);
    if (rc != NETDAM_OK) return netdam_failed(comm, &c);
    nd_count_offloaded(COLL_REDUCE_SCATTER_BLOCK);
    return MPI_SUCCESS;
}

/* Whether t is a predefined type whose elements are its bytes, one after
 * another, with no gap (so that a block of them can be ORed as words). */
static int plain_bytes(MPI_Datatype t) {
    int ni, na, nd, combiner, size;
    MPI_Aint lb, extent;
    if (t == MPI_DATATYPE_NULL || PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) != MPI_SUCCESS ||
        combiner != MPI_COMBINER_NAMED)
        return 0;
    return PMPI_Type_size(t, &size) == MPI_SUCCESS && PMPI_Type_get_extent(t, &lb, &extent) == MPI_SUCCESS &&
           lb == 0 && extent == size && size > 0;
}

/* As a BOR all-reduce of the whole receive buffer, zeroed but for this
 * rank's block: every byte of the result is one rank's, ORed with zeros. */
int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
    struct comm_state *s = nd_comm_state(comm);
    if (!s->group) {
        nd_count_fallback(s->reason);
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    }
    int in_place = sendbuf == MPI_IN_PLACE;
    int size = 0;
    if (recvtype != MPI_DATATYPE_NULL) PMPI_Type_size(recvtype, &size);
    uint64_t block = recvcount > 0 ? (uint64_t)recvcount * (uint64_t)size : 0;
    struct call c = {recvcount, dtype_id(recvtype), 0, ELIGIBLE};
    if (!plain_bytes(recvtype) || block % 4 != 0) c.why = FB_DTYPE;
    else if (block == 0 || block * (uint64_t)s->size < nd_world.min_bytes) c.why = FB_SMALL;
    else if (recvbuf == MPI_IN_PLACE || sendbuf == recvbuf ||
             (!in_place && (sendtype != recvtype || sendcount != recvcount)))
        c.why = FB_BUFFER;
    int err;
    if (!decide(comm, &c, &err))
        return err != MPI_SUCCESS ? err
                                  : PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    uint8_t *all = recvbuf, *mine = all + (uint64_t)s->rank * block;
    if (!in_place) memcpy(mine, sendbuf, block);
    memset(all, 0, mine - all);
    memset(mine + block, 0, (uint64_t)(s->size - s->rank - 1) * block);
    uint64_t word = block % 8 == 0 ? 8 : 4;
    if (netdam_allreduce(s->group, NULL, all, block * (uint64_t)s->size / word, word == 8 ? NETDAM_U64 : NETDAM_U32,
                         NETDAM_BOR) != NETDAM_OK)
        return netdam_failed(comm, &c);
    nd_count_offloaded(COLL_ALLGATHER);
    return MPI_SUCCESS;
}
