// Stream harness for a Verilated core with AXI4 master ports (the external-buffer build): beats from a file
// into `i`, beats from `o` into a file, and every master port mem0__ .. mem<K-1>__ answered by an
// axi::Ram (axi_ram.h) with latency, back-pressure and reordering.
//
// Built by wanreduce.sim.verilator.axi_harness with IN_BITS, OUT_BITS, HAS_CTL, HAS_COUNTERS (the core's
// mem_errors and mem_drops outputs), MEM_PORTS and LANES (bytes per
// data beat) defined. Usage: axi_harness KEY=VALUE ... (in, out, n_in, seed, idle, bp, max_cycles, drain,
// reset_cycles, ctl_w, n_ctl_w, ctl_r, n_ctl_r, mem_bytes, lat_lo, lat_hi, pause, reorder, budget, bad,
// settle); prints one JSON object with the run's statistics on stdout. `settle`: no input beat is offered
// before that cycle of the streaming phase (a core that holds its input after reset, e.g. while clearing
// its slot states, is then measured from its first beat on).
//
// Per cycle: the input beat and o__ready are set and each memory drives its slave outputs; clk=0 + eval()
// settles the master's outputs; the stream handshakes are sampled and each memory observes its port; then
// clk=1 + eval() is the rising edge. The run ends when every input beat is in, every memory is idle and
// o__valid has been low for `drain` cycles; at max_cycles; or at the first violation of the AXI rules.

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "Vtop.h"
#include "axi_ram.h"
#include "driver_io.h"
#include "ports.h"
#include "verilated.h"

#ifndef HAS_CTL
#define HAS_CTL 1
#endif
#ifndef HAS_COUNTERS
#define HAS_COUNTERS 1
#endif

static uint8_t wbuf[MEM_PORTS][LANES + 8];

