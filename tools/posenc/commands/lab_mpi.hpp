// posenc lab under mpirun: the MPI side of lab::distribution (the library has no MPI).
//
// Under `mpirun -np N posenc lab ...` (Open MPI sets OMPI_COMM_WORLD_SIZE, PMIx PMIX_RANK) the
// lab command starts MPI, runs each training run's shards and evaluation batches spread over
// the N ranks (lab.hpp, lab::distribution), and only rank 0 prints and writes. Without mpirun,
// or in a build without MPI (POSENC_MPI off or Open MPI not found), nothing here starts MPI and
// the lab runs in one process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "posenc/lab/lab.hpp"

namespace posenc::cli {

// True when this process was started by mpirun (whether or not this build has MPI).
bool under_mpirun();

// Starts MPI if started by mpirun and this build has it; returns the distribution (size 1 and
// no gather otherwise). Throws invalid_argument when started by mpirun with more than one rank
// in a build without MPI (the ranks would each run the whole lab and overwrite each other).
std::shared_ptr<const lab::distribution> mpi_start();

// Ends the job on every rank at once with exit code `code` after an error on this rank (a
// rank that stopped must not leave the others waiting in a collective). No-op without MPI.
void mpi_abort(int code);

// Runs every spec like lab::run_specs. Distributed (world->size > 1), a sweep with more ranks
// than one run can use (a run uses at most ceil(batch / sequences_per_shard) ranks, one per
// shard) is split into G = min(runs, size / shards) rank groups: world rank r is in group
// r mod G, group g runs specs g, g + G, ... over its ranks, and the group leaders send their
// results to world rank 0, which alone gets the complete vector (the others get theirs
// only). Each run's numbers are bitwise those of one process whatever the grouping.
std::vector<lab::run_result> run_specs_mpi(std::vector<lab::run_spec> specs, const lab::task& t,
                                           const std::shared_ptr<const lab::distribution>& world,
                                           const lab::progress_fn& cb);

// MPI_Finalize if mpi_start started MPI.
void mpi_finish();

}  // namespace posenc::cli
