// The MPI side of lab::distribution: MPI_Allgatherv in rank order (lab_mpi.hpp).
#include "lab_mpi.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "posenc/core/error.hpp"

#ifdef POSENC_HAVE_MPI
#include <mpi.h>
#endif

namespace posenc::cli {
namespace {

[[maybe_unused]] bool started = false;

[[maybe_unused]] int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

#ifdef POSENC_HAVE_MPI
// counts in elements -> int counts and displacements (MPI's are int).
void displacements(const std::vector<int64_t>& counts, std::vector<int>& c, std::vector<int>& d) {
  c.resize(counts.size());
  d.resize(counts.size());
  int64_t off = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] > std::numeric_limits<int>::max() || off > std::numeric_limits<int>::max())
      fail("MPI gather: {} elements exceed MPI's int counts", off + counts[r]);
    c[r] = static_cast<int>(counts[r]);
    d[r] = static_cast<int>(off);
    off += counts[r];
  }
}

template <typename T>
void allgather(MPI_Comm comm, const T* mine, T* all, const std::vector<int64_t>& counts,
               MPI_Datatype type) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::vector<int> c, d;
  displacements(counts, c, d);
  MPI_Allgatherv(mine, c[rank], type, all, c.data(), d.data(), type, comm);
}

std::shared_ptr<lab::distribution> over(MPI_Comm comm) {
  auto d = std::make_shared<lab::distribution>();
  MPI_Comm_rank(comm, &d->rank);
  MPI_Comm_size(comm, &d->size);
  d->gather = [comm](const float* mine, float* all, const std::vector<int64_t>& counts) {
    allgather(comm, mine, all, counts, MPI_FLOAT);
  };
  d->gather_doubles = [comm](const double* mine, double* all, const std::vector<int64_t>& counts) {
    allgather(comm, mine, all, counts, MPI_DOUBLE);
  };
  return d;
}
#endif

// run_result <-> JSON for the group leaders' results; doubles travel as their bits.
using J = nlohmann::json;
J bits(double v) {
  return std::bit_cast<uint64_t>(v);
}
double unbits(const J& j) {
  return std::bit_cast<double>(j.get<uint64_t>());
}
J metrics_json(const lab::eval_metrics& e) {
  return J::array({e.length, e.defined, e.note, bits(e.loss), bits(e.token_accuracy),
                   bits(e.exact_match), bits(e.loss_last64), e.sequences, e.scored_tokens,
                   bits(e.sliding_loss), bits(e.sliding_token_accuracy), e.stride,
                   e.sliding_windows, e.sliding_scored_tokens});
}
lab::eval_metrics metrics_from(const J& j) {
  lab::eval_metrics e;
  e.length = j[0];
  e.defined = j[1];
  e.note = j[2];
  e.loss = unbits(j[3]);
  e.token_accuracy = unbits(j[4]);
  e.exact_match = unbits(j[5]);
  e.loss_last64 = unbits(j[6]);
  e.sequences = j[7];
  e.scored_tokens = j[8];
  e.sliding_loss = unbits(j[9]);
  e.sliding_token_accuracy = unbits(j[10]);
  e.stride = j[11];
  e.sliding_windows = j[12];
  e.sliding_scored_tokens = j[13];
  return e;
}
[[maybe_unused]] J result_json(int64_t index, const lab::run_result& r) {
  J j;
  j["index"] = index;
  j["scheme"] = static_cast<int>(r.scheme);
  j["seed"] = r.seed;
  j["steps_done"] = r.steps_done;
  j["completed"] = r.completed;
  j["resumed"] = r.resumed;
  j["train_seconds"] = bits(r.train_seconds);
  j["tokens_per_second"] = bits(r.tokens_per_second);
  j["comm_bytes_per_step"] = bits(r.comm_bytes_per_step);
  j["parameters"] = r.parameters;
  j["curve"] = J::array();
  for (const auto& p : r.curve) j["curve"].push_back({p.step, bits(p.loss), bits(p.lr)});
  j["in_distribution"] = metrics_json(r.in_distribution);
  j["evals"] = J::array();
  for (const auto& e : r.evals) j["evals"].push_back(metrics_json(e));
  return j;
}
[[maybe_unused]] lab::run_result result_from(const J& j) {
  lab::run_result r;
  r.scheme = static_cast<model::pos_scheme>(j["scheme"].get<int>());
  r.seed = j["seed"];
  r.steps_done = j["steps_done"];
  r.completed = j["completed"];
  r.resumed = j["resumed"];
  r.train_seconds = unbits(j["train_seconds"]);
  r.tokens_per_second = unbits(j["tokens_per_second"]);
  r.comm_bytes_per_step = unbits(j["comm_bytes_per_step"]);
  r.parameters = j["parameters"];
  for (const auto& p : j["curve"])
    r.curve.push_back({p[0].get<int64_t>(), unbits(p[1]), unbits(p[2])});
  r.in_distribution = metrics_from(j["in_distribution"]);
  for (const auto& e : j["evals"]) r.evals.push_back(metrics_from(e));
  return r;
}

}  // namespace

