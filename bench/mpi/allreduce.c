/* MPI_Allreduce timing for the all-reduce benchmark (bench/src/allreduce.rs):
 * int32 sum, sizes MIN..MAX bytes doubling, ITERS(size) timed calls after
 * ITERS/10 (at least one) untimed ones, every result checked. Rank 0 prints one JSON line per size:
 * {"bytes":B,"time_us":T,"wrong":W,"cpu_ns":C}, T the slowest rank's mean,
 * C the whole machine's busy CPU time per call during the timed calls
 * (/proc/stat, as netdam_lab::cpu::machine_busy_ns counts it). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Timed calls per size: more for small sizes, at least 3 (as the NetDAM side). */
static int iters_for(long bytes) {
    long n = (16L << 20) / bytes;
    return n < 3 ? 3 : (n > 200 ? 200 : (int)n);
}

/* Untimed calls before them, as bench/src/allreduce.rs makes them. */
static int warmups_for(long bytes) {
    int n = iters_for(bytes) / 10;
    return n < 1 ? 1 : n;
}

/* Busy ns of all CPUs so far: every /proc/stat field but idle and iowait. */
static double busy_ns(void) {
    unsigned long long f[8] = {0};
    FILE *fp = fopen("/proc/stat", "r");
    if (!fp) return 0;
    int n = fscanf(fp, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5],
                   &f[6], &f[7]);
    fclose(fp);
    if (n < 7) return 0;
    unsigned long long busy = f[0] + f[1] + f[2] + f[5] + f[6] + f[7];
    return (double)busy * 1e9 / (double)sysconf(_SC_CLK_TCK);
}

static int32_t input(int rank, long i) { return (int32_t)(i * 7 + rank * 1000003); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3) {
        if (rank == 0) fprintf(stderr, "usage: %s MIN_BYTES MAX_BYTES\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long min = atol(argv[1]), max = atol(argv[2]);
    int32_t *in = malloc(max), *out = malloc(max);
    if (!in || !out) MPI_Abort(MPI_COMM_WORLD, 1);
    for (long bytes = min; bytes <= max; bytes *= 2) {
        long count = bytes / 4;
        for (long i = 0; i < count; i++) in[i] = input(rank, i);
        int iters = iters_for(bytes);
        for (int k = 0; k < warmups_for(bytes); k++)
            MPI_Allreduce(in, out, (int)count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double cpu0 = busy_ns();
        double t0 = MPI_Wtime();
        for (int k = 0; k < iters; k++)
            MPI_Allreduce(in, out, (int)count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        double mean = (MPI_Wtime() - t0) / iters, slowest;
        double cpu = (busy_ns() - cpu0) / iters;
        long wrong = 0, all_wrong;
        for (long i = 0; i < count; i++) {
            int64_t want = 0;
            for (int r = 0; r < size; r++) want += input(r, i);
            if (out[i] != (int32_t)want) wrong++;
        }
        MPI_Reduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("{\"bytes\":%ld,\"time_us\":%.3f,\"wrong\":%ld,\"cpu_ns\":%.0f}\n", bytes, slowest * 1e6, all_wrong,
                   cpu);
            fflush(stdout);
        }
    }
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
