// RoPE kernels: rotations of real model heads against vectors derived independently by
// tests/data/rope/derive.py (exact rational angles, 60-digit pi), the binary128 reference,
// RapidCheck properties (norm, relative position, inverse, layouts, pass-through, adjoint),
// angle-mode error at positions up to 1e7 and 2^53, threading and argument errors.
//
// Error model used for every tolerance below (eps = 2^-53, u = |x_a| + |x_b| of the pair):
//   exact cos/sin: <= 2^-52 absolute (two-product angle, triple-double 2 pi reduction, libm);
//   rotation u c - v s in double: 3 eps u;  so a pair's output error <= a (2^-52 + 3 eps) u
//   = 5 eps a u. Float data: cos/sin rounded to float (2^-24 each) plus a float rotation
//   (3 x 2^-24): 5 x 2^-24 a u. The goldens from derive.py are themselves rounded: cos/sin
//   (eps each, from an exactly reduced angle), u c - v s in double (2 eps u) and the product
//   with a (eps): <= 4 eps a u. So fast vs golden: 9 eps a u; reference vs golden: 5 eps a u.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "posenc/core/error.hpp"
#include "posenc/core/rng.hpp"
#include "posenc/core/threads.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/formats/hf_config.hpp"
#include "posenc/verify/checks.hpp"

using namespace posenc;

