/* check.c: the MPI program of tests/tests/mpi.rs, run with and without
 * LD_PRELOAD=libnetdam_mpi.so. It checks nothing itself where a reference
 * is needed: every rank writes what it sent and what it got to a file, and
 * the test holds the results to the ring's defined result
 * (netdam_common::chain::ring_result).
 *
 *   check sweep DIR SIZES   the collectives over SIZES (comma-separated
 *                           element counts), every record to DIR/rank-R.bin
 *   check mismatch          ranks' counts, types and operators that differ
 *                           (MPI_ERRORS_RETURN): one line per rank and case
 *   check stall             the last rank skips an all-reduce the others run
 *                           (no agreement before it): what they get
 *   check time COUNT ITERS  rank 0 prints the median, 10th and 90th
 *                           percentile of ITERS MPI_Allreduce of COUNT ints
 *                           (us; how docs/mpi.md measured the agreement)
 *
 * A record: u32 collective (1 MPI_Allreduce, 2 MPI_Reduce_scatter_block,
 * 3 MPI_Allgather), u32 type (1 int, 2 unsigned, 3 long, 4 unsigned long,
 * 5 float: NetDAM's codes; 6 double, 7 char), u32 op (NetDAM's codes 1 sum
 * to 6 bxor, 7 prod, 0 none), u32 in place, u32 color (0 MPI_COMM_WORLD, 1
 * its dup in reverse rank order, 2 and 3 its halves by rank parity), u32 rank
 * and u32 size in that communicator, u32 zero, u64 count (the call's count
 * argument), u64 input bytes, u64 output bytes, the input, the output. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ALLREDUCE = 1, REDUCE_SCATTER_BLOCK = 2, ALLGATHER = 3 };
enum { T_INT = 1, T_UNSIGNED, T_LONG, T_UNSIGNED_LONG, T_FLOAT, T_DOUBLE, T_CHAR, T_COUNT };
enum { O_NONE, O_SUM, O_MIN, O_MAX, O_BAND, O_BOR, O_BXOR, O_PROD, O_COUNT };

static MPI_Datatype mpi_type(int t) {
    const MPI_Datatype types[T_COUNT] = {MPI_DATATYPE_NULL, MPI_INT, MPI_UNSIGNED, MPI_LONG, MPI_UNSIGNED_LONG,
                                         MPI_FLOAT, MPI_DOUBLE, MPI_CHAR};
    return types[t];
}

static MPI_Op mpi_op(int o) {
    const MPI_Op ops[O_COUNT] = {MPI_OP_NULL, MPI_SUM, MPI_MIN, MPI_MAX, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_PROD};
    return ops[o];
}

static size_t width(int t) {
    const size_t widths[T_COUNT] = {0, 4, 4, 8, 8, 4, 8, 1};
    return widths[t];
}

static int die(const char *what) {
    fprintf(stderr, "check: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
}

static uint64_t rng_state;
static uint64_t next_u64(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A float of any sign and a wide range of exponents, now and then a zero of
 * either sign, an infinity, a NaN or a subnormal. */
