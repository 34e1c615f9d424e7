/* netdam_mpi.h: what the modules of libnetdam_mpi.so (the PMPI interposition
 * library, docs/mpi.md) share. Nothing here is an interface for programs:
 * they keep calling MPI_* and the library sits between them and PMPI_*.
 *
 *   init.c         MPI_Init, MPI_Init_thread, MPI_Finalize: the node of this
 *                  rank, what every rank of MPI_COMM_WORLD has, the counters;
 *   comm.c         per communicator: whether it runs on NetDAM, its group;
 *   collectives.c  MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather.
 */
#ifndef NETDAM_MPI_H
#define NETDAM_MPI_H

#include <mpi.h>
#include <stdint.h>

#include "netdam.h"

/* Why a call was left to MPI (PMPI_*). The first group is about the
 * communicator (decided once for it), the second about the call. */
enum fallback {
    /* The communicator's. */
    FB_OFF,          /* no rank of MPI_COMM_WORLD has a node: the library is out of the way */
    FB_NO_NODE,      /* some rank has no node (none configured, or it would not open) */
    FB_SHARED_NODE,  /* two ranks share one node */
    FB_SIZE,         /* MPI_COMM_WORLD has fewer than 2 or more than 8 ranks */
    FB_SETTINGS,     /* the ranks' port, region or scratch area differ */
    FB_SUBSET,       /* not all of MPI_COMM_WORLD, or an intercommunicator */
    FB_THREADS,      /* MPI_THREAD_MULTIPLE: only MPI_COMM_WORLD itself runs on NetDAM */
    FB_GROUP,        /* the group did not open on some rank */
    /* The call's. */
    FB_DTYPE,        /* a datatype NetDAM does not reduce (or, for MPI_Allgather, not plain bytes) */
    FB_OP,           /* an operator NetDAM does not have (or bitwise on MPI_FLOAT) */
    FB_SMALL,        /* fewer bytes than min_bytes (or none) */
    FB_BUFFER,       /* buffers NetDAM cannot take (MPI_IN_PLACE as recvbuf, send and receive sides that
                      * differ), or no memory to stage a reduce-scatter's whole result */
    FB_NOT_EVERYWHERE, /* eligible here, not on some other rank */
    FB_COUNT_       /* how many reasons */
};

/* The collectives, for the counters. */
enum collective { COLL_ALLREDUCE, COLL_REDUCE_SCATTER_BLOCK, COLL_ALLGATHER, COLL_COUNT_ };

/* What every rank of MPI_COMM_WORLD agreed on at MPI_Init. */
struct world {
    int active;           /* some rank has a node: communicators are looked at */
    int rank, size;
    netdam_node *node;    /* this rank's node, or NULL */
    enum fallback reason; /* why MPI_COMM_WORLD's ranks cannot form groups; FB_OFF... or -1: they can */
    uint32_t *nodes;      /* each world rank's node IPv4 (host order), 0 for none */
    netdam_group_config group; /* the same at every rank, with the lowest MTU of all */
    uint64_t min_bytes;   /* the highest of every rank's */
    int check_args;       /* some rank set NETDAM_MPI_CHECK_ARGS=1: the ranks agree before every call */
    int thread_multiple;  /* some rank runs MPI_THREAD_MULTIPLE */
    int verbose;          /* NETDAM_MPI_VERBOSE=1 */
};

extern struct world nd_world;

/* A communicator as the library sees it: its group, or why it has none. */
struct comm_state {
    netdam_group *group;  /* NULL: every call goes to PMPI */
    enum fallback reason; /* when group is NULL */
    int rank, size;
    struct comm_state *prev, *next; /* every state with a group, closed at MPI_Finalize */
};

/* The state of comm, set up on first use (collective over comm, so called
 * from collectives only, where every rank reaches it together). */
struct comm_state *nd_comm_state(MPI_Comm comm);
/* Creates the attribute keyval the states hang on (init.c, after PMPI_Init). */
int nd_comm_keyval_create(void);
/* Deletes MPI_COMM_WORLD's state, closes every group still open, frees the
 * keyval: before the node closes and PMPI_Finalize. */
void nd_comm_finalize(void);

/* Counters for NETDAM_MPI_VERBOSE (thread-safe). */
void nd_count_offloaded(enum collective c);
void nd_count_fallback(enum fallback why);
void nd_count_error(void);

/* "netdam-mpi: rank R: " then the message, on stderr, the first time only
 * for each flag (the flag is the caller's static). */
void nd_warn_once(int *flag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same, always. */
void nd_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* NETDAM_MPI_H */