namespace {

constexpr double kEps = 0x1p-53;

// Golden rotated vectors: output of `python3 tests/data/rope/derive.py` (rotation part).
// ---- rotated vectors; x[d] = ((7 d) mod 11 - 5) / 4 for each head ----
const std::vector<double> kPythiaHalfP0 = {-1.25, 0.5,  -0.5,  1.25,  0.25, -0.75, 1.0,  0.0,
                                           -1.0,  0.75, -0.25, -1.25, 0.5,  -0.5,  1.25, 0.25};
const std::vector<double> kPythiaHalfP1 = {
    0.1660931024727218,  0.24196994544720213, -0.47254372847730586, 1.2888969350846395,
    0.244987583437083,   -0.7484151138082709, 0.998749500208375,    -7.90569401865938e-05,
    -1.5921410368780105, 0.86830325664498,    -0.29866774964292053, -1.2098531690785552,
    0.5024749585418743,  -0.5023692042943645, 1.2509993748333856,   0.2499999875000001};
const std::vector<double> kPythiaHalfP1000 = {
    0.12390569516862371, -0.8977154570959384, -0.5577508464212819,  1.4800760428526707,
    0.06224267317557183, 0.7394977888947035,  -0.5115364251417309,  -0.07774589822679644,
    -1.5959785019557062, 0.08128319685538066, 0.037603102482955314, -0.9666306985470609,
    -0.5555410422605687, 0.5154056850868494,  1.516848867143071,    0.2376038200637957};
const std::vector<double> kPythiaHalfP123456 = {
    0.1000851481840731,   -0.7304809171336875,  -0.5158672357983011, 0.33865213348119794,
    -0.2919815460820545,  -0.12411488654592101, 0.4102077396238718,  -0.24343407951785742,
    1.5976491990149064,   -0.5281075929235696,  0.21536247358771693, 1.7350258593141006,
    -0.47670407670538445, -0.8928020468937631,  -1.5473298324380207, 0.05691967084667185};
const std::vector<double> kQwenHalfP77777 = {
    1.6577277640499606,   0.46540374492375935,  1.1107431482963757,   0.17152007227402205,
    0.31918912567586516,  0.8905802025378743,   0.48283119214276293,  -0.6095613100521793,
    -1.065759072898743,   0.5770384156253189,   0.5735059758485526,   -0.8118313081818862,
    0.23504150119238337,  -0.2549341439306601,  0.9613680802165974,   -0.5512829608518725,
    0.32661169521748146,  -1.1664202091088414,  0.8079754753776012,   0.32068986068188576,
    0.7699240563510441,   -0.12988649238168387, -1.2908166076163727,  -0.22619993337303204,
    0.20775959831211555,  0.4214999469788673,   0.6118953606348774,   -0.841075518824753,
    1.0215095906603335,   0.5305117647075422,   -1.530536221080822,   0.7930364532855039,
    0.5356301996838675,   1.6553879549290946,   0.5863076121838616,   -0.11764698658376678,
    -0.35073396590347217, -0.5795610405638602,  -1.6498603633655793,  0.6438127022816447,
    -0.26549868106050245, 0.6715520580616257,   -0.533371889575096,   1.1736487147659078,
    -1.0085975792563648,  0.4821420553644133,   0.8225203252658517,   0.6352131244780811,
    0.5609358080049928,   -1.427995819901809,   0.9383953053135,      0.270062822401815,
    -1.3925084046262302,  0.8353976516350818,   -0.08981353159724269, -1.525723129730872,
    0.5969780916264047,   -0.44185788243355933, 1.3793099227522818,   0.31674941417573643,
    -0.9186683340251318,  1.1272689110673486,   0.025566422946958475, -1.1657694316406375,
    0.08338027318808132,  0.4342216190551905,   1.0564630651034068,   -1.523300828537208,
    -0.5506971602380454,  -1.4006714505931075,  -1.0697573765688642,  0.5980830358124347,
    -1.2071087706149037,  -0.6295196385592502,  1.0240105958902477,   1.447737385272166,
    0.5915273053386476,   -1.511579680887968,   -1.1939999848223133,  -0.3181762991147573,
    -1.6273716263368252,  0.13027164162620697,  -0.27648497179320014, 1.5780088715901583,
    0.36943910985587514,  -1.1664631601239206,  -1.0434587175162988,  0.5949644110247323,
    1.5187825712471874,   1.473839320995285,    0.17530866458188546,  1.4309456947392074,
    -0.5779489259601217,  0.6691977106551072,   -0.5004126912070174,  -0.31679881975710744,
    1.0443213557215616,   -0.12126140496741261, 0.24777498691197455,  -1.528405618925418,
    1.4922634601760683,   0.26316926208147173,  0.1815885212622184,   -0.9813317528798845,
    0.8116518704434068,   -1.4635476824738602,  0.6669203369595492,   -0.0074497756901169615,
    -1.3182353859524487,  0.4155575756654542,   -1.293570587149997,   1.3951232332327577,
    -0.30083231133267013, 0.8460741976930632,   0.7049262768510502,   -0.8101446663377554,
    0.8086249616520159,   0.17714139008638688,  -1.1702308893425823,  0.6535920295285383,
    -0.22083074596184887, -1.4678644900488467,  0.6688562524280713,   -0.5521040380791454,
    1.3824116976206795,   0.3267592492501694,   -0.8535892844084001,  1.110826547132214};
const std::vector<double> kDeepSeekInterleavedP100000 = {
    1.231326610311757,    -0.544366401184127,   0.02046494588739939,  1.3461356491787244,
    -0.04285130643634627, -0.7894072241477768,  -0.9986403028593243,  -0.05213008253433994,
    -0.5236389568830608,  1.135034027170296,    0.9129524977519426,   -0.8896728257334204,
    0.5858734808463507,   0.3959195176307689,   -1.015507696499784,   0.7705479338429913,
    1.0197309150829146,   -0.7229445765922596,  0.03956046811377931,  0.9992171782763838,
    0.7400726670400086,   -0.27801519293068977, -0.03348002948788048, 1.3458748409958077,
    1.0434427705120806,   0.8507215670629692,   -0.23715380930536437, 0.7541605072741179,
    0.748568247621259,    0.6630577491088069,   1.199457225906241,    0.3518555999572899,
    -0.03045107622281437, 1.2743911220488287,   -0.647261189856172,   -0.2846980015840864,
    0.6223629590337386,   -1.1125036391952923,  0.6375292936399944,   1.0752006323244467,
    -0.4943832505881254,  0.8692440402659767,   -0.7462090560776835,  -0.2610977683314291,
    -0.16588220878089932, 1.3360325942169113,   0.7295791049704192,   -1.1314655671254703,
    0.24856820419123402,  0.7504757476861894,   -0.29928116228731755, 0.9541649678645472,
    -0.9040169039022037,  -0.8632806249760698,  0.9634352769051755,   -0.8347409581508792,
    0.7070973265381515,   0.003656610807681593, 0.8970138157966473,   0.9057406992456167,
    -1.1071663914751049,  0.5802435536806891,   0.3272391327583676,   -0.9449415590350292};
const std::vector<double> kLlama31HalfP10000000 = {
    0.8186771378340877,   -0.5540792422551366,  0.8688847464412175,   -1.282610652858911,
    0.5417417170893463,   0.27787272947696395,  0.9493010846581087,   0.3508907833267829,
    1.4119293412047342,   -0.7311989540705861,  1.0160189422982602,   1.3675702176076734,
    -0.3760432056659183,  -0.699538482408635,   -1.237834422002049,   0.20015652696765193,
    0.5098068960121644,   -0.8076128180216893,  -0.7459887102798965,  0.8164113870865581,
    0.04232620444080355,  -0.756304708260456,   0.3791312328727974,   0.42951885588546534,
    -0.617623158242188,   1.3275202925389926,   0.5589692291629174,   -0.7563274985723292,
    0.23095247286473636,  0.719513754283983,    0.5323756306389877,   -0.6934069230868115,
    1.0129776577105642,   1.270525499772593,    0.5489725873485044,   0.2629293471742246,
    1.297894648032183,    0.007471689017918864, -1.3747187423694744,  1.0261050335683737,
    -0.2758348494857487,  0.6059046798768424,   0.20451279341240208,  0.2870913777620312,
    -1.356599022902086,   -0.5589924319452354,  -0.9005934750189493,  1.2835966858557006,
    -0.4607774284774989,  1.399850493816634,    0.957997602464635,    -0.7363335596325746,
    1.3815727625327725,   0.21156870577144993,  0.3363463472528078,   1.3293302640018807,
    0.5536804220942861,   -0.863739235247045,   -1.1883186383210071,  0.510133477315081,
    0.09567207043008752,  0.16141577206633845,  -0.43926686228905387, 0.9247582099996535,
    -1.2061375311247828,  -0.07413631567574391, -1.0283672969332411,  0.4091575652152091,
    0.13789819420531457,  1.4310089958532832,   0.40165588588608825,  0.6628541756497554,
    0.08034634680659214,  -0.16687746871906034, 0.17379732130019965,  0.5047293333188597,
    -0.41363209192771766, 1.1502807968619766,   -0.5294014957542652,  0.5219553282726862,
    1.3656855160608692,   0.6405166166205727,   -0.07746511560009858, 1.1547607748080995,
    -0.7488047091315835,  0.700359327961773,    -1.4075722035690932,  -0.3577898160077238,
    1.196261524250841,    0.2240309641482343,   0.00730758845406676,  -1.2461816540550272,
    1.0045700350287496,   -0.21166000424305026, -1.3101817385010905,  -0.2858090954033491,
    0.19072562748414,     0.7146782174010918,   0.10549454175401043,  -1.3203666757361516,
    -0.3577282245076786,  -0.5589670597300163,  -0.4849210032346414,  0.09802275289771548,
    0.6974346821094964,   -1.2778417425109188,  0.7215777971436318,   0.9899891619683009,
    0.5335157833289528,   0.005240327084385515, -1.0007154404491283,  0.4060536270743823,
    0.316518816827157,    -0.4067168486322219,  0.3804478856190574,   0.14252329268867459,
    0.3020872420801042,   -0.7195406053435718,  -0.9743567799783064,  -0.5982316016466283,
    -0.07705835574091333, 1.032692855351895,    0.6327707434915959,   -0.22861285030029208,
    1.4545950828115777,   -1.0180594032413963,  0.6079018207693816,   -1.0699636690272418};

std::vector<double> xvec(int64_t D) {
  std::vector<double> x(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) x[d] = static_cast<double>((7 * d) % 11 - 5) / 4.0;
  return x;
}

rope_config cfg(int64_t D, int64_t R, double theta = 10000) {
  rope_config c;
  c.head_dim = D;
  c.rotary_dim = R;
  c.theta = theta;
  return c;
}

// Pair partner of channel d in a layout of width R.
int64_t partner(rope_layout l, int64_t R, int64_t d) {
  if (l == rope_layout::half) return d < R / 2 ? d + R / 2 : d - R / 2;
  return d ^ 1;
}

// Compares y (H heads of width D) with golden (R channels, same for every head) and checks
// channels [R, D) against x bit for bit. tol_unit is the per-pair bound's multiplier of a u.
template <typename T>
void expect_rotated(const std::vector<T>& y, const std::vector<double>& x,
                    const std::vector<double>& golden, rope_layout l, int64_t H, int64_t D,
                    int64_t R, double a, double tol_unit) {
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t d = 0; d < R; ++d) {
      const double u = std::fabs(x[d]) + std::fabs(x[partner(l, R, d)]);
      EXPECT_NEAR(static_cast<double>(y[h * D + d]), golden[d], tol_unit * a * u + 1e-300)
          << "head " << h << " channel " << d;
    }
    for (int64_t d = R; d < D; ++d) {
      const T xd = static_cast<T>(x[d]);
      // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the claim
      EXPECT_EQ(std::memcmp(&y[h * D + d], &xd, sizeof(T)), 0) << "pass-through channel " << d;
    }
  }
}

