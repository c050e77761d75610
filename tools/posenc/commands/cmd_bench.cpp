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
};

struct case_result {
  std::string name, note, limit, error;
  int threads = 0;
  double seconds_min = 0, seconds_median = 0, bytes = 0, flops = 0, footprint = 0;
  double gbps = 0, gflops = 0, fraction_of_bandwidth = NAN, fraction_of_peak = NAN;
  double bandwidth_ref = 0;
  bool reads_only = false;  // bandwidth_ref is a read probe's (else a copy probe's)
};

void run_bench(const bench_opts& o) {
  if (o.threads < 1 || o.threads > 1024) fail("--threads must be in [1, 1024], got {}", o.threads);
  if (o.reps < 1 || o.reps > 1000) fail("--reps must be in [1, 1000], got {}", o.reps);
  if (!(o.min_seconds >= 0) || o.min_seconds > 60)
    fail("--min-seconds must be in [0, 60], got {}", o.min_seconds);
  std::vector<const bench_spec*> selected;
  for (const auto& s : bench_specs()) {
    bool keep = o.filters.empty() && (o.extended || !s.extended);
    for (const auto& f : o.filters) keep |= s.name.find(f) != std::string::npos;
    if (keep) selected.push_back(&s);
  }
  if (o.list) {  // every case; the extended ones marked, since the default run leaves them out
    for (const auto& s : bench_specs())
      if (o.filters.empty() || std::find(selected.begin(), selected.end(), &s) != selected.end())
        std::printf("%s%s\n", s.name.c_str(), s.extended ? "  [extended]" : "");
    return;
  }
  if (o.machine_only) selected.clear();
  if (!o.filters.empty() && selected.empty() && !o.machine_only)
    fail("--filter matched no case; run `posenc bench --list` for the names");
  set_num_threads(o.threads);
  bench_options bo{o.threads, o.quick};

  // Machine limits, measured now. DRAM probe: three arrays of 512 MiB (quick: 64 MiB).
  const size_t dram_bytes = (o.quick ? size_t{64} : size_t{512}) << 20;
  std::fprintf(stderr, "bench: probing memory bandwidth and FMA peak...\n");
  bandwidth_result bw1 = measure_bandwidth(dram_bytes, 1, o.quick ? 2 : 5);
  bandwidth_result bwn = measure_bandwidth(dram_bytes, o.threads, o.quick ? 2 : 5);
  // FMA probe: best of 7 runs of 0.1 s (quick: 3 of 0.02 s); short runs, many of them, so that
  // one clean run is likely on a shared host.
  const double fma_seconds = o.quick ? 0.02 : 0.1;
  const int fma_reps = o.quick ? 3 : 7;
  fma_peak_result fma1 = measure_fma_peak(1, fma_seconds, fma_reps);
  fma_peak_result fman = measure_fma_peak(o.threads, fma_seconds, fma_reps);
  std::map<double, bandwidth_result> footprint_bw;  // footprint -> its probe at o.threads

  std::vector<case_result> results;
  for (auto* s : selected) {
    case_result r;
    r.name = s->name;
    r.threads = o.threads;
    std::fprintf(stderr, "bench: %s\n", s->name.c_str());
    bench_case c = s->make(bo);
    r.note = c.note;
    r.limit = c.limit;
    r.bytes = c.bytes;
    r.flops = c.flops;
    r.footprint = c.footprint_bytes;
    r.reads_only = c.reads_only;
    if (c.validate) r.error = c.validate();
    if (!r.error.empty()) {
      results.push_back(r);
      continue;
    }
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
    results.push_back(r);
  }

  // The limits again, after the cases: a probe that another tenant of the host slowed reads low,
  // and a low limit inflates every fraction. Both readings are kept; the fractions divide by the
  // higher, since interference can only lower a reading (docs/design.md, "Probes before and
  // after the cases").
  const fma_peak_result fma1_before = fma1, fman_before = fman;
  const bandwidth_result bwn_before = bwn;
  const bool timed = std::any_of(results.begin(), results.end(),
                                 [](const case_result& r) { return r.error.empty(); });
  double after_peakn = NAN, after_peak1 = NAN, after_bw = NAN, after_read = NAN;
  double readn = bwn.read_gbps;  // the higher read reading (the copy's is in bwn)
  if (timed) {
    std::fprintf(stderr, "bench: probing the FMA peak and memory bandwidth again...\n");
    const fma_peak_result a1 = measure_fma_peak(1, fma_seconds, fma_reps);
    const fma_peak_result an = measure_fma_peak(o.threads, fma_seconds, fma_reps);
    const bandwidth_result bwa = measure_bandwidth(dram_bytes, o.threads, o.quick ? 2 : 5);
    if (a1.gflops > fma1.gflops) fma1 = a1;
    if (an.gflops > fman.gflops) fman = an;
    readn = std::max(readn, bwa.read_gbps);
    if (bwa.copy_gbps > bwn.copy_gbps) bwn = bwa;
    after_peakn = an.gflops;
    after_peak1 = a1.gflops;
    after_bw = bwa.copy_gbps;
    after_read = bwa.read_gbps;
  }
  const double peak1 = fma1.gflops, peakn = fman.gflops;
  std::vector<std::string> warnings;
  for (auto& r : results) {
    if (!r.error.empty()) continue;
    if (r.bytes > 0) {
      if (r.bandwidth_ref <= 0) r.bandwidth_ref = r.reads_only ? readn : bwn.copy_gbps;
      r.fraction_of_bandwidth = r.gbps / r.bandwidth_ref;
    }
    if (r.flops > 0) r.fraction_of_peak = r.gflops / peakn;
    if (r.limit == "roofline")  // the binding limit: the one the case is closer to
      r.limit = r.fraction_of_peak > r.fraction_of_bandwidth ? "peak" : "bandwidth";
    // No kernel outruns the FMA peak: a fraction above 1 means both probes read low.
    if (r.fraction_of_peak > 1.0)
      warnings.push_back(fmt::format(
          "{} ran at {:.2f} of the FMA peak ({:.1f} of {:.1f} GFLOP/s): both probes read low (the "
          "host was busy), so this run's fractions of the peak overstate; run it again",
          r.name, r.fraction_of_peak, r.gflops, peakn));
  }
  for (const auto& w : warnings) std::fprintf(stderr, "bench: warning: %s\n", w.c_str());

  auto jnum = [](double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  };
  nlohmann::ordered_json j;
  j["machine"] = {
      {"simd", simd_target_name()},
      {"threads", o.threads},
      {"bandwidth_gbps", bwn.copy_gbps},
      {"triad_gbps", bwn.triad_gbps},
      {"read_gbps", readn},
      {"bandwidth_gbps_1thread", bw1.copy_gbps},
      {"triad_gbps_1thread", bw1.triad_gbps},
      {"read_gbps_1thread", bw1.read_gbps},
      {"probe_bytes_per_array", bwn.bytes_per_array},
      {"peak_gflops", peakn},
      {"peak_gflops_1thread", peak1},
      {"probes_before_cases",
       {{"peak_gflops", fman_before.gflops},
        {"peak_gflops_1thread", fma1_before.gflops},
        {"bandwidth_gbps", bwn_before.copy_gbps},
        {"read_gbps", bwn_before.read_gbps}}},
      {"probes_after_cases", timed ? nlohmann::ordered_json{{"peak_gflops", after_peakn},
                                                            {"peak_gflops_1thread", after_peak1},
                                                            {"bandwidth_gbps", after_bw},
                                                            {"read_gbps", after_read}}
                                   : nlohmann::ordered_json(nullptr)},
      {"fma_probe",
       {{"target", fman.target},
        {"lanes", fman.lanes},
        {"chains", fman.chains},
        {"threads", fman.threads},
        {"reps", fman.reps},
        {"seconds_per_rep", fma_seconds},
        {"gflops_median", fman.gflops_median},
        {"gflops_median_1thread", fma1.gflops_median}}}};
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
        {"bandwidth_reference_gbps", jnum(r.bytes > 0 ? r.bandwidth_ref : NAN)},
        {"bandwidth_probe",
         r.bytes > 0 ? nlohmann::json(r.reads_only ? "read" : "copy") : nlohmann::json(nullptr)},
        {"limit", r.limit},
        {"note", r.note}};
    if (!r.error.empty()) c["error"] = r.error;
    j["cases"].push_back(c);
  }
  if (!o.out.empty()) write_file_atomic(o.out, j.dump(2) + "\n");
  int invalid = 0;
  for (const auto& r : results) invalid += !r.error.empty();
  if (o.format == out_format::json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else if (o.format == out_format::csv) {
    std::printf(
        "name,threads,seconds_min,seconds_median,gbps,gflops,fraction_of_bandwidth,fraction_of_"
        "peak\n");
    for (const auto& r : results)
      std::printf("%s,%d,%s,%s,%s,%s,%s,%s\n", r.name.c_str(), r.threads,
                  num(r.seconds_min).c_str(), num(r.seconds_median).c_str(), num(r.gbps).c_str(),
                  num(r.gflops).c_str(), num(r.fraction_of_bandwidth).c_str(),
                  num(r.fraction_of_peak).c_str());
  } else {
    std::printf(
        "machine: %s, %d threads; copy %.1f GB/s (1 thread %.1f), read %.1f GB/s (1 thread %.1f), "
        "triad %.1f GB/s; FMA peak %.1f GFLOP/s (1 thread %.1f; %s, %d float lanes x %d chains, "
        "median %.1f)\n",
        simd_target_name().c_str(), o.threads, bwn.copy_gbps, bw1.copy_gbps, readn, bw1.read_gbps,
        bwn.triad_gbps, peakn, peak1, fman.target.c_str(), fman.lanes, fman.chains,
        fman.gflops_median);
    if (!o.machine_only)
      std::printf("%-40s %10s %10s %9s %9s %8s %s\n", "case", "min ms", "median ms", "GB/s",
                  "GFLOP/s", "fraction", "of");
    for (const auto& r : results) {
      if (!r.error.empty()) {
        std::printf("%-40s INVALID: %s\n", r.name.c_str(), r.error.c_str());
        continue;
      }
      double frac = r.limit == "peak" ? r.fraction_of_peak : r.fraction_of_bandwidth;
      std::printf("%-40s %10.3f %10.3f %9.2f %9.2f %8.3f %s\n", r.name.c_str(), r.seconds_min * 1e3,
                  r.seconds_median * 1e3, r.gbps, r.gflops, frac,
                  r.limit == "peak" ? "peak" : (r.reads_only ? "read bw" : "bw"));
    }
  }
  std::fflush(stdout);
  if (invalid) throw exit_with{1};
}

const bool registered = register_command(80, [](CLI::App& app) {
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
