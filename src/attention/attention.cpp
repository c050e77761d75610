// The fast attention path: FlashAttention-2 style tiling (Dao 2023, Algorithm 1) with an
// online softmax (Milakov and Gimelshein 2018), every position scheme fused into the tile as
// a functor. Tested against attention_reference (src/attention/attention_reference.cpp).
//
// Work item = (kv head, query block): the G = Hq / Hkv query heads sharing that kv head times
// Bq / G queries, so one transposed key block serves every row; items are split across threads with
// posenc::thread_range, each thread owning one scratch block planned before the parallel
// region. For one item the loop over key blocks of Bk keys is
//
//   1. QK^T block   s(Bq, Bk) = q_blk . k_blk^T, with k_blk transposed into kT(D, Bk) so the
//                   inner loop runs over contiguous keys (vectorises without reassociation)
//   2. score mod    s = scale * s + scale * q.a^K_c + bias(h, i, j), or -inf if masked
//   3. softmax      m' = max(m, rowmax s); alpha = exp(m - m'); p = exp(s - m');
//                   l = alpha l + sum p; acc = alpha acc; w = alpha w
//   4. PV block     acc(Bq, D) += p v_blk; Shaw-V: w(Bq, 2K+1)[c(i,j)] += p
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
#include "posenc/core/error.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/alibi.hpp"

namespace posenc {
namespace {

constexpr int64_t kBq = 32;  // tile rows (query heads x queries) per work item
constexpr int64_t kBk = 64;  // keys per block

// Score bias of hook 2b, precomputed so that the tile never calls a library function:
// ALiBi slopes, and the T5 bias as a lookup table over offsets r = kpos - qpos.
// T5 buckets are constant for |r| >= the saturation distance (the logarithmic branch reaches
// its last bucket at n >= max_distance, n rounded through float; 2 * max_distance + num_buckets
// is safely past it), so offsets are clamped to [lo, hi] where the clamp is exact.
template <typename Real>
struct bias_tables {
  std::vector<double> alibi;  // (Hq,) slopes, empty = off
  bool causal = false;
  bool t5 = false;
  std::vector<Real> t5_lut;  // (Hq, hi - lo + 1): bias of head h at offset r
  int64_t lo = 0, hi = 0, span = 0;
  const attention_t5<Real>* t5_table = nullptr;  // fallback when the offset range is huge
  int64_t heads = 0;
  bool t5_direct = false;