template <typename T>
std::vector<T> heads(const std::vector<double>& x, int64_t H) {
  std::vector<T> out;
  for (int64_t h = 0; h < H; ++h) out.insert(out.end(), x.begin(), x.end());
  return out;
}

rope_freqs load_freqs(const std::string& name, int64_t seq_len = 0) {
  std::vector<std::string> w;
  return rope_frequencies(
      rope_config_from_file(std::string(POSENC_SOURCE_DIR) + "/tests/data/rope/" + name, &w),
      seq_len);
}

}  // namespace

TEST(RopeGolden, PythiaPartialRotaryHalf) {
  auto f = load_freqs("pythia_70m.json");  // D = 64, R = 16
  const int64_t H = 3, D = 64, R = 16;
  const auto x = xvec(D);
  const std::pair<int64_t, const std::vector<double>*> cases[] = {{0, &kPythiaHalfP0},
                                                                  {1, &kPythiaHalfP1},
                                                                  {1000, &kPythiaHalfP1000},
                                                                  {123456, &kPythiaHalfP123456}};
  for (auto [p, golden] : cases) {
    std::vector<int64_t> pos{p};
    auto yd = heads<double>(x, H);
    rope_apply(f, rope_layout::half, rope_angle::exact, pos, yd.data(), 1, H, D);
    expect_rotated(yd, x, *golden, rope_layout::half, H, D, R, 1.0, 9 * kEps);
    auto yf = heads<float>(x, H);
    rope_apply(f, rope_layout::half, rope_angle::exact, pos, yf.data(), 1, H, D);
    expect_rotated(yf, x, *golden, rope_layout::half, H, D, R, 1.0, 5 * 0x1p-24 + 9 * kEps);
    // f32: the angle error is <= 3 x 2^-24 p w (+ 2^-23 in sinf/cosf), w <= 1 here.
    auto yc = heads<double>(x, H);
    rope_apply(f, rope_layout::half, rope_angle::f32, pos, yc.data(), 1, H, D);
    expect_rotated(yc, x, *golden, rope_layout::half, H, D, R, 1.0,
                   3 * 0x1p-24 * static_cast<double>(p) + 0x1p-23 + 9 * kEps);
  }
}

