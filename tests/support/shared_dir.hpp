// A scratch directory that rank 0 creates and every rank of MPI_COMM_WORLD shares (MPI tests).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "test_support.hpp"

namespace zt::test {

class SharedDir {
  public:
    explicit SharedDir(const std::string& tag) {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0) m_dir = std::make_unique<ScratchDir>(tag);
        std::string p = m_dir ? m_dir->path() : std::string();
        int n = static_cast<int>(p.size());
        MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
        p.resize(static_cast<size_t>(n));
        MPI_Bcast(p.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
        m_path = p;
    }
    /// Rank 0 removes the directory only once every rank is done with it.
    ~SharedDir() { MPI_Barrier(MPI_COMM_WORLD); }
    SharedDir(const SharedDir&) = delete;
    SharedDir& operator=(const SharedDir&) = delete;
    const std::string& path() const { return m_path; }
    std::string file(const std::string& name) const { return m_path + "/" + name; }

  private:
    std::unique_ptr<ScratchDir> m_dir;
    std::string m_path;
};

}  // namespace zt::test