bool under_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

std::shared_ptr<const lab::distribution> mpi_start() {
  auto d = std::make_shared<lab::distribution>();
  if (!under_mpirun()) return d;
#ifdef POSENC_HAVE_MPI
  int provided = 0;
  // Only the thread that runs the lab calls MPI (OpenMP threads never do).
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  started = true;
  // An MPI error (a peer gone) ends the job rather than returning a code nobody checks.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  return over(MPI_COMM_WORLD);
#else
  const int n = env_int("OMPI_COMM_WORLD_SIZE");
  if (n > 1)
    fail(
        "posenc lab was started by mpirun with {} ranks, but this build has no MPI "
        "(configure with Open MPI installed, POSENC_MPI=ON)",
        n);
#endif
  return d;
}

std::vector<lab::run_result> run_specs_mpi(std::vector<lab::run_spec> specs, const lab::task& t,
                                           const std::shared_ptr<const lab::distribution>& world,
                                           const lab::progress_fn& cb) {
  const int64_t runs = static_cast<int64_t>(specs.size());
  if (world->size <= 1 || runs == 0) return lab::run_specs(specs, t, cb);
#ifdef POSENC_HAVE_MPI
  int64_t shards = 1;
  for (const auto& s : specs)
    shards = std::max(
        shards, (s.options.batch_size + lab::sequences_per_shard - 1) / lab::sequences_per_shard);
  const int groups = static_cast<int>(std::clamp<int64_t>(world->size / shards, 1, runs));
  if (groups == 1) {
    for (auto& s : specs) s.options.dist = world;
    return lab::run_specs(specs, t, cb);
  }
  const int color = world->rank % groups;
  MPI_Comm comm;
  MPI_Comm_split(MPI_COMM_WORLD, color, world->rank, &comm);
  const std::shared_ptr<const lab::distribution> group = over(comm);
  std::vector<lab::run_spec> mine;
  std::vector<int64_t> index;
  for (int64_t i = color; i < runs; i += groups) {
    mine.push_back(specs[i]);
    mine.back().options.dist = group;
    index.push_back(i);
  }
  std::vector<lab::run_result> got = lab::run_specs(mine, t, world->rank == 0 ? cb : nullptr);
  // Group leaders send their results to world rank 0 (variable-length JSON text).
  std::string payload;
  if (group->rank == 0) {
    J a = J::array();
    for (size_t k = 0; k < got.size(); ++k) a.push_back(result_json(index[k], got[k]));
    payload = a.dump();
  }
  int len = static_cast<int>(payload.size());
  std::vector<int> lens(world->size), offs(world->size);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (world->rank == 0) {
    int64_t off = 0;
    for (int r = 0; r < world->size; ++r) {
      offs[r] = static_cast<int>(off);
      off += lens[r];
    }
    all.resize(off);
  }
  MPI_Gatherv(payload.data(), len, MPI_CHAR, all.data(), lens.data(), offs.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  MPI_Comm_free(&comm);
  if (world->rank != 0) return got;
  std::vector<lab::run_result> out(runs);
  for (int r = 0; r < world->size; ++r) {
    if (lens[r] == 0) continue;
    for (const auto& j : J::parse(all.substr(offs[r], lens[r])))
      out[j["index"].get<int64_t>()] = result_from(j);
  }
  return out;
#else
  return lab::run_specs(specs, t, cb);
#endif
}

void mpi_abort(int code) {
#ifdef POSENC_HAVE_MPI
  if (started) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  (void)code;
}

void mpi_finish() {
#ifdef POSENC_HAVE_MPI
  if (started) {
    MPI_Finalize();
    started = false;
  }
#endif
}

}  // namespace posenc::cli