TEST(RopeGolden, QwenYarnHalfWithAttentionFactor) {
  auto f = load_freqs("qwen2_5_7b_yarn.json");
  const auto x = xvec(128);
  std::vector<int64_t> pos{77777};
  auto y = heads<double>(x, 2);
  rope_apply(f, rope_layout::half, rope_angle::exact, pos, y.data(), 1, 2, 128);
  expect_rotated(y, x, kQwenHalfP77777, rope_layout::half, 2, 128, 128, f.attention_factor,
                 9 * kEps);
  std::vector<double> ref(y.size());
  auto xx = heads<double>(x, 2);
  rope_apply_reference(f, rope_layout::half, pos, xx.data(), ref.data(), 1, 2, 128);
  expect_rotated(ref, x, kQwenHalfP77777, rope_layout::half, 2, 128, 128, f.attention_factor,
                 5 * kEps);
}

TEST(RopeGolden, DeepSeekYarnInterleaved) {
  auto f = load_freqs("deepseek_v2.json");
  const auto x = xvec(64);
  std::vector<int64_t> pos{100000};
  auto y = heads<double>(x, 1);
  rope_apply(f, rope_layout::interleaved, rope_angle::exact, pos, y.data(), 1, 1, 64);
  expect_rotated(y, x, kDeepSeekInterleavedP100000, rope_layout::interleaved, 1, 64, 64, 1.0,
                 9 * kEps);
}

TEST(RopeGolden, Llama31AtTenMillion) {
  auto f = load_freqs("llama3_1_8b.json");
  const auto x = xvec(128);
  std::vector<int64_t> pos{10000000};
  auto y = heads<double>(x, 4);
  rope_apply(f, rope_layout::half, rope_angle::exact, pos, y.data(), 1, 4, 128);
  expect_rotated(y, x, kLlama31HalfP10000000, rope_layout::half, 4, 128, 128, 1.0, 9 * kEps);
  // f32 at 1e7 is far off for the fast pairs (angle 1e7 in float has ulp 1): the
  // measured error is large but within the stated bound 3 x 2^-24 p w + 2^-23.
  std::vector<double> cd(64), sd(64), ce(64), se(64);
  rope_cos_sin(f, rope_angle::f32, 10000000, cd.data(), sd.data());
  rope_cos_sin(f, rope_angle::exact, 10000000, ce.data(), se.data());
  double worst = 0;
  for (int i = 0; i < 64; ++i) {
    const double bound = 3 * 0x1p-24 * 1e7 * f.inv_freq[i] + 0x1p-23 + 0x1p-51;
    EXPECT_LE(std::fabs(cd[i] - ce[i]), bound) << i;
    EXPECT_LE(std::fabs(sd[i] - se[i]), bound) << i;
    worst = std::max(worst, std::fabs(cd[i] - ce[i]));
  }
  EXPECT_GT(worst, 1e-3);  // the float32 path really is inaccurate there (documented hazard)
}

// ---------------------------------------------------------------------------------------------
// Angle modes against the binary128 reference.

