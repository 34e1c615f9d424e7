/* comm.c: whether a communicator runs on NetDAM, decided on its first
 * collective and cached on it as an attribute (freed with it).
 *
 * A communicator gets a group only if it holds every rank of
 * MPI_COMM_WORLD (in any order) and MPI_COMM_WORLD's ranks can form one
 * (each its own node, 2 to 8, the same scratch area). Every group of the
 * job then has the same members, and MPI's rule that overlapping
 * collectives run in the same order everywhere keeps them in lockstep on
 * the one scratch area of each node. A group of some of the nodes could
 * run while another group is still using a shared node's scratch area, and
 * its chunks could be reduced against the other group's input there.
 * Under MPI_THREAD_MULTIPLE two threads could run collectives on two
 * communicators at once, so then only MPI_COMM_WORLD itself has a group. */
#include <pthread.h>
#include <stdlib.h>

#include "netdam_mpi.h"

static int keyval = MPI_KEYVAL_INVALID;
/* Every state with an open group, for MPI_Finalize. */
static struct comm_state *open_states;
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
/* For communicators whose state could not be allocated: no group, never freed. */
static struct comm_state no_memory = {.reason = FB_GROUP};
/* Before MPI_Init, or when no rank has a node. */
static struct comm_state off = {.reason = FB_OFF};

static void close_group(struct comm_state *s) {
    pthread_mutex_lock(&open_lock);
    if (s->group) {
        netdam_group_close(s->group);
        s->group = NULL;
        if (s->prev) s->prev->next = s->next;
        else open_states = s->next;
        if (s->next) s->next->prev = s->prev;
    }
    pthread_mutex_unlock(&open_lock);
}

static int delete_state(MPI_Comm comm, int kv, void *value, void *extra) {
    (void)comm, (void)kv, (void)extra;
    struct comm_state *s = value;
    if (s == &no_memory) return MPI_SUCCESS;
    close_group(s);
    free(s);
    return MPI_SUCCESS;
}

int nd_comm_keyval_create(void) {
    return PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &keyval, NULL);
}

/* Why comm cannot have a group, from what every rank knows alike (no
 * communication), or -1: it may, if the group opens everywhere. */
static int local_reason(MPI_Comm comm, int size) {
    if ((int)nd_world.reason != -1) return nd_world.reason;
    int inter = 0;
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter || size != nd_world.size) return FB_SUBSET;
    if (nd_world.thread_multiple && comm != MPI_COMM_WORLD) return FB_THREADS;
    return -1;
}

/* Opens comm's group (members in comm's rank order); every rank learns
 * whether it opened everywhere. */
static void open_group(MPI_Comm comm, struct comm_state *s) {
    static int warned;
    uint32_t members[8];
    int ranks[8], world_ranks[8];
    int ok = 0;
    MPI_Group g, world;
    if (PMPI_Comm_group(comm, &g) == MPI_SUCCESS) {
        if (PMPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS) {
            for (int i = 0; i < s->size; i++) ranks[i] = i;
            if (PMPI_Group_translate_ranks(g, s->size, ranks, world, world_ranks) == MPI_SUCCESS) {
                for (int i = 0; i < s->size; i++) members[i] = nd_world.nodes[world_ranks[i]];
                ok = netdam_group_open(nd_world.node, members, (size_t)s->size, &nd_world.group, &s->group) ==
                     NETDAM_OK;
                if (!ok) {
                    nd_warn_once(&warned, "a NetDAM group did not open: %s; its communicator's calls go to MPI",
                                 netdam_last_error());
                    s->group = NULL;
                }
            }
            PMPI_Group_free(&world);
        }
        PMPI_Group_free(&g);
    }
    int everywhere = ok;
    if (PMPI_Allreduce(MPI_IN_PLACE, &everywhere, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) everywhere = 0;
    if (!everywhere) {
        if (s->group) netdam_group_close(s->group);
        s->group = NULL;
        s->reason = FB_GROUP;
        return;
    }
    pthread_mutex_lock(&open_lock);
    s->prev = NULL;
    s->next = open_states;
    if (open_states) open_states->prev = s;
    open_states = s;
    pthread_mutex_unlock(&open_lock);
}

struct comm_state *nd_comm_state(MPI_Comm comm) {
    if (!nd_world.active || comm == MPI_COMM_NULL) return &off;
    void *value;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &value, &found) == MPI_SUCCESS && found) return value;
    int size = 0, rank = 0;
    PMPI_Comm_size(comm, &size);
    PMPI_Comm_rank(comm, &rank);
    int reason = local_reason(comm, size);
    struct comm_state *s = calloc(1, sizeof *s);
    if (!s) {
        /* Still take part in the group's agreement if there is one, so
         * that the other ranks do not wait; they learn it failed. */
        if (reason == -1) {
            int everywhere = 0;
            PMPI_Allreduce(MPI_IN_PLACE, &everywhere, 1, MPI_INT, MPI_MIN, comm);
        }
        s = &no_memory;
    } else {
        s->rank = rank;
        s->size = size;
        s->reason = reason;
        if (reason == -1) open_group(comm, s);
    }
    PMPI_Comm_set_attr(comm, keyval, s);
    return s;
}

void nd_comm_finalize(void) {
    void *value;
    int found = 0;
    if (PMPI_Comm_get_attr(MPI_COMM_WORLD, keyval, &value, &found) == MPI_SUCCESS && found)
        PMPI_Comm_delete_attr(MPI_COMM_WORLD, keyval);
    /* Communicators the program did not free keep their state (PMPI_Finalize
     * may delete it later), but their groups close now, before the node. */
    pthread_mutex_lock(&open_lock);
    for (struct comm_state *s = open_states; s; s = s->next) {
        netdam_group_close(s->group);
        s->group = NULL;
    }
    open_states = NULL;
    pthread_mutex_unlock(&open_lock);
}