static float random_float(void) {
    uint64_t r = next_u64();
    if (r % 32 == 0) {
        const uint32_t special[] = {0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0x00000123};
        uint32_t bits = special[(r >> 8) % 6];
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    return ldexpf((float)((int64_t)(r >> 32) % 1000003) / 1000003.0f, (int)((r >> 8) % 61) - 30);
}

/* Input of a case: any bits for the integer types (sums wrap), small whole
 * numbers for MPI_DOUBLE (its sums are exact in any order) and MPI_PROD. */
static void fill(void *buf, int t, int op, size_t count) {
    for (size_t i = 0; i < count; i++) {
        uint64_t r = next_u64();
        if (op == O_PROD) ((int32_t *)buf)[i] = (int32_t)(r % 7) - 3;
        else if (t == T_FLOAT) ((float *)buf)[i] = random_float();
        else if (t == T_DOUBLE) ((double *)buf)[i] = (double)((int64_t)(r % 2000001) - 1000000);
        else memcpy((uint8_t *)buf + i * width(t), &r, width(t));
    }
}

struct record {
    uint32_t collective, type, op, in_place, color, rank, size, zero;
    uint64_t count, in_bytes, out_bytes;
};

static FILE *out;

static void put(const struct record *h, const void *in, const void *result) {
    if (fwrite(h, sizeof *h, 1, out) != 1 || fwrite(in, 1, h->in_bytes, out) != h->in_bytes ||
        fwrite(result, 1, h->out_bytes, out) != h->out_bytes)
        die("writing a record");
}

/* One call: input filled, run in place or not, the record written. */
static void run(int collective, int t, int op, int in_place, int color, MPI_Comm comm, size_t count) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    size_t w = width(t);
    size_t in_elems = collective == REDUCE_SCATTER_BLOCK ? count * size : count;
    size_t out_elems = collective == ALLREDUCE ? count : collective == ALLGATHER ? count * size : count;
    /* In place, the receive buffer holds the input: all of it, or for
     * MPI_Allgather this rank's block of it. */
    size_t buf_elems = in_elems > out_elems ? in_elems : out_elems;
    uint8_t *in = malloc(in_elems * w), *buf = malloc(buf_elems * w);
    if (!in || !buf) die("no memory");
    fill(in, t, op, in_elems);
    memset(buf, 0xA5, buf_elems * w);
    const void *send = in;
    if (in_place) {
        send = MPI_IN_PLACE;
        memcpy(collective == ALLGATHER ? buf + rank * count * w : buf, in, in_elems * w);
    }
    int rc;
    if (collective == ALLREDUCE)
        rc = MPI_Allreduce(send, buf, (int)count, mpi_type(t), mpi_op(op), comm);
    else if (collective == REDUCE_SCATTER_BLOCK)
        rc = MPI_Reduce_scatter_block(send, buf, (int)count, mpi_type(t), mpi_op(op), comm);
    else
        rc = MPI_Allgather(send, (int)count, mpi_type(t), buf, (int)count, mpi_type(t), comm);
    if (rc != MPI_SUCCESS) die("a collective failed");
    struct record h = {(uint32_t)collective, (uint32_t)t, (uint32_t)op, (uint32_t)in_place, (uint32_t)color,
                       (uint32_t)rank, (uint32_t)size, 0, count, in_elems * w, out_elems * w};
    put(&h, in, buf);
    free(in);
    free(buf);
}

static void sweep(const char *dir, char *sizes_arg) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char path[4096];
    snprintf(path, sizeof path, "%s/rank-%d.bin", dir, rank);
    if (!(out = fopen(path, "wb"))) die("opening the record file");
    size_t sizes[16];
    int n_sizes = 0;
    for (char *s = strtok(sizes_arg, ","); s && n_sizes < 16; s = strtok(NULL, ","))
        sizes[n_sizes++] = strtoul(s, 0, 10);
    rng_state = 0x9E3779B97F4A7C15ull ^ (uint64_t)(rank + 1) * 0x100000001B3ull;
    MPI_Comm reversed, half;
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &reversed);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    for (int k = 0; k < n_sizes; k++) {
        size_t n = sizes[k];
        for (int in_place = 0; in_place < 2; in_place++) {
            /* Every type and operator NetDAM has, on MPI_COMM_WORLD. */
            for (int t = T_INT; t <= T_FLOAT; t++)
                for (int op = O_SUM; op <= O_BXOR; op++)
                    if (t != T_FLOAT || op <= O_MAX) run(ALLREDUCE, t, op, in_place, 0, MPI_COMM_WORLD, n);
            /* The group in another rank order. */
            run(ALLREDUCE, T_FLOAT, O_SUM, in_place, 1, reversed, n);
            run(ALLREDUCE, T_LONG, O_MAX, in_place, 1, reversed, n);
            run(REDUCE_SCATTER_BLOCK, T_INT, O_SUM, in_place, 0, MPI_COMM_WORLD, n);
            run(REDUCE_SCATTER_BLOCK, T_FLOAT, O_SUM, in_place, 0, MPI_COMM_WORLD, n);
            run(REDUCE_SCATTER_BLOCK, T_UNSIGNED_LONG, O_BXOR, in_place, 0, MPI_COMM_WORLD, n);
            run(ALLGATHER, T_INT, O_NONE, in_place, 0, MPI_COMM_WORLD, n);
            run(ALLGATHER, T_DOUBLE, O_NONE, in_place, 0, MPI_COMM_WORLD, n);
            run(ALLGATHER, T_CHAR, O_NONE, in_place, 0, MPI_COMM_WORLD, n);
            /* What NetDAM does not have: MPI's own. */
            run(ALLREDUCE, T_DOUBLE, O_SUM, in_place, 0, MPI_COMM_WORLD, n);
            run(ALLREDUCE, T_INT, O_PROD, in_place, 0, MPI_COMM_WORLD, n);
            /* Half of the ranks. */
            run(ALLREDUCE, T_INT, O_SUM, in_place, 2 + rank % 2, half, n);
            run(ALLREDUCE, T_UNSIGNED, O_BXOR, in_place, 2 + rank % 2, half, n);
        }
    }
    MPI_Comm_free(&half);
    MPI_Comm_free(&reversed);
    if (fclose(out) != 0) die("closing the record file");
}