TEST(RopeAngle, ExactModeErrorUpTo2Pow53) {
  // Positions up to 1e7 (random and adversarial) and a few up to 2^53; theta 1e4 and 1e6.
  rng g(1);
  std::vector<int64_t> pos = {0,
                              1,
                              2,
                              3,
                              355,
                              710,
                              103993,
                              9999999,
                              10000000,
                              int64_t{1} << 40,
                              (int64_t{1} << 53) - 1,
                              int64_t{1} << 53};
  for (int k = 0; k < 200; ++k) pos.push_back(static_cast<int64_t>(g.below(10000001)));
  double worst = 0;
  for (double theta : {1e4, 1e6}) {
    auto f = rope_frequencies(cfg(128, 128, theta));
    std::vector<double> c(64), s(64);
    for (int64_t p : pos) {
      rope_cos_sin(f, rope_angle::exact, p, c.data(), s.data());
      for (int i = 0; i < 64; ++i) {
        long double rc, rs;
        rope_reference_cos_sin(p, f.inv_freq[i], &rc, &rs);
        worst = std::max({worst, static_cast<double>(std::fabs(c[i] - rc)),
                          static_cast<double>(std::fabs(s[i] - rs))});
      }
    }
  }
  EXPECT_LE(worst, 0x1p-51);  // 2 ulp(1): see the error model at the top
  RecordProperty("exact_max_abs_error", std::to_string(worst));
}

TEST(RopeAngle, CompatF32ErrorGrowsWithTheAngle) {
  // |angle_f32 - p w| <= p w (3 x 2^-24); sinf/cosf add <= 2^-23 (1 ulp of 1 plus rounding).
  auto f = rope_frequencies(cfg(128, 128, 10000));
  rng g(2);
  double worst_ratio = 0, worst_small = 0;
  std::vector<float> c(64), s(64);
  for (int k = 0; k < 300; ++k) {
    const int64_t p = static_cast<int64_t>(g.below(10000001));
    rope_cos_sin(f, rope_angle::f32, p, c.data(), s.data());
    for (int i = 0; i < 64; ++i) {
      long double rc, rs;
      rope_reference_cos_sin(p, f.inv_freq[i], &rc, &rs);
      const double e = static_cast<double>(std::max(std::fabs(c[i] - rc), std::fabs(s[i] - rs)));
      const double bound = 3 * 0x1p-24 * static_cast<double>(p) * f.inv_freq[i] + 0x1p-23;
      worst_ratio = std::max(worst_ratio, e / bound);
      if (p < 16) worst_small = std::max(worst_small, e);
    }
  }
  EXPECT_LE(worst_ratio, 1.0);
  // Below 16 the angle has at most 4 integer bits: float is accurate to ~2^-20.
  EXPECT_LE(worst_small, 3 * 0x1p-24 * 16 + 0x1p-23);
}

TEST(RopeAngle, CosSinRowBasics) {
  rope_config c = cfg(8, 8);
  c.type = rope_type::yarn;
  c.factor = 16;
  c.original_max_position_embeddings = 2048;
  auto f = rope_frequencies(c);
  std::vector<double> cs(4), sn(4);
  rope_cos_sin(f, rope_angle::exact, 0, cs.data(), sn.data());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(cs[i], f.attention_factor);  // a cos 0 = a exactly
    EXPECT_EQ(sn[i], 0.0);
  }
  EXPECT_NEAR(f.attention_factor, 0.1 * std::log(16.0) + 1, 1e-15);
  EXPECT_THROW(rope_cos_sin(f, rope_angle::exact, -1, cs.data(), sn.data()), invalid_argument);
  EXPECT_THROW(rope_cos_sin(f, rope_angle::exact, (int64_t{1} << 53) + 1, cs.data(), sn.data()),
               invalid_argument);
  EXPECT_NO_THROW(rope_cos_sin(f, rope_angle::f32, (int64_t{1} << 53) + 1, cs.data(), sn.data()));
}

// ---------------------------------------------------------------------------------------------
// Properties (RapidCheck).

namespace {

struct random_case {
  int64_t T, H, D, R;
  rope_layout layout;
  rope_freqs f;
  std::vector<int64_t> pos;
  std::vector<double> x;
};

// Head dims include the awkward ones (2, 6, 80, 96, 130) and partial widths (R = 24 of 80).
random_case gen_case(bool unit_factor) {
  random_case c;
  const int64_t dims[] = {2, 6, 64, 80, 96, 130};
  c.D = *rc::gen::elementOf(std::vector<int64_t>(std::begin(dims), std::end(dims)));
  c.R = 2 * *rc::gen::inRange<int64_t>(1, c.D / 2 + 1);
  if (c.D == 80 && *rc::gen::arbitrary<bool>()) c.R = 24;
  c.T = *rc::gen::inRange<int64_t>(1, 6);
  c.H = *rc::gen::inRange<int64_t>(1, 4);
  c.layout = *rc::gen::arbitrary<bool>() ? rope_layout::half : rope_layout::interleaved;
  rope_config cf = cfg(c.D, c.R, *rc::gen::elementOf(std::vector<double>{1e4, 5e5, 1e6}));
  if (!unit_factor && c.R >= 4) {
    cf.type = rope_type::yarn;
    cf.factor = *rc::gen::elementOf(std::vector<double>{2, 4, 32});
    cf.original_max_position_embeddings = 4096;
  }
  c.f = rope_frequencies(cf);
  rng g(*rc::gen::arbitrary<uint64_t>());
  for (int64_t t = 0; t < c.T; ++t) c.pos.push_back(static_cast<int64_t>(g.below(1ull << 32)));
  for (int64_t k = 0; k < c.T * c.H * c.D; ++k) c.x.push_back(g.normal());
  return c;
}

double norm(const double* v, int64_t n) {
  long double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<long double>(v[i]) * v[i];
  return static_cast<double>(std::sqrt(s));
}

long double dot(const double* a, const double* b, int64_t n) {
  long double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<long double>(a[i]) * b[i];
  return s;
}

}  // namespace

