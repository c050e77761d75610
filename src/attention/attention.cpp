// The fast attention path: FlashAttention-2 style tiling (Dao 2023, Algorithm 1) with an
// online softmax (Milakov and Gimelshein 2018), the position terms of src/attention/
// engine_terms.hpp applied inside the tile. Tested against attention_reference
// (src/attention/attention_reference.cpp).
//
// Work item = (kv head, query block): the G = Hq / Hkv query heads sharing that kv head times
// Bq / G queries, so one transposed key block serves every row; items are split across threads with
// posenc::thread_range, each thread owning one scratch block planned before the parallel
// region. For one item the loop over key blocks of Bk keys is
//
//   1. QK^T block   s(Bq, Bk) = q_blk . k_blk^T, with k_blk transposed into kT(D, Bk) so the
//                   inner loop runs over contiguous keys (vectorises without reassociation)
//   2. score mod    s = scale * s + scale * q.a^K_c + biases(h, i, j), or -inf if masked
//   3. softmax      m' = max(m, rowmax s); alpha = exp(m - m'); p = exp(s - m');
//                   l = alpha l + sum p; acc = alpha acc; w = alpha w
//   4. PV block     acc(Bq, D) += p v_blk; hook 3: w(Bq, C)[c(i,j)] += p
//
// and finally out = (acc + w a^V) / l, lse = m + log l (zeros and -inf when l = 0).
// Key blocks that the causal or window rule excludes for the whole query block are skipped.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attention_plan.hpp"
#include "named_schemes.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"