int main(int argc, char** argv) {
    const Args args("axi_harness", argc, argv);

    const StreamOptions opts(args);
    const auto [n_in, max_cycles, drain, reset_cycles, seed, idle_thr, bp_thr] = opts;
    const uint64_t settle = args.num("settle", "0");
    axi::Rng rng_in(seed * 2 + 1), rng_out(seed * 2 + 2);

    std::vector<std::unique_ptr<axi::Ram>> rams;
    for (int k = 0; k < MEM_PORTS; ++k) {
        axi::Config c;
        c.mem_bytes = args.num("mem_bytes", "4294967296");
        c.lanes = LANES;
        c.lat_lo = static_cast<uint32_t>(args.num("lat_lo", "1"));
        c.lat_hi = static_cast<uint32_t>(args.num("lat_hi", "1"));
        c.pause = static_cast<uint32_t>(args.num("pause", "0"));
        c.reorder = args.num("reorder", "0") != 0;
        c.budget = static_cast<uint32_t>(args.num("budget", "0"));
        c.seed = seed * 16 + 3 + k;
        rams.emplace_back(new axi::Ram(c));
    }
    {  // bad=PORT:ADDR,PORT:ADDR
        std::string b = args.str("bad");
        size_t pos = 0;
        while (pos < b.size()) {
            size_t end = b.find(',', pos);
            if (end == std::string::npos) end = b.size();
            std::string item = b.substr(pos, end - pos);
            size_t colon = item.find(':');
            if (colon == std::string::npos) {
                std::fprintf(stderr, "axi_harness: bad=%s is not PORT:ADDR\n", item.c_str());
                return 3;
            }
            const unsigned long port = std::strtoul(item.substr(0, colon).c_str(), nullptr, 10);
            if (port >= MEM_PORTS) {
                std::fprintf(stderr, "axi_harness: no memory port %lu\n", port);
                return 3;
            }
            rams[port]->bad.insert(std::strtoull(item.substr(colon + 1).c_str(), nullptr, 10));
            pos = end + 1;
        }
    }

    std::vector<uint8_t> in = read_beats(args, n_in);
    std::vector<uint8_t> out;
    out.reserve(n_in * OUT_BYTES + OUT_BYTES);

    auto ctx = std::make_unique<VerilatedContext>();
    auto top = std::make_unique<Vtop>(ctx.get());
    std::vector<axi::PortIo> io = {AXI_PORTS(top, wbuf)};

    const axi::SlaveOut quiet{};
    for (auto& p : io) p.drive(quiet);
    start_stream<true, bool(HAS_CTL)>(args, top.get(), reset_cycles);

    auto t0 = std::chrono::steady_clock::now();
    uint64_t cycle = 0, in_idx = 0, quiet_from = 0;
    uint64_t first_in = UINT64_MAX, last_in = UINT64_MAX, last_out = UINT64_MAX;
    bool presenting = false, timed_out = false;
    int bad_port = -1;
    uint8_t obuf[OUT_BYTES + 8];
    axi::SlaveOut s[MEM_PORTS];
    axi::MasterOut m[MEM_PORTS];
    while (true) {
        if (!presenting && in_idx < n_in && cycle >= settle && rng_in.next() >= idle_thr) {
            put_port(top->i___05Fpayload, &in[in_idx * IN_BYTES], IN_BYTES);
            presenting = true;
        }
        top->i___05Fvalid = presenting;
        top->o___05Fready = rng_out.next() >= bp_thr;
        for (int k = 0; k < MEM_PORTS; ++k) {
            s[k] = axi::SlaveOut{};
            rams[k]->drive(s[k]);
            io[k].drive(s[k]);
        }
        top->clk = 0;
        top->eval();
        const bool in_fire = presenting && top->i___05Fready;
        if (top->o___05Fvalid) {
            quiet_from = cycle;
            if (top->o___05Fready) {
                get_port(top->o___05Fpayload, obuf, OUT_BYTES);
                out.insert(out.end(), obuf, obuf + OUT_BYTES);
                last_out = cycle;
            }
        }
        bool all_idle = true;
        for (int k = 0; k < MEM_PORTS; ++k) {
            io[k].sample(m[k]);
            rams[k]->observe(m[k]);
            if (!rams[k]->error.empty() && bad_port < 0) bad_port = k;
            all_idle &= rams[k]->idle();
        }
        top->clk = 1;
        top->eval();
        if (in_fire) {
            if (first_in == UINT64_MAX) first_in = cycle;
            last_in = cycle;
            presenting = false;
            if (++in_idx == n_in) quiet_from = cycle;
        }
        if (!all_idle) quiet_from = cycle;
        ++cycle;
        if (bad_port >= 0) break;
        if (stream_over(opts, cycle, in_idx, quiet_from, timed_out)) break;
    }
    auto t1 = std::chrono::steady_clock::now();
    top->i___05Fvalid = 0;
    top->o___05Fready = 0;
    for (auto& p : io) p.drive(quiet);

    std::vector<uint32_t> ctl_reads;
#if HAS_CTL
    if (bad_port < 0) ctl_read_all(args, top.get(), ctl_reads);
#endif
#if HAS_COUNTERS
    const uint64_t mem_errors = static_cast<uint64_t>(top->mem_errors);
    const uint64_t mem_drops = static_cast<uint64_t>(top->mem_drops);
#else
    const uint64_t mem_errors = 0, mem_drops = 0;
#endif
    top->final();
    write_file(args.prog, args.str("out"), out.data(), out.size());

    const double secs = std::chrono::duration<double>(t1 - t0).count();
    auto i64 = [](uint64_t v) { return v == UINT64_MAX ? (int64_t)-1 : (int64_t)v; };
    std::printf("{\"cycles\": %" PRIu64 ", \"in_beats\": %" PRIu64 ", \"out_beats\": %zu, \"timed_out\": %s, "
                "\"first_in\": %" PRId64 ", \"last_in\": %" PRId64 ", \"last_out\": %" PRId64
                ", \"sim_seconds\": %.6f, \"mem_errors\": %" PRIu64 ", \"mem_drops\": %" PRIu64 ", \"ports\": [",
                cycle, in_idx, out.size() / OUT_BYTES, timed_out ? "true" : "false", i64(first_in), i64(last_in),
                i64(last_out), secs, mem_errors, mem_drops);
    for (int k = 0; k < MEM_PORTS; ++k) {
        const axi::Ram& r = *rams[k];
        std::printf("%s{\"aw\": %" PRIu64 ", \"w\": %" PRIu64 ", \"b\": %" PRIu64 ", \"ar\": %" PRIu64
                    ", \"r\": %" PRIu64 ", \"first_r\": %" PRId64 ", \"last_r\": %" PRId64
                    ", \"r_lat_min\": %" PRId64 ", \"r_lat_max\": %" PRId64 "}",
                    k ? ", " : "", r.n_aw, r.n_w, r.n_b, r.n_ar, r.n_r, i64(r.first_r),
                    r.n_r ? (int64_t)r.last_r : (int64_t)-1, i64(r.r_lat_min), r.n_r ? (int64_t)r.r_lat_max : (int64_t)-1);
    }
    std::printf("], \"axi_error\": ");
    if (bad_port >= 0) {
        std::string e;
        for (char c : rams[bad_port]->error) e += (c == '"' || c == '\\') ? '\'' : c;
        std::printf("\"port %d, cycle %" PRIu64 ": %s\"", bad_port, rams[bad_port]->error_cycle, e.c_str());
    } else {
        std::printf("null");
    }
    std::printf(", \"ctl_reads\": [");
    for (size_t k = 0; k < ctl_reads.size(); ++k) std::printf("%s%u", k ? ", " : "", ctl_reads[k]);
    std::printf("]}\n");
    return 0;
}