RC_GTEST_PROP(RopeProp, NormPreservedWithUnitFactor, ()) {
  auto c = gen_case(true);
  auto y = c.x;
  rope_apply(c.f, c.layout, rope_angle::exact, c.pos, y.data(), c.T, c.H, c.D);
  for (int64_t r = 0; r < c.T * c.H; ++r) {
    const double nx = norm(&c.x[r * c.D], c.D), ny = norm(&y[r * c.D], c.D);
    RC_ASSERT(std::fabs(ny - nx) <= 10 * kEps * nx);  // 2 x 5 eps (see the error model)
  }
}

RC_GTEST_PROP(RopeProp, ScoresDependOnlyOnRelativePosition, ()) {
  auto c = gen_case(false);
  const int64_t shift = *rc::gen::inRange<int64_t>(0, 10000000);
  // q = head 0 of token 0, k = head 0 of token T-1; shift both positions by `shift`.
  std::vector<double> q(c.x.begin(), c.x.begin() + c.D), k(c.x.end() - c.D, c.x.end());
  const int64_t m = c.pos.front(), n = c.pos.back(), m2 = m + shift, n2 = n + shift;
  auto q1 = q, k1 = k, q2 = q, k2 = k;
  rope_apply(c.f, c.layout, rope_angle::exact, {&m, 1}, q1.data(), 1, 1, c.D);
  rope_apply(c.f, c.layout, rope_angle::exact, {&n, 1}, k1.data(), 1, 1, c.D);
  rope_apply(c.f, c.layout, rope_angle::exact, {&m2, 1}, q2.data(), 1, 1, c.D);
  rope_apply(c.f, c.layout, rope_angle::exact, {&n2, 1}, k2.data(), 1, 1, c.D);
  const double a2 = c.f.attention_factor * c.f.attention_factor;
  const long double diff = dot(q1.data(), k1.data(), c.D) - dot(q2.data(), k2.data(), c.D);
  // Each rotated vector is off by <= 5 eps a |x| (pairwise bound summed in norm): 4 of them.
  RC_ASSERT(std::fabs(static_cast<double>(diff)) <=
            20 * kEps * a2 * norm(q.data(), c.D) * norm(k.data(), c.D));
}

RC_GTEST_PROP(RopeProp, InverseUndoesForwardAndUnrotateUndoesScaledForward, ()) {
  auto c = gen_case(false);
  auto y = c.x;
  rope_apply(c.f, c.layout, rope_angle::exact, c.pos, y.data(), c.T, c.H, c.D);
  auto z = y;
  rope_unrotate(c.f, c.layout, rope_angle::exact, c.pos, z.data(), c.T, c.H, c.D);
  // a R then R^T / a: two rotations (10 eps) plus the scale roundings (2 eps).
  for (int64_t r = 0; r < c.T * c.H; ++r) {
    const double nx = norm(&c.x[r * c.D], c.D);
    for (int64_t d = 0; d < c.D; ++d)
      RC_ASSERT(std::fabs(z[r * c.D + d] - c.x[r * c.D + d]) <= 12 * kEps * nx);
  }
  // inverse=true is the transpose a R^T: applying it after the forward gives a^2 x.
  const double a2 = c.f.attention_factor * c.f.attention_factor;
  rope_apply(c.f, c.layout, rope_angle::exact, c.pos, y.data(), c.T, c.H, c.D, true);
  for (int64_t r = 0; r < c.T * c.H; ++r) {
    const double nx = norm(&c.x[r * c.D], c.D);
    for (int64_t d = 0; d < c.R; ++d)
      RC_ASSERT(std::fabs(y[r * c.D + d] - a2 * c.x[r * c.D + d]) <= 12 * kEps * a2 * nx);
  }
}

