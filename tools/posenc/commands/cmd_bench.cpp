// posenc bench: measures this machine's limits (STREAM copy/triad with 1 and N threads on arrays
// far beyond the last-level cache, an FMA-peak loop), then each registered kernel case,
// validated against its reference before timing, with warm-up, several repetitions, minimum and
// median. Fractions are of limits probed in the same process.
#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "bench.hpp"
#include "cli.hpp"
#include "posenc/core/error.hpp"
#include "posenc/core/file.hpp"
#include "posenc/core/machine.hpp"
#include "posenc/core/threads.hpp"

namespace posenc::cli {
namespace {

std::vector<bench_spec>& specs() {
  static std::vector<bench_spec> s;
  return s;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct bench_opts {
  out_format format = out_format::text;
  int threads = 2;
  int reps = 5;
  double min_seconds = 0.5;
  std::vector<std::string> filters;
  bool quick = false;
  std::string out;
  bool list = false;
  bool machine_only = false;
  bool extended = false;
  bool gemm = true;  // --no-gemm turns the GEMM probe off
};

struct case_result {
  std::string name, note, limit, error;
  int threads = 0;
  double seconds_min = 0, seconds_median = 0, bytes = 0, flops = 0, footprint = 0;
  double gbps = 0, gflops = 0, fraction_of_bandwidth = NAN, fraction_of_peak = NAN;
  double bandwidth_ref = 0;
  bool reads_only = false;  // bandwidth_ref is a read probe's (else a copy probe's)
  gemm_shape gemm;          // the case's products (T == 0: none)
  double gemm_gflops = NAN, fraction_of_gemm = NAN;
};

// The GEMM probe's results by shape, each measured once, right after the first case that has it.
using gemm_cache = std::map<gemm_shape, gemm_result>;

// The cases a run selects: every non-extended case (all with --extended), or those --filter
// names.
std::vector<const bench_spec*> select_cases(const bench_opts& o) {
  std::vector<const bench_spec*> selected;
  for (const auto& s : bench_specs()) {
    bool keep = o.filters.empty() && (o.extended || !s.extended);
    for (const auto& f : o.filters) keep |= s.name.find(f) != std::string::npos;
    if (keep) selected.push_back(&s);
  }
  return selected;
}

// --list: every case; the extended ones marked, since the default run leaves them out.
void list_cases(const bench_opts& o, const std::vector<const bench_spec*>& selected) {
  for (const auto& s : bench_specs())
    if (o.filters.empty() || std::find(selected.begin(), selected.end(), &s) != selected.end())
      std::printf("%s%s\n", s.name.c_str(), s.extended ? "  [extended]" : "");
}

// The machine's limits: the probes before the cases, each raised to the reading after the cases
// where that is higher (probe_again), and both readings as taken.
struct machine_limits {
  size_t dram_bytes = 0;   // per array of the DRAM probe
  double fma_seconds = 0;  // per run of the FMA probe
  int fma_reps = 0;        // runs of the FMA probe
  bandwidth_result bw1;    // 1 thread, before the cases
  bandwidth_result bwn;    // o.threads: the higher copy reading of before and after
  fma_peak_result fma1;    // 1 thread: the higher of before and after
  fma_peak_result fman;    // o.threads: the higher of before and after
  fma_peak_result bf16n;   // o.threads: vdpbf16ps rate, the higher of before and after (gflops
                           // 0 without AVX512_BF16): the limit of the bfloat16-products cases
  double readn = 0;        // o.threads: the higher read reading
  fma_peak_result fma1_before, fman_before;
  bandwidth_result bwn_before;
  bool timed = false;  // some case was timed, so the limits were probed again
  double after_peakn = NAN, after_peak1 = NAN, after_bw = NAN, after_read = NAN;
};

// Machine limits, measured now. DRAM probe: three arrays of 512 MiB (quick: 64 MiB).
machine_limits probe_machine(const bench_opts& o) {
  machine_limits m;
  m.dram_bytes = (o.quick ? size_t{64} : size_t{512}) << 20;
  std::fprintf(stderr, "bench: probing memory bandwidth and FMA peak...\n");
  m.bw1 = measure_bandwidth(m.dram_bytes, 1, o.quick ? 2 : 5);
  m.bwn = measure_bandwidth(m.dram_bytes, o.threads, o.quick ? 2 : 5);
  // FMA probe: best of 7 runs of 0.1 s (quick: 3 of 0.02 s); short runs, many of them, so that
  // one clean run is likely on a shared host.
  m.fma_seconds = o.quick ? 0.02 : 0.1;
  m.fma_reps = o.quick ? 3 : 7;
  m.fma1 = measure_fma_peak(1, m.fma_seconds, m.fma_reps);
  m.fman = measure_fma_peak(o.threads, m.fma_seconds, m.fma_reps);
  m.bf16n = measure_bf16_dot_peak(o.threads, m.fma_seconds, m.fma_reps);
  m.readn = m.bwn.read_gbps;
  return m;
}

// One case: built, validated, warmed up and timed; its footprint's own bandwidth probed once
// per footprint (footprint_bw: footprint -> its probe at o.threads).
case_result run_case(const bench_spec& s, const bench_options& bo, const bench_opts& o,
                     std::map<double, bandwidth_result>& footprint_bw, gemm_cache& gemms) {
  case_result r;
  r.name = s.name;
  r.threads = o.threads;
  std::fprintf(stderr, "bench: %s\n", s.name.c_str());
  bench_case c = s.make(bo);
  r.note = c.note;
  r.limit = c.limit;
  r.bytes = c.bytes;
  r.flops = c.flops;
  r.footprint = c.footprint_bytes;
  r.reads_only = c.reads_only;
  if (c.validate) r.error = c.validate();
  if (!r.error.empty()) return r;
  std::vector<double> times;
  if (c.once) {
    const double t0 = now();
    c.run();
    times.push_back(now() - t0);
  } else {
    c.run();  // warm-up
    const double start = now();
    while (static_cast<int>(times.size()) < o.reps ||
           (now() - start < o.min_seconds && times.size() < 1000)) {
      const double t0 = now();
      c.run();
      times.push_back(now() - t0);
    }
  }
  if (c.after) r.note += c.after();
  std::sort(times.begin(), times.end());
  r.seconds_min = times.front();
  r.seconds_median = times[times.size() / 2];
  r.gbps = r.bytes / r.seconds_min / 1e9;
  r.gflops = r.flops / r.seconds_min / 1e9;
  if (r.bytes > 0 && c.footprint_bytes > 0) {  // a footprint's own rate, probed once
    auto it = footprint_bw.find(c.footprint_bytes);
    if (it == footprint_bw.end()) {
      // Two arrays whose sum is the footprint: the copy probe touches the same bytes.
      size_t per = static_cast<size_t>(c.footprint_bytes / 2);
      it = footprint_bw.emplace(c.footprint_bytes, measure_bandwidth(per, o.threads)).first;
    }
    r.bandwidth_ref = c.reads_only ? it->second.read_gbps : it->second.copy_gbps;
  }
  r.gemm = c.gemm;
  const auto libs = gemm_libraries();
  const bool have_gemm = std::any_of(
      libs.begin(), libs.end(), [](const gemm_library_info& l) { return l.unavailable.empty(); });
  if (o.gemm && have_gemm && c.gemm.T > 0 && !gemms.count(c.gemm)) {
    std::fprintf(stderr, "bench: GEMM probe on its products (T=%lld S=%lld D=%lld, %s)\n",
                 static_cast<long long>(c.gemm.T), static_cast<long long>(c.gemm.S),
                 static_cast<long long>(c.gemm.D), c.gemm.backward ? "backward" : "forward");
    gemms.emplace(c.gemm, measure_gemm(c.gemm, o.threads, o.min_seconds, o.reps));
  }
  if (auto it = gemms.find(c.gemm); c.gemm.T > 0 && it != gemms.end() && it->second.gflops > 0) {
    r.gemm_gflops = it->second.gflops;
    r.fraction_of_gemm = r.gflops / r.gemm_gflops;
  }
  return r;
}

// The limits again, after the cases: a probe that another tenant of the host slowed reads low,
// and a low limit inflates every fraction. Both readings are kept; the fractions divide by the
// higher, since interference can only lower a reading (docs/decisions.md, "Probes before and
// after the cases").
void probe_again(const bench_opts& o, const std::vector<case_result>& results, machine_limits& m) {
  m.fma1_before = m.fma1, m.fman_before = m.fman;
  m.bwn_before = m.bwn;
  m.timed = std::any_of(results.begin(), results.end(),
                        [](const case_result& r) { return r.error.empty(); });
  if (!m.timed) return;
  std::fprintf(stderr, "bench: probing the FMA peak and memory bandwidth again...\n");
  const fma_peak_result a1 = measure_fma_peak(1, m.fma_seconds, m.fma_reps);
  const fma_peak_result an = measure_fma_peak(o.threads, m.fma_seconds, m.fma_reps);
  const fma_peak_result bn = measure_bf16_dot_peak(o.threads, m.fma_seconds, m.fma_reps);
  if (bn.gflops > m.bf16n.gflops) m.bf16n = bn;
  const bandwidth_result bwa = measure_bandwidth(m.dram_bytes, o.threads, o.quick ? 2 : 5);
  if (a1.gflops > m.fma1.gflops) m.fma1 = a1;
  if (an.gflops > m.fman.gflops) m.fman = an;
  m.readn = std::max(m.readn, bwa.read_gbps);
  if (bwa.copy_gbps > m.bwn.copy_gbps) m.bwn = bwa;
  m.after_peakn = an.gflops;
  m.after_peak1 = a1.gflops;
  m.after_bw = bwa.copy_gbps;
  m.after_read = bwa.read_gbps;
}

// Each timed case's fractions of the limits and its binding limit; returns the warnings (a case
// above the FMA peak).
std::vector<std::string> apply_limits(std::vector<case_result>& results, const machine_limits& m) {
  const double peakn = m.fman.gflops;
  std::vector<std::string> warnings;
  for (auto& r : results) {
    if (!r.error.empty()) continue;
    if (r.bytes > 0) {
      if (r.bandwidth_ref <= 0) r.bandwidth_ref = r.reads_only ? m.readn : m.bwn.copy_gbps;
      r.fraction_of_bandwidth = r.gbps / r.bandwidth_ref;
    }
    if (r.flops > 0) r.fraction_of_peak = r.gflops / peakn;
    // bfloat16 products run vdpbf16ps: their limit is that instruction's rate (twice the FMA
    // peak's), when the CPU has it; else they ran float32 products ("peak").
    if (r.limit == "bf16 peak") {
      if (m.bf16n.gflops > 0)
        r.fraction_of_peak = r.gflops / m.bf16n.gflops;
      else
        r.limit = "peak";
    }
    if (r.limit == "roofline")  // the binding limit: the one the case is closer to
      r.limit = r.fraction_of_peak > r.fraction_of_bandwidth ? "peak" : "bandwidth";
    // No kernel outruns the FMA peak: a fraction above 1 means both probes read low.
    if (r.fraction_of_peak > 1.0)
      warnings.push_back(fmt::format(
          "{} ran at {:.2f} of the {} ({:.1f} GFLOP/s): both probes read low (the host was busy), "
          "so this run's fractions of the peak overstate; run it again",
          r.name, r.fraction_of_peak, r.limit == "bf16 peak" ? "bfloat16 dot peak" : "FMA peak",
          r.gflops));
  }
  return warnings;
}

// The GEMM probe: the libraries it looked for, and each shape's readings.
nlohmann::ordered_json gemm_json(const bench_opts& o, const gemm_cache& gemms) {
  nlohmann::ordered_json libs = nlohmann::json::array();
  for (const auto& l : gemm_libraries()) {
    nlohmann::ordered_json j = {{"name", l.name}};
    if (l.unavailable.empty())
      j["version"] = l.version, j["file"] = l.file;
    else
      j["unavailable"] = l.unavailable;
    libs.push_back(j);
  }
  nlohmann::ordered_json shapes = nlohmann::json::array();
  for (const auto& [shape, g] : gemms) {
    nlohmann::ordered_json readings = nlohmann::json::array();
    for (const auto& r : g.readings)
      readings.push_back({{"library", r.library},
                          {"threading", r.threading},
                          {"gflops", r.gflops},
                          {"seconds", r.seconds}});
    shapes.push_back({{"T", shape.T},
                      {"S", shape.S},
                      {"D", shape.D},
                      {"pass", shape.backward ? "backward" : "forward"},
                      {"heads", g.heads},
                      {"threads", g.threads},
                      {"gflops", g.gflops > 0 ? nlohmann::json(g.gflops) : nlohmann::json(nullptr)},
                      {"library", g.library},
                      {"threading", g.threading},
                      {"readings", readings},
                      {"failures", g.failures}});
  }
  return {{"enabled", o.gemm},
          {"products",
           "per head, full T x S: forward Q K^T and P V (4 T S D FLOPs), backward Q K^T, dO V^T, "
           "P^T dO, dS^T Q and dS K (10 T S D FLOPs); fraction_of_gemm = the case's causal GFLOP/s "
           "over this rate"},
          {"libraries", libs},
          {"shapes", shapes}};
}

// A half-precision case's float32 twin: the same name without its suffix ("/kv=f16",
// "/kv=bf16": keys and values stored in half precision; "/qkv=bf16/products=bf16": bfloat16
// q, k, v and products), or "" for a float32 case.
std::string float32_twin(const std::string& name) {
  for (const std::string sfx : {"/kv=f16", "/kv=bf16", "/qkv=bf16/products=bf16"})
    if (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0)
      return name.substr(0, name.size() - sfx.size());
  return "";
}

// The twin's result in the same run (nullptr when absent or invalid).
const case_result* twin_result(const case_result& h, const std::vector<case_result>& results) {
  const std::string twin = float32_twin(h.name);
  if (twin.empty() || !h.error.empty()) return nullptr;
  for (const auto& f : results)
    if (f.name == twin && f.error.empty()) return &f;
  return nullptr;
}

// A half-precision case reads half the bytes of its float32 twin for the same products (and
// bfloat16 products run two multiply-adds per lane where the CPU has vdpbf16ps): slower than the
// twin is flagged with both times and the ratio. A compute-bound twin (MQA, speculative T = 4)
// also pays the widening of every element, a few percent; far more is a slow path (a spin, a
// serialised or oversubscribed step) or a busy host. A warning, not a test: a shared host can
// slow any one case.
std::vector<std::string> half_precision_warnings(const std::vector<case_result>& results) {
  std::vector<std::string> warnings;
  for (const auto& h : results)
    if (const case_result* f = twin_result(h, results); f && h.seconds_min > f->seconds_min)
      warnings.push_back(fmt::format(
          "{} took {:.3f} ms, {:.2f}x its float32 twin {} ({:.3f} ms; medians {:.3f} and "
          "{:.3f}): half precision halves the bytes read and bfloat16 products double the "
          "multiply-add rate; a compute-bound case with float32 products also widens every "
          "element, but more than a few percent slower is a slow path or a busy host (run it "
          "again)",
          h.name, h.seconds_min * 1e3, h.seconds_min / f->seconds_min, f->name,
          f->seconds_min * 1e3, h.seconds_median * 1e3, f->seconds_median * 1e3));
  return warnings;
}

nlohmann::ordered_json machine_json(const bench_opts& o, const machine_limits& m) {
  return {{"simd", simd_target_name()},
          {"threads", o.threads},
          {"bandwidth_gbps", m.bwn.copy_gbps},
          {"triad_gbps", m.bwn.triad_gbps},
          {"read_gbps", m.readn},
          {"bandwidth_gbps_1thread", m.bw1.copy_gbps},
          {"triad_gbps_1thread", m.bw1.triad_gbps},
          {"read_gbps_1thread", m.bw1.read_gbps},
          {"probe_bytes_per_array", m.bwn.bytes_per_array},
          {"peak_gflops", m.fman.gflops},
          {"peak_gflops_1thread", m.fma1.gflops},
          {"bf16_dot_peak_gflops",
           m.bf16n.gflops > 0 ? nlohmann::json(m.bf16n.gflops) : nlohmann::json(nullptr)},
          {"probes_before_cases",
           {{"peak_gflops", m.fman_before.gflops},
            {"peak_gflops_1thread", m.fma1_before.gflops},
            {"bandwidth_gbps", m.bwn_before.copy_gbps},
            {"read_gbps", m.bwn_before.read_gbps}}},
          {"probes_after_cases",
           m.timed ? nlohmann::ordered_json{{"peak_gflops", m.after_peakn},
                                            {"peak_gflops_1thread", m.after_peak1},
                                            {"bandwidth_gbps", m.after_bw},
                                            {"read_gbps", m.after_read}}
                   : nlohmann::ordered_json(nullptr)},
          {"fma_probe",
           {{"target", m.fman.target},
            {"lanes", m.fman.lanes},
            {"chains", m.fman.chains},
            {"threads", m.fman.threads},
            {"reps", m.fman.reps},
            {"seconds_per_rep", m.fma_seconds},
            {"gflops_median", m.fman.gflops_median},
            {"gflops_median_1thread", m.fma1.gflops_median}}}};
}

// The results as --out and --format json write them (non-finite numbers as null).
nlohmann::ordered_json bench_json(const bench_opts& o, const machine_limits& m,
                                  const gemm_cache& gemms, const std::vector<std::string>& warnings,
                                  const std::vector<case_result>& results) {
  auto jnum = [](double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  };
  nlohmann::ordered_json j;
  j["machine"] = machine_json(o, m);
  j["machine"]["gemm"] = gemm_json(o, gemms);
  j["warnings"] = warnings;
  j["cases"] = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::ordered_json c = {
        {"name", r.name},
        {"threads", r.threads},
        {"seconds_min", jnum(r.seconds_min)},
        {"seconds_median", jnum(r.seconds_median)},
        {"bytes", r.bytes},
        {"flops", r.flops},
        {"gbps", jnum(r.bytes > 0 ? r.gbps : NAN)},
        {"gflops", jnum(r.flops > 0 ? r.gflops : NAN)},
        {"fraction_of_bandwidth", jnum(r.fraction_of_bandwidth)},
        {"fraction_of_peak", jnum(r.fraction_of_peak)},
        {"gemm_gflops", jnum(r.gemm_gflops)},
        {"fraction_of_gemm", jnum(r.fraction_of_gemm)},
        {"bandwidth_reference_gbps", jnum(r.bytes > 0 ? r.bandwidth_ref : NAN)},
        {"bandwidth_probe",
         r.bytes > 0 ? nlohmann::json(r.reads_only ? "read" : "copy") : nlohmann::json(nullptr)},
        {"limit", r.limit},
        {"note", r.note}};
    if (const case_result* f = twin_result(r, results)) {
      c["float32_twin"] = f->name;
      c["speedup_over_twin"] = jnum(f->seconds_min / r.seconds_min);
      c["speedup_over_twin_median"] = jnum(f->seconds_median / r.seconds_median);
    }
    if (!r.error.empty()) c["error"] = r.error;
    j["cases"].push_back(c);
  }
  return j;
}

// --format csv: one row per case.
void print_csv(const std::vector<case_result>& results) {
  std::printf(
      "name,threads,seconds_min,seconds_median,gbps,gflops,fraction_of_bandwidth,fraction_of_"
      "peak,fraction_of_gemm\n");
  for (const auto& r : results)
    std::printf("%s,%d,%s,%s,%s,%s,%s,%s,%s\n", r.name.c_str(), r.threads,
                num(r.seconds_min).c_str(), num(r.seconds_median).c_str(), num(r.gbps).c_str(),
                num(r.gflops).c_str(), num(r.fraction_of_bandwidth).c_str(),
                num(r.fraction_of_peak).c_str(), num(r.fraction_of_gemm).c_str());
}

// --format text: the machine's limits, then one line per case with its fraction of its limit.
void print_text(const bench_opts& o, const machine_limits& m, const gemm_cache& gemms,
                const std::vector<case_result>& results) {
  std::printf(
      "machine: %s, %d threads; copy %.1f GB/s (1 thread %.1f), read %.1f GB/s (1 thread %.1f), "
      "triad %.1f GB/s; FMA peak %.1f GFLOP/s (1 thread %.1f; %s, %d float lanes x %d chains, "
      "median %.1f)\n",
      simd_target_name().c_str(), o.threads, m.bwn.copy_gbps, m.bw1.copy_gbps, m.readn,
      m.bw1.read_gbps, m.bwn.triad_gbps, m.fman.gflops, m.fma1.gflops, m.fman.target.c_str(),
      m.fman.lanes, m.fman.chains, m.fman.gflops_median);
  if (m.bf16n.gflops > 0)
    std::printf(
        "bfloat16 dot peak (vdpbf16ps, 2 multiply-adds per float32 lane): %.1f GFLOP/s "
        "(median %.1f)\n",
        m.bf16n.gflops, m.bf16n.gflops_median);
  for (const auto& [shape, g] : gemms)
    std::printf(
        "GEMM %s T=%lld S=%lld D=%lld: %.1f GFLOP/s (%s, %s threads; %.2f of the FMA peak)\n",
        shape.backward ? "backward" : "forward", static_cast<long long>(shape.T),
        static_cast<long long>(shape.S), static_cast<long long>(shape.D), g.gflops,
        g.library.c_str(), g.threading == "heads" ? "heads split over" : "library",
        g.gflops / m.fman.gflops);
  if (!o.machine_only)
    std::printf("%-40s %10s %10s %9s %9s %8s %-7s %s\n", "case", "min ms", "median ms", "GB/s",
                "GFLOP/s", "fraction", "of", "of GEMM");
  for (const auto& r : results) {
    if (!r.error.empty()) {
      std::printf("%-40s INVALID: %s\n", r.name.c_str(), r.error.c_str());
      continue;
    }
    double frac =
        r.limit == "peak" || r.limit == "bf16 peak" ? r.fraction_of_peak : r.fraction_of_bandwidth;
    std::printf(
        "%-40s %10.3f %10.3f %9.2f %9.2f %8.3f %-7s %s\n", r.name.c_str(), r.seconds_min * 1e3,
        r.seconds_median * 1e3, r.gbps, r.gflops, frac,
        r.limit == "peak"        ? "peak"
        : r.limit == "bf16 peak" ? "bf16 pk"
                                 : (r.reads_only ? "read bw" : "bw"),
        std::isfinite(r.fraction_of_gemm) ? fmt::format("{:.3f}", r.fraction_of_gemm).c_str() : "");
  }
  for (const auto& r : results)
    if (const case_result* f = twin_result(r, results))
      std::printf("%s: %.2fx its float32 twin (minimum times; medians %.2fx)\n", r.name.c_str(),
                  f->seconds_min / r.seconds_min, f->seconds_median / r.seconds_median);
}

void run_bench(const bench_opts& o) {
  if (o.threads < 1 || o.threads > 1024) fail("--threads must be in [1, 1024], got {}", o.threads);
  if (o.reps < 1 || o.reps > 1000) fail("--reps must be in [1, 1000], got {}", o.reps);
  if (!(o.min_seconds >= 0) || o.min_seconds > 60)
    fail("--min-seconds must be in [0, 60], got {}", o.min_seconds);
  std::vector<const bench_spec*> selected = select_cases(o);
  if (o.list) {
    list_cases(o, selected);
    return;
  }
  if (o.machine_only) selected.clear();
  if (!o.filters.empty() && selected.empty() && !o.machine_only)
    fail("--filter matched no case; run `posenc bench --list` for the names");
  set_num_threads(o.threads);
  bench_options bo{o.threads, o.quick};

  machine_limits m = probe_machine(o);
  std::map<double, bandwidth_result> footprint_bw;  // footprint -> its probe at o.threads
  gemm_cache gemms;
  std::vector<case_result> results;
  for (auto* s : selected) results.push_back(run_case(*s, bo, o, footprint_bw, gemms));
  probe_again(o, results, m);
  std::vector<std::string> warnings = apply_limits(results, m);
  for (auto& w : half_precision_warnings(results)) warnings.push_back(std::move(w));
  for (const auto& w : warnings) std::fprintf(stderr, "bench: warning: %s\n", w.c_str());

  const nlohmann::ordered_json j = bench_json(o, m, gemms, warnings, results);
  if (!o.out.empty()) write_file_atomic(o.out, j.dump(2) + "\n");
  int invalid = 0;
  for (const auto& r : results) invalid += !r.error.empty();
  if (o.format == out_format::json)
    std::printf("%s\n", j.dump(2).c_str());
  else if (o.format == out_format::csv)
    print_csv(results);
  else
    print_text(o, m, gemms, results);
  std::fflush(stdout);
  if (invalid) throw exit_with{1};
}

const bool registered_cmd_bench = register_command(80, [](CLI::App& app) {
  auto o = std::make_shared<bench_opts>();
  auto* sub = app.add_subcommand("bench", "Measure machine limits and kernel speed against them");
  add_format_option(sub, o->format);
  sub->add_option("--threads", o->threads, "Threads for the kernels and the probes (default 2)");
  sub->add_option("--reps", o->reps, "Timed repetitions per case (at least; default 5)");
  sub->add_option("--min-seconds", o->min_seconds, "Keep repeating until this much time (0.5)");
  sub->add_option("--filter", o->filters, "Run only cases whose name contains this (repeatable)");
  sub->add_option("--out", o->out, "Also write the JSON results to this file");
  sub->add_flag("--quick", o->quick, "Small shapes and short probes (for tests)");
  sub->add_flag("--list", o->list, "List the case names and exit");
  sub->add_flag("--extended", o->extended,
                "Also run the extended cases (T = S = 8192 and 16384 prefill, S = 65536 decode: "
                "minutes, not seconds)");
  sub->add_flag("!--no-gemm", o->gemm,
                "Do not time a tuned GEMM (oneDNN or OpenBLAS, when present) on each attention "
                "case's products");
  sub->add_flag("--machine-only", o->machine_only,
                "Measure the machine's limits (memory bandwidth, FMA peak) and run no case");
  sub->callback([o] { run_bench(*o); });
});

}  // namespace

bool register_bench_case(bench_spec spec) {
  specs().push_back(std::move(spec));
  std::stable_sort(specs().begin(), specs().end(),
                   [](auto& a, auto& b) { return a.order < b.order; });
  return true;
}

const std::vector<bench_spec>& bench_specs() {
  return specs();
}

void bench_fill(std::vector<float>& v, uint64_t seed) {
  parallel_for(
      static_cast<int64_t>(v.size()),
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          uint64_t z = seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
          z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
          z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
          z ^= z >> 31;
          v[static_cast<size_t>(i)] =
              static_cast<float>(static_cast<double>(z >> 40) * 0x1p-23 - 1);
        }
      },
      1 << 16);
}

}  // namespace posenc::cli