  Real operator()(int64_t h, int64_t qp, int64_t kp) const {
    double b = 0;
    if (!alibi.empty()) b += alibi_bias(alibi[h], qp, kp, causal);
    Real r = static_cast<Real>(b);
    if (t5) {
      if (t5_direct) {
        const int64_t bucket = t5_bucket(kp - qp, t5_table->params);
        r += t5_table->weights[bucket * heads + h];
      } else {
        const int64_t off = std::clamp(kp - qp, lo, hi);
        r += t5_lut[h * span + (off - lo)];
      }
    }
    return r;
  }
};

template <typename Real>
bias_tables<Real> make_bias_tables(const attention_params<Real>& p,
                                   const detail::attention_plan& pl) {
  bias_tables<Real> b;
  b.alibi.assign(p.pos.alibi.begin(), p.pos.alibi.end());
  b.causal = p.causal;
  if (!p.pos.has_t5()) return b;
  const attention_t5<Real>& t = p.pos.t5;
  b.t5 = true;
  b.t5_table = &t;
  b.heads = p.Hq;
  const int64_t sat = 2 * t.params.max_distance + t.params.num_buckets;
  if (!detail::visible_offset_range(pl, sat, &b.lo, &b.hi)) {
    b.t5_direct = true;  // nothing visible: the functor is never called
    return b;
  }
  b.span = b.hi - b.lo + 1;
  if (b.span > (int64_t{1} << 22) || b.span * p.Hq > (int64_t{1} << 26)) {
    b.t5_direct = true;
    return b;
  }
  b.t5_lut.resize(p.Hq * b.span);
  for (int64_t r = b.lo; r <= b.hi; ++r) {
    const int64_t bucket = t5_bucket(r, t.params);
    for (int64_t h = 0; h < p.Hq; ++h)
      b.t5_lut[h * b.span + (r - b.lo)] = t.weights[bucket * p.Hq + h];
  }
  return b;
}

// One thread's scratch, sized once before the parallel region.
template <typename Real>
struct tile_scratch {
  std::vector<Real> kT;    // (D, Bk): the key block, transposed
  std::vector<Real> s;     // (Bq, Bk): scores, then probabilities
  std::vector<Real> acc;   // (Bq, D): unnormalised output
  std::vector<Real> m, l;  // (Bq,): running max and sum
  std::vector<Real> qa;    // (Bq, C): scale * q_i . a^K_c, C = 2K+1 (Shaw only)
  std::vector<Real> w;     // (Bq, C): unnormalised probability mass per Shaw offset
};

template <typename Real>
struct tiled_problem {
  const attention_params<Real>* p;
  const detail::attention_plan* pl;
  const Real* q;  // (T, Hq, D), rotated when RoPE is on
  const Real* k;  // (S, Hkv, D), rotated when RoPE is on
  const bias_tables<Real>* bias;
  const Real* shaw_k = nullptr;  // (C, D)
  const Real* shaw_v = nullptr;  // (C, D)
  int64_t shaw_clip = 0, C = 0;
};

// One work item: key/value head hk, query rows [i0, i1) of all G = Hq / Hkv query heads that
// read it (GQA: the transposed key block is shared by the G * nq rows). Tile row r holds query
// head hk * G + r / nq, query i0 + r % nq.
template <typename Real>
void attend_block(const tiled_problem<Real>& pr, tile_scratch<Real>& sc, int64_t hk, int64_t i0,
                  int64_t i1) {
  const auto& p = *pr.p;
  const auto& pl = *pr.pl;
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D, C = pr.C;
  const int64_t nq = i1 - i0, rows = pl.group * nq;
  auto head_of = [&](int64_t r) { return hk * pl.group + r / nq; };
  auto query_of = [&](int64_t r) { return i0 + r % nq; };
  const Real scale = static_cast<Real>(pl.scale);
  const Real neg_inf = -std::numeric_limits<Real>::infinity();
  Real* kT = sc.kT.data();
  Real* s = sc.s.data();
  Real* acc = sc.acc.data();
  Real* m = sc.m.data();
  Real* l = sc.l.data();
  Real* qa = sc.qa.data();
  Real* w = sc.w.data();
  const bool shaw = pr.shaw_k != nullptr;
  const bool any_bias = !pr.bias->alibi.empty() || pr.bias->t5;

  for (int64_t ii = 0; ii < rows; ++ii) {
    m[ii] = neg_inf;
    l[ii] = 0;
  }
  std::fill(acc, acc + rows * D, Real(0));
  if (shaw) {
    std::fill(w, w + rows * C, Real(0));
    // qa[ii][c] = scale * q_i . a^K_c: Shaw-K's score term (eq. 4) for all C offsets at once.
    for (int64_t ii = 0; ii < rows; ++ii) {
      const Real* qi = pr.q + (query_of(ii) * Hq + head_of(ii)) * D;
      for (int64_t c = 0; c < C; ++c) {
        const Real* ak = pr.shaw_k + c * D;
        Real dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qi[d] * ak[d];
        qa[ii * C + c] = scale * dot;
      }
    }
  }

  // Key range any row of this block may see by token index (causal and window rules).
  int64_t j_begin = 0, j_end = S;
  if (p.causal) j_end = std::clamp<int64_t>(S - T + i1, 0, S);  // last row sees j <= S-T+i1-1
  if (p.window > 0) j_begin = std::clamp<int64_t>(S - T + i0 - p.window + 1, 0, S);

  for (int64_t j0 = j_begin; j0 < j_end; j0 += kBk) {
    const int64_t nb = std::min(kBk, j_end - j0);
    // 1. QK^T block.
    for (int64_t jj = 0; jj < nb; ++jj) {
      const Real* kj = pr.k + ((j0 + jj) * Hkv + hk) * D;
      for (int64_t d = 0; d < D; ++d) kT[d * kBk + jj] = kj[d];
    }
    for (int64_t ii = 0; ii < rows; ++ii) {
      const Real* qi = pr.q + (query_of(ii) * Hq + head_of(ii)) * D;
      Real* srow = s + ii * kBk;
      for (int64_t jj = 0; jj < nb; ++jj) srow[jj] = 0;
      for (int64_t d = 0; d < D; ++d) {
        const Real qd = qi[d];
        const Real* kd = kT + d * kBk;
        for (int64_t jj = 0; jj < nb; ++jj) srow[jj] += qd * kd[jj];
      }
    }
    // 2. Score mod: scale, Shaw-K, biases, masks.
    for (int64_t ii = 0; ii < rows; ++ii) {
      const int64_t i = query_of(ii), h = head_of(ii);
      const int64_t qp = pl.qpos[i];
      Real* srow = s + ii * kBk;
      for (int64_t jj = 0; jj < nb; ++jj) {
        const int64_t j = j0 + jj;
        if (!detail::attention_visible(pl, p.causal, p.window, T, S, i, j)) {
          srow[jj] = neg_inf;
          continue;
        }
        Real v = scale * srow[jj];
        if (shaw) v += qa[ii * C + shaw_index(qp, pl.kpos[j], pr.shaw_clip)];
        if (any_bias) v += (*pr.bias)(h, qp, pl.kpos[j]);
        srow[jj] = v;
      }
    }
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
      if (shaw) {
        Real* wrow = w + ii * C;
        if (alpha != Real(1))
          for (int64_t c = 0; c < C; ++c) wrow[c] *= alpha;
        const int64_t qp = pl.qpos[query_of(ii)];
        for (int64_t jj = 0; jj < nb; ++jj)
          wrow[shaw_index(qp, pl.kpos[j0 + jj], pr.shaw_clip)] += srow[jj];
      }
    }
  }