RC_GTEST_PROP(RopeProp, AdjointIdentity, ()) {
  // <a R x, y> = <x, a R^T y>: inverse=true is the backward pass of the forward.
  auto c = gen_case(false);
  rng g(*rc::gen::arbitrary<uint64_t>());
  std::vector<double> yv(c.x.size());
  for (auto& e : yv) e = g.normal();
  auto fx = c.x, by = yv;
  rope_apply(c.f, c.layout, rope_angle::exact, c.pos, fx.data(), c.T, c.H, c.D);
  rope_apply(c.f, c.layout, rope_angle::exact, c.pos, by.data(), c.T, c.H, c.D, true);
  const int64_t n = c.T * c.H * c.D;
  const long double lhs = dot(fx.data(), yv.data(), n), rhs = dot(c.x.data(), by.data(), n);
  RC_ASSERT(std::fabs(static_cast<double>(lhs - rhs)) <=
            10 * kEps * c.f.attention_factor * norm(c.x.data(), n) * norm(yv.data(), n));
}

RC_GTEST_PROP(RopeProp, LayoutsAgreeUnderThePermutationBitForBit, ()) {
  auto c = gen_case(false);
  const auto angle = *rc::gen::arbitrary<bool>() ? rope_angle::exact : rope_angle::f32;
  // interleaved channel 2i <-> half channel i; 2i+1 <-> i + R/2; pass-through unchanged.
  auto xi = c.x;
  const int64_t n = c.R / 2;
  for (int64_t r = 0; r < c.T * c.H; ++r)
    for (int64_t i = 0; i < n; ++i) {
      xi[r * c.D + 2 * i] = c.x[r * c.D + i];
      xi[r * c.D + 2 * i + 1] = c.x[r * c.D + i + n];
    }
  auto yh = c.x;
  rope_apply(c.f, rope_layout::half, angle, c.pos, yh.data(), c.T, c.H, c.D);
  rope_apply(c.f, rope_layout::interleaved, angle, c.pos, xi.data(), c.T, c.H, c.D);
  for (int64_t r = 0; r < c.T * c.H; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      RC_ASSERT(xi[r * c.D + 2 * i] == yh[r * c.D + i]);
      RC_ASSERT(xi[r * c.D + 2 * i + 1] == yh[r * c.D + i + n]);
    }
    for (int64_t d = c.R; d < c.D; ++d) RC_ASSERT(xi[r * c.D + d] == yh[r * c.D + d]);
  }
}

RC_GTEST_PROP(RopeProp, PassThroughChannelsBitExact, ()) {
  auto c = gen_case(false);
  // NaN payloads and signed zeros must survive too: compare bytes.
  for (int64_t r = 0; r < c.T * c.H; ++r)
    for (int64_t d = c.R; d < c.D; ++d)
      if ((r + d) % 3 == 0) c.x[r * c.D + d] = (d % 2) ? -0.0 : std::nan("0x5");
  auto y = c.x;
  std::vector<float> yf(c.x.begin(), c.x.end()), xf = yf;
  rope_apply(c.f, c.layout, rope_angle::exact, c.pos, y.data(), c.T, c.H, c.D);
  rope_apply(c.f, c.layout, rope_angle::f32, c.pos, yf.data(), c.T, c.H, c.D, true);
  for (int64_t r = 0; r < c.T * c.H; ++r)
    for (int64_t d = c.R; d < c.D; ++d) {
      // NOLINTBEGIN(bugprone-suspicious-memory-comparison): bitwise equality is the claim
      RC_ASSERT(std::memcmp(&y[r * c.D + d], &c.x[r * c.D + d], sizeof(double)) == 0);
      RC_ASSERT(std::memcmp(&yf[r * c.D + d], &xf[r * c.D + d], sizeof(float)) == 0);
      // NOLINTEND(bugprone-suspicious-memory-comparison)
    }
}

