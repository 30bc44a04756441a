// The MPI communicator on the shared collective suite (tests/support/collective_suite.hpp):
// blocking and non-blocking collectives on odd counts in every dtype, byte accounting.
#include "collective_suite.hpp"

namespace zt::test {
namespace {

INSTANTIATE_TEST_SUITE_P(Mpi, CollectiveSuite,
                         ::testing::Values(CommCase{"mpi", [] { return make_mpi_communicator(MPI_COMM_WORLD); },
                                                    [] { return std::make_unique<HostTestMemory>(); }}),
                         case_name);

}  // namespace
}  // namespace zt::test