  // Epilogue: normalise, add Shaw-V (eq. 3: sum_j p_ij a^V_c = sum_c w_c a^V_c / l).
  for (int64_t ii = 0; ii < rows; ++ii) {
    const int64_t i = query_of(ii), h = head_of(ii);
    Real* out = p.out + (i * Hq + h) * D;
    if (l[ii] == Real(0)) {
      for (int64_t d = 0; d < D; ++d) out[d] = Real(0);
      if (p.lse) p.lse[i * Hq + h] = neg_inf;
      continue;
    }
    const Real inv = Real(1) / l[ii];
    const Real* arow = acc + ii * D;
    for (int64_t d = 0; d < D; ++d) out[d] = arow[d];
    if (shaw) {
      const Real* wrow = w + ii * C;
      for (int64_t c = 0; c < C; ++c) {
        const Real wc = wrow[c];
        if (wc == Real(0)) continue;
        const Real* av = pr.shaw_v + c * D;
        for (int64_t d = 0; d < D; ++d) out[d] += wc * av[d];
      }
    }
    for (int64_t d = 0; d < D; ++d) out[d] *= inv;
    if (p.lse) p.lse[i * Hq + h] = m[ii] + std::log(l[ii]);
  }
}

}  // namespace

bool attention_reference_selected() {
  const char* e = std::getenv("POSENC_REFERENCE");
  return e && *e && std::strcmp(e, "0") != 0;
}

template <typename Real>
void attention_tiled(const attention_params<Real>& p) {
  const auto pl = detail::make_attention_plan(p);
  const int64_t T = p.T, S = p.S, Hq = p.Hq, Hkv = p.Hkv, D = p.D;
  if (T == 0) return;
  const auto& ps = p.pos;

  // Hook 1: rotate copies of q (T, Hq, D) and k (S, Hkv, D) once, outside the tile loop.
  std::vector<Real> q_rot, k_rot;
  const Real* q = p.q;
  const Real* k = p.k;
  if (ps.rope.freqs) {
    q_rot.assign(p.q, p.q + T * Hq * D);
    rope_apply(*ps.rope.freqs, ps.rope.layout, ps.rope.angle, pl.qpos_rope, q_rot.data(), T, Hq, D);
    q = q_rot.data();
    if (!ps.rope.keys_rotated && S > 0) {
      k_rot.assign(p.k, p.k + S * Hkv * D);
      rope_apply(*ps.rope.freqs, ps.rope.layout, ps.rope.angle, pl.kpos_rope, k_rot.data(), S, Hkv,
                 D);
      k = k_rot.data();
    }
  }

  if constexpr (std::is_same_v<Real, float>) {
    // float32: the register-blocked SIMD kernels of attention_simd.cpp.
    detail::attention_simd_f32(p, pl, q, k, num_threads());
    return;
  }
  const auto bias = make_bias_tables(p, pl);
  tiled_problem<Real> pr{&p, &pl, q, k, &bias};
  if (ps.has_shaw()) {
    pr.shaw_k = ps.shaw.keys.data();
    pr.shaw_v = ps.shaw.values.data();
    pr.shaw_clip = ps.shaw.clip;
    pr.C = 2 * ps.shaw.clip + 1;
    checked_bytes("attention Shaw scratch", static_cast<unsigned long long>(kBq + Hq),
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