RC_GTEST_PROP(RopeProp, FastPathMatchesReference, ()) {
  auto c = gen_case(false);
  const bool inverse = *rc::gen::arbitrary<bool>();
  std::vector<double> ref(c.x.size());
  rope_apply_reference(c.f, c.layout, c.pos, c.x.data(), ref.data(), c.T, c.H, c.D, inverse);
  auto y = c.x;
  rope_apply(c.f, c.layout, rope_angle::exact, c.pos, y.data(), c.T, c.H, c.D, inverse);
  std::vector<float> xf(c.x.begin(), c.x.end()), yf = xf;
  std::vector<double> xr(xf.begin(), xf.end()), reff(c.x.size());
  rope_apply_reference(c.f, c.layout, c.pos, xr.data(), reff.data(), c.T, c.H, c.D, inverse);
  rope_apply(c.f, c.layout, rope_angle::exact, c.pos, yf.data(), c.T, c.H, c.D, inverse);
  const double a = c.f.attention_factor;
  for (int64_t r = 0; r < c.T * c.H; ++r)
    for (int64_t d = 0; d < c.R; ++d) {
      const int64_t e = r * c.D + d, o = r * c.D + partner(c.layout, c.R, d);
      const double u = std::fabs(c.x[e]) + std::fabs(c.x[o]);
      RC_ASSERT(std::fabs(y[e] - ref[e]) <= 5 * kEps * a * u + 1e-300);
      const double uf = std::fabs(xr[e]) + std::fabs(xr[o]);
      RC_ASSERT(std::fabs(static_cast<double>(yf[e]) - reff[e]) <= 5 * 0x1p-24 * a * uf + 1e-300);
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel entry points, threads, errors.

TEST(RopeKernel, RotateWithHeadStrideMatchesApply) {
  // rope_rotate on heads embedded in a wider row (stride 100 > D = 80), R = 24.
  auto f = rope_frequencies(cfg(80, 24));
  const int64_t H = 3, stride = 100;
  rng g(5);
  std::vector<double> buf(H * stride), dense(H * 80);
  for (auto& e : buf) e = g.normal();
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < 80; ++d) dense[h * 80 + d] = buf[h * stride + d];
  const auto orig = buf;
  std::vector<double> c(12), s(12);
  rope_cos_sin(f, rope_angle::exact, 4242, c.data(), s.data());
  rope_rotate(rope_layout::interleaved, 24, c.data(), s.data(), buf.data(), H, stride, false);
  const int64_t p = 4242;
  rope_apply(f, rope_layout::interleaved, rope_angle::exact, {&p, 1}, dense.data(), 1, H, 80);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t d = 0; d < 80; ++d) EXPECT_EQ(buf[h * stride + d], dense[h * 80 + d]);
    for (int64_t d = 80; d < stride; ++d) EXPECT_EQ(buf[h * stride + d], orig[h * stride + d]);
  }
}

TEST(RopeKernel, ThreadCountDoesNotChangeResults) {
  auto f = rope_frequencies(cfg(128, 128, 5e5));
  const int64_t T = 700, H = 8, D = 128;
  rng g(9);
  std::vector<int64_t> pos(T);
  for (auto& p : pos) p = static_cast<int64_t>(g.below(1u << 20));
  std::vector<float> x(T * H * D);
  for (auto& e : x) e = static_cast<float>(g.normal());
  const int before = num_threads();
  set_num_threads(1);
  auto a = x;
  rope_apply(f, rope_layout::half, rope_angle::exact, pos, a.data(), T, H, D);
  set_num_threads(4);
  auto b = x;
  rope_apply(f, rope_layout::half, rope_angle::exact, pos, b.data(), T, H, D);
  set_num_threads(before);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(RopeKernel, ArgumentErrors) {
  auto f = rope_frequencies(cfg(64, 32));
  std::vector<double> x(2 * 64);
  std::vector<int64_t> pos{1, 2};
  auto msg = [&](auto fn) -> std::string {
    try {
      fn();
    } catch (const invalid_argument& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(
      msg([&] {
        rope_apply(f, rope_layout::half, rope_angle::exact, {pos.data(), 1}, x.data(), 2, 1, 64);
      }).find("positions must have shape (T,) = (2,), got (1,)"),
      std::string::npos);
  EXPECT_NE(msg([&] {
              rope_apply(f, rope_layout::half, rope_angle::exact, pos, x.data(), 2, 2, 32);
            }).find("D = head_dim = 64"),
            std::string::npos);
  std::vector<int64_t> neg{1, -3};
  EXPECT_NE(msg([&] {
              rope_apply(f, rope_layout::half, rope_angle::exact, neg, x.data(), 2, 1, 64);
            }).find("positions must be >= 0, got -3"),
            std::string::npos);
  EXPECT_THROW(rope_apply(f, rope_layout::half, rope_angle::exact, pos,
                          static_cast<double*>(nullptr), 2, 1, 64),
               invalid_argument);
  auto bad = f;
  bad.inv_freq.pop_back();
  EXPECT_THROW(rope_apply(bad, rope_layout::half, rope_angle::exact, pos, x.data(), 2, 1, 64),
               invalid_argument);
  // Nothing was written by the failed calls.
  for (double v : x) EXPECT_EQ(v, 0.0);
  // Empty inputs are fine.
  EXPECT_NO_THROW(rope_apply(f, rope_layout::half, rope_angle::exact, {}, x.data(), 0, 1, 64));
  EXPECT_THROW(rope_layout_from_name("neox"), invalid_argument);
  EXPECT_THROW(rope_angle_from_name("f16"), invalid_argument);
  EXPECT_EQ(rope_type_from_name("su"), rope_type::longrope);
}

TEST(RopeChecks, AllPass) {
  for (const auto& c : rope_checks()) {
    EXPECT_TRUE(c.passed) << c.name << ": max_error " << c.max_error << " > tolerance "
                          << c.tolerance << " (" << c.detail << ")";
    EXPECT_EQ(c.group, "rope");
  }
}
