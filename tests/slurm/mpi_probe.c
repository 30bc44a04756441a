/* Where MPI thinks the ranks are (tests/slurm/test_slurm_2node.sh): each rank prints one line
 *   probe: rank R/W host H node-local L/S nodes N sum OK
 * S is the size of its MPI_COMM_TYPE_SHARED communicator (the ranks MPI places on its node),
 * N the number of such node communicators (ranks with node-local rank 0), and the sum is an
 * MPI_Allreduce over every rank, so the ranks really talk to each other. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 0, local = 0, local_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &local_size);
    int leader = local == 0, nodes = 0;
    MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    long mine = rank + 1, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    printf("probe: rank %d/%d host %s node-local %d/%d nodes %d sum %s\n", rank, world, host, local,
           local_size, nodes, sum == (long)world * (world + 1) / 2 ? "OK" : "WRONG");
    fflush(stdout);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