namespace posenc {
namespace {

constexpr int64_t kBq = 32;  // tile rows (query heads x queries) per work item
constexpr int64_t kBk = 64;  // keys per block

// One thread's scratch, sized once before the parallel region.
template <typename Real>
struct tile_scratch {
  std::vector<Real> kT;    // (D, Bk): the key block, transposed
  std::vector<Real> s;     // (Bq, Bk): scores, then probabilities
  std::vector<Real> acc;   // (Bq, D): unnormalised output
  std::vector<Real> m, l;  // (Bq,): running max and sum
  std::vector<Real> qa;    // (Bq, C): scale * q_i . a^K_c (relative tables only)
  std::vector<Real> w;     // (Bq, C): unnormalised probability mass per table row
  std::vector<int64_t> c;  // (Bk,): the table row of each key of a block row
};

template <typename Real>
struct tiled_problem {
  const attention_params<Real>* p;
  const detail::attention_plan* pl;
  const detail::engine_terms<Real>* terms;
  const Real* q;                                        // (T, Hq, D), transformed by hook 1
  const Real* k;                                        // (S, Hkv, D), transformed by hook 1
  const detail::relative_vectors<Real>* rel = nullptr;  // hooks 2a and 3
  int64_t C = 0;                                        // rows of the relative tables
  bool kpos_contiguous = false;                         // kpos[j] == j for every key
};

// The rows of one work item: tile row r holds query head hk * G + r / nq and query i0 + r % nq.
struct tile_rows {
  int64_t hk, i0, nq, G, rows;
  int64_t head(int64_t r) const { return hk * G + r / nq; }
  int64_t query(int64_t r) const { return i0 + r % nq; }
};

// An item's start: m = -inf, l = 0, acc = 0, and hook 2a's scale q . a^K for every table row.
template <typename Real>
inline void tile_begin(const tiled_problem<Real>& pr, tile_scratch<Real>& sc, const tile_rows& it) {
  const auto& p = *pr.p;
  const int64_t Hq = p.Hq, D = p.D, C = pr.C, rows = it.rows;
  const Real scale = static_cast<Real>(pr.pl->scale);
  const Real neg_inf = -std::numeric_limits<Real>::infinity();
  Real* acc = sc.acc.data();
  Real* m = sc.m.data();
  Real* l = sc.l.data();
  Real* qa = sc.qa.data();
  Real* w = sc.w.data();
  const auto* rel = pr.rel;

  for (int64_t ii = 0; ii < rows; ++ii) {
    m[ii] = neg_inf;
    l[ii] = 0;
  }
  std::fill(acc, acc + rows * D, Real(0));
  if (rel) {
    std::fill(w, w + rows * C, Real(0));
    // qa[ii][c] = scale * q_i . a^K_c: hook 2a's score term for all C rows at once.
    for (int64_t ii = 0; ii < rows; ++ii) {
      const Real* qi = pr.q + (it.query(ii) * Hq + it.head(ii)) * D;
      for (int64_t c = 0; c < C; ++c) {
        const Real* ak = rel->keys + c * D;
        Real dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qi[d] * ak[d];
        qa[ii * C + c] = scale * dot;
      }
    }
  }
}

// Steps 1 and 2 of the key block [j0, j0 + nb): s(rows, nb) = q_blk . k_blk^T, then the score
// mod (scale, hook 2a, hook 2b, masks).
template <typename Real>
inline void tile_scores(const tiled_problem<Real>& pr, tile_scratch<Real>& sc, const tile_rows& it,
                        int64_t j0, int64_t nb) {
  const auto& p = *pr.p;
  const auto& pl = *pr.pl;
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D, C = pr.C;
  const int64_t hk = it.hk, rows = it.rows;
  const Real scale = static_cast<Real>(pl.scale);
  const Real neg_inf = -std::numeric_limits<Real>::infinity();
  Real* kT = sc.kT.data();
  Real* s = sc.s.data();
  Real* qa = sc.qa.data();
  int64_t* cidx = sc.c.data();
  const auto* rel = pr.rel;
  const auto& biases = pr.terms->biases;

  // 1. QK^T block.
  for (int64_t jj = 0; jj < nb; ++jj) {
    const Real* kj = pr.k + ((j0 + jj) * Hkv + hk) * D;
    for (int64_t d = 0; d < D; ++d) kT[d * kBk + jj] = kj[d];
  }
  for (int64_t ii = 0; ii < rows; ++ii) {
    const Real* qi = pr.q + (it.query(ii) * Hq + it.head(ii)) * D;
    Real* srow = s + ii * kBk;
    for (int64_t jj = 0; jj < nb; ++jj) srow[jj] = 0;
    for (int64_t d = 0; d < D; ++d) {
      const Real qd = qi[d];
      const Real* kd = kT + d * kBk;
      for (int64_t jj = 0; jj < nb; ++jj) srow[jj] += qd * kd[jj];
    }
  }
  // 2. Score mod: scale, hook 2a, hook 2b, masks.
  for (int64_t ii = 0; ii < rows; ++ii) {
    const int64_t i = it.query(ii), h = it.head(ii);
    const int64_t qp = pl.qpos[i];
    Real* srow = s + ii * kBk;
    for (int64_t jj = 0; jj < nb; ++jj) srow[jj] *= scale;
    if (rel) {
      rel->index_row(qp, pl.kpos.data() + j0, nb, cidx);
      for (int64_t jj = 0; jj < nb; ++jj) srow[jj] += qa[ii * C + cidx[jj]];
    }
    for (const auto& b : biases) bias_add_row(*b, pl, pr.kpos_contiguous, h, i, j0, nb, srow);
    for (int64_t jj = 0; jj < nb; ++jj)
      if (!detail::attention_visible(pl, p.causal, p.window, T, S, i, j0 + jj)) srow[jj] = neg_inf;
  }
}

// Steps 3 and 4 of the key block [j0, j0 + nb): the online softmax and the PV block, row by row
// (s becomes the probabilities; m, l, acc and w are updated).
template <typename Real>
inline void tile_softmax_pv(const tiled_problem<Real>& pr, tile_scratch<Real>& sc,
                            const tile_rows& it, int64_t j0, int64_t nb) {
  const auto& p = *pr.p;
  const auto& pl = *pr.pl;
  const int64_t Hkv = p.Hkv, D = p.D, C = pr.C, hk = it.hk, rows = it.rows;
  const Real neg_inf = -std::numeric_limits<Real>::infinity();
  Real* s = sc.s.data();
  Real* acc = sc.acc.data();
  Real* m = sc.m.data();
  Real* l = sc.l.data();
  Real* w = sc.w.data();
  int64_t* cidx = sc.c.data();
  const auto* rel = pr.rel;

  // 3. Online softmax and 4. PV block, row by row.
  for (int64_t ii = 0; ii < rows; ++ii) {
    Real* srow = s + ii * kBk;
    Real mx = neg_inf;
    for (int64_t jj = 0; jj < nb; ++jj) mx = std::max(mx, srow[jj]);
    const Real m_new = std::max(m[ii], mx);
    if (m_new == neg_inf) continue;              // nothing visible yet in this row
    const Real alpha = std::exp(m[ii] - m_new);  // exp(-inf) = 0 on the first visible block
    Real sum = 0;
    for (int64_t jj = 0; jj < nb; ++jj) {
      srow[jj] = std::exp(srow[jj] - m_new);  // masked: exp(-inf) = 0
      sum += srow[jj];
    }
    l[ii] = alpha * l[ii] + sum;
    m[ii] = m_new;
    Real* arow = acc + ii * D;
    if (alpha != Real(1))
      for (int64_t d = 0; d < D; ++d) arow[d] *= alpha;
    for (int64_t jj = 0; jj < nb; ++jj) {
      const Real pj = srow[jj];
      if (pj == Real(0)) continue;
      const Real* vj = p.v + ((j0 + jj) * Hkv + hk) * D;
      for (int64_t d = 0; d < D; ++d) arow[d] += pj * vj[d];
    }
    if (rel) {
      Real* wrow = w + ii * C;
      if (alpha != Real(1))
        for (int64_t c = 0; c < C; ++c) wrow[c] *= alpha;
      rel->index_row(pl.qpos[it.query(ii)], pl.kpos.data() + j0, nb, cidx);
      for (int64_t jj = 0; jj < nb; ++jj) wrow[cidx[jj]] += srow[jj];
    }
  }
}

// An item's end: out = (acc + w a^V) / l and lse = m + log l (zeros and -inf when l = 0).
template <typename Real>
inline void tile_end(const tiled_problem<Real>& pr, const tile_scratch<Real>& sc,
                     const tile_rows& it) {
  const auto& p = *pr.p;
  const int64_t Hq = p.Hq, D = p.D, C = pr.C, rows = it.rows;
  const Real neg_inf = -std::numeric_limits<Real>::infinity();
  const Real* acc = sc.acc.data();
  const Real* m = sc.m.data();
  const Real* l = sc.l.data();
  const Real* w = sc.w.data();
  const auto* rel = pr.rel;

  // Epilogue: normalise, add hook 3 (sum_j p_ij a^V_c = sum_c w_c a^V_c / l).
  for (int64_t ii = 0; ii < rows; ++ii) {
    const int64_t i = it.query(ii), h = it.head(ii);
    Real* out = p.out + (i * Hq + h) * D;
    Real inv, lse = Real(0);
    if (!p.sinks.empty()) {
      sink_normalise(m[ii], l[ii], p.sinks[h], &inv, &lse);
    } else if (l[ii] == Real(0)) {
      inv = Real(0), lse = neg_inf;
    } else {
      inv = Real(1) / l[ii];
      lse = m[ii] + std::log(l[ii]);
    }
    if (l[ii] == Real(0)) {
      for (int64_t d = 0; d < D; ++d) out[d] = Real(0);
      if (p.lse) p.lse[i * Hq + h] = lse;
      continue;
    }
    const Real* arow = acc + ii * D;
    for (int64_t d = 0; d < D; ++d) out[d] = arow[d];
    if (rel) {
      const Real* wrow = w + ii * C;
      for (int64_t c = 0; c < C; ++c) {
        const Real wc = wrow[c];
        if (wc == Real(0)) continue;
        const Real* av = rel->values + c * D;
        for (int64_t d = 0; d < D; ++d) out[d] += wc * av[d];
      }
    }
    for (int64_t d = 0; d < D; ++d) out[d] *= inv;
    if (p.lse) p.lse[i * Hq + h] = lse;
  }
}

// One work item: key/value head hk, query rows [i0, i1) of all G = Hq / Hkv query heads that
// read it (GQA: the transposed key block is shared by the G * nq rows). Tile row r holds query
// head hk * G + r / nq, query i0 + r % nq.
template <typename Real>
void attend_block(const tiled_problem<Real>& pr, tile_scratch<Real>& sc, int64_t hk, int64_t i0,
                  int64_t i1) {
  const auto& p = *pr.p;
  const int64_t T = p.T, S = p.S;
  const tile_rows it{hk, i0, i1 - i0, pr.pl->group, pr.pl->group * (i1 - i0)};

  tile_begin(pr, sc, it);

  // Key range any row of this block may see by token index (causal and window rules).
  int64_t j_begin = 0, j_end = S;
  if (p.causal) j_end = std::clamp<int64_t>(S - T + i1, 0, S);  // last row sees j <= S-T+i1-1
  if (p.window > 0) j_begin = std::clamp<int64_t>(S - T + i0 - p.window + 1, 0, S);

  for (int64_t j0 = j_begin; j0 < j_end; j0 += kBk) {
    const int64_t nb = std::min(kBk, j_end - j0);
    tile_scores(pr, sc, it, j0, nb);
    tile_softmax_pv(pr, sc, it, j0, nb);
  }

  tile_end(pr, sc, it);
}

}  // namespace

std::string name(attention_products x) {
  return x == attention_products::bf16 ? "bf16" : "f32";
}

bool attention_bf16_native() {
  return detail::attention_bf16_native_impl();
}

bool attention_reference_selected() {
  const char* e = std::getenv("POSENC_REFERENCE");
  return e && *e && std::strcmp(e, "0") != 0;
}

template <typename Real>
void attention_tiled(const attention_params<Real>& p) {
  if (detail::named_path_forward(p, false)) return;  // a scheme's own path (CoPE)
  const auto pl = detail::make_attention_plan(p);
  const auto terms = detail::make_engine_terms<Real>(p, pl, nullptr);
  if (terms.pairs) return detail::rope_pairs_forward(p, pl, terms, false);  // its own path
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D;
  if (T == 0) return;

  if constexpr (std::is_same_v<Real, float>) {
    // float32: the register-blocked SIMD kernels of attention_simd.cpp (hook 1 included).
    detail::attention_simd_f32(p, pl, terms, num_threads());
    return;
  }

  // Head-major K and V (kv_head_stride): the generic path reads token-major copies.
  if (p.kv_head_stride > 0) {
    std::vector<Real> k_tm(S * Hkv * D), v_tm(S * Hkv * D);
    for (int64_t j = 0; j < S; ++j)
      for (int64_t hk = 0; hk < Hkv; ++hk) {
        const int64_t x = (j * Hkv + hk) * D, y = kv_offset(p, j, hk);
        copy_key(p, j, hk, k_tm.data() + x);
        std::copy(p.v + y, p.v + y + D, v_tm.begin() + x);
      }
    attention_params<Real> pt = p;
    pt.k = k_tm.data();
    pt.v = v_tm.data();
    pt.kv_head_stride = 0;
    pt.k_blocked = false;
    return attention_tiled(pt);
  }

  // Hook 1: transform copies of q (T, Hq, D) and k (S, Hkv, D) once, outside the tile loop.
  std::vector<Real> q_t, k_t;
  const Real* q = p.q;
  const Real* k = p.k;
  if (const auto* tr = terms.transform.get()) {
    q_t.assign(p.q, p.q + T * Hq * D);
    tr->apply(pl.qpos_safe, q_t.data(), T, Hq, D, false, false);
    q = q_t.data();
    if (!tr->keys_transformed && S > 0) {
      k_t.assign(p.k, p.k + S * Hkv * D);
      tr->apply(pl.kpos_safe, k_t.data(), S, Hkv, D, true, false);
      k = k_t.data();
    }
  }

  tiled_problem<Real> pr{&p, &pl, &terms, q, k};
  pr.kpos_contiguous = true;
  for (int64_t j = 0; j < S; ++j) pr.kpos_contiguous &= pl.kpos[j] == j;
  if (terms.relative) {
    pr.rel = terms.relative.get();
    pr.C = pr.rel->C;
    checked_bytes("attention relative-table scratch",
                  static_cast<unsigned long long>(kBq) + static_cast<unsigned long long>(Hq),
                  static_cast<unsigned long long>(pr.C), 2, sizeof(Real));
  }

  // Work item = (kv head, block of bq queries) covering G * bq <= max(kBq, G) tile rows.
  const int64_t G = pl.group, bq = std::max<int64_t>(1, kBq / G), rows = G * bq;
  const int64_t nqb = (T + bq - 1) / bq;
  const int64_t work = Hkv * nqb;
  // Threads only pay off above ~1M multiply-adds (an OpenMP fork/join costs microseconds):
  // one thread per 2^20 of the Hq * T * S * D work, at most one per work item.
  const double flops = double(Hq) * double(T) * double(std::max<int64_t>(S, 1)) * double(D);
  const int64_t by_work = std::max<int64_t>(1, static_cast<int64_t>(flops / double(1 << 20)));
  const int nth = static_cast<int>(std::min<int64_t>({num_threads(), work, by_work}));
  std::vector<tile_scratch<Real>> scratch(nth);
  for (auto& sc : scratch) {
    sc.kT.resize(D * kBk);
    sc.s.resize(rows * kBk);
    sc.acc.resize(rows * D);
    sc.m.resize(rows);
    sc.l.resize(rows);
    sc.qa.resize(rows * pr.C);
    sc.w.resize(rows * pr.C);
    sc.c.resize(kBk);
  }
  parallel_for(nth, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      auto [b, e] = thread_range(work, static_cast<int>(t), nth);
      for (int64_t item = b; item < e; ++item) {
        const int64_t hk = item / nqb, qb = item % nqb;
        attend_block(pr, scratch[t], hk, qb * bq, std::min(T, (qb + 1) * bq));
      }
    }
  });
}

template <typename Real>
void attention_forward(const attention_params<Real>& p) {
  if (attention_reference_selected())
    attention_reference(p);
  else
    attention_tiled(p);
}

template void attention_tiled(const attention_params<float>&);
template void attention_tiled(const attention_params<double>&);
template void attention_forward(const attention_params<float>&);
template void attention_forward(const attention_params<double>&);

}  // namespace posenc