static const char *class_name(int rc) {
    int cls = rc;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    switch (cls) {
    case MPI_SUCCESS: return "MPI_SUCCESS";
    case MPI_ERR_COUNT: return "MPI_ERR_COUNT";
    case MPI_ERR_TYPE: return "MPI_ERR_TYPE";
    case MPI_ERR_OP: return "MPI_ERR_OP";
    case MPI_ERR_OTHER: return "MPI_ERR_OTHER";
    default: return "another error";
    }
}

/* Rank 0's count, type or operator differs from the others'. */
static void mismatch(void) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int in[64], got[64];
    for (int i = 0; i < 64; i++) in[i] = rank + i;
    int rc = MPI_Allreduce(in, got, rank == 0 ? 33 : 32, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d: counts differ: %s\n", rank, class_name(rc));
    rc = MPI_Allreduce(in, got, 32, rank == 0 ? MPI_UNSIGNED : MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d: types differ: %s\n", rank, class_name(rc));
    rc = MPI_Allreduce(in, got, 32, MPI_INT, rank == 0 ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d: operators differ: %s\n", rank, class_name(rc));
    /* And the communicator still works, small calls (below NETDAM_MIN_BYTES) too. */
    for (int count = 2; count <= 64; count *= 32) {
        rc = MPI_Allreduce(in, got, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        int wrong = rc != MPI_SUCCESS;
        for (int i = 0; i < count; i++) wrong |= got[i] != size * (size - 1) / 2 + size * i;
        printf("rank %d: %d elements after them: %s\n", rank, count, wrong ? "wrong" : "right");
    }
    fflush(stdout);
}

/* The last rank never joins an all-reduce that the others run twice. */
static void stall(void) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int in[256] = {0}, got[256];
    if (rank != size - 1) {
        for (int k = 0; k < 2; k++) {
            int rc = MPI_Allreduce(in, got, 256, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            printf("rank %d: without the last rank: %s\n", rank, class_name(rc));
            fflush(stdout);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Times ITERS all-reduces of COUNT ints after 10 untimed ones. */
static void timing(int count, int iters) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int *in = calloc((size_t)count, sizeof *in), *got = calloc((size_t)count, sizeof *got);
    double *us = calloc((size_t)iters, sizeof *us);
    if (!in || !got || !us || count < 1 || iters < 10) die("time: COUNT >= 1, ITERS >= 10");
    for (int k = 0; k < 10; k++) MPI_Allreduce(in, got, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int k = 0; k < iters; k++) {
        double t0 = MPI_Wtime();
        MPI_Allreduce(in, got, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        us[k] = (MPI_Wtime() - t0) * 1e6;
    }
    qsort(us, (size_t)iters, sizeof *us, by_value);
    if (rank == 0)
        printf("%d ints: median %.1f us, p10 %.1f, p90 %.1f\n", count, us[iters / 2], us[iters / 10],
               us[iters * 9 / 10]);
    free(in);
    free(got);
    free(us);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc == 4 && strcmp(argv[1], "sweep") == 0) sweep(argv[2], argv[3]);
    else if (argc == 2 && strcmp(argv[1], "mismatch") == 0) mismatch();
    else if (argc == 2 && strcmp(argv[1], "stall") == 0) stall();
    else if (argc == 4 && strcmp(argv[1], "time") == 0) timing(atoi(argv[2]), atoi(argv[3]));
    else die("usage: check sweep DIR SIZES | check mismatch | check stall | check time COUNT ITERS");
    MPI_Finalize();
    return 0;
}
