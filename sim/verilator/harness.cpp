// Stream harness for a Verilated DUT: beats from a file into `i`, beats from `o` into a file.
//
// Compiled once per DUT by wanreduce.sim.verilator.harness (which passes IN_BITS, OUT_BITS, HAS_RST and HAS_CTL on
// the command line) and driven from Python. The DUT is built with `--prefix Vtop`, so the class name never
// depends on the design. Ports: clk, [rst], i__payload/i__valid/i__ready, o__payload/o__valid/o__ready,
// and optionally ctl__addr(16)/ctl__wdata(32)/ctl__we/ctl__re/ctl__rdata(32) and a trace output
// trace__valid/trace__payload (up to 32 bits): every cycle of the streaming phase with trace__valid high is
// recorded as (cycle, payload), for designs that expose internal events (e.g. a test wrapper's drop codes).
//
// Usage: harness KEY=VALUE ...   (in, out, n_in, seed, idle, bp, max_cycles, drain, reset_cycles,
//                                  stamps_in, stamps_out, ctl_w, n_ctl_w, ctl_r, n_ctl_r, trace)
// Prints one JSON object with the run's statistics on stdout.
//
// Timing per cycle: inputs for the cycle are set, then clk=0 + eval() settles combinational paths (so a
// ready that depends on o__ready or on valid is seen correctly), the handshakes are sampled, then clk=1 +
// eval() is the rising edge. A beat presented on `i` is held, unchanged, until accepted (stream rules).

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "Vtop.h"
#include "driver_io.h"
#include "ports.h"
#include "rng.h"
#include "verilated.h"

#ifndef HAS_RST
#define HAS_RST 1
#endif
#ifndef HAS_CTL
#define HAS_CTL 0
#endif
#ifndef HAS_TRACE
#define HAS_TRACE 0
#endif

int main(int argc, char** argv) {
    const Args args("harness", argc, argv);

    const StreamOptions opts(args);
    const auto [n_in, max_cycles, drain, reset_cycles, seed, idle_thr, bp_thr] = opts;
    Rng rng_in(seed * 2 + 1);
    Rng rng_out(seed * 2 + 2);

    std::vector<uint8_t> in = read_beats(args, n_in);
    const bool stamps = !args.str("stamps_in").empty();
    std::vector<uint64_t> in_stamp, out_stamp;
    if (stamps) in_stamp.reserve(n_in);

    std::vector<uint8_t> out;
    out.reserve(n_in * OUT_BYTES + OUT_BYTES);

    auto ctx = std::make_unique<VerilatedContext>();
    auto top = std::make_unique<Vtop>(ctx.get());

    uint64_t cycle = 0;  // counts rising edges since the start of the stream phase

    start_stream<bool(HAS_RST), bool(HAS_CTL)>(args, top.get(), reset_cycles);
    std::vector<uint32_t> ctl_reads;

    auto t0 = std::chrono::steady_clock::now();
    uint64_t in_idx = 0;
    bool presenting = false;
    uint64_t quiet_from = 0;  // last cycle with o__valid high, or when the input ran out
    bool timed_out = false;
    uint64_t first_in = UINT64_MAX, last_out = UINT64_MAX;
    // Longest run of consecutive cycles in which a beat was offered and i__ready was low, and their total:
    // what a sender behind the core waits in the worst case.
    uint64_t stall_run = 0, max_stall = 0, stall_cycles = 0;
    std::vector<uint64_t> trace;  // (cycle, payload) pairs
    uint8_t obuf[OUT_BYTES + 8];
    while (true) {
        if (!presenting && in_idx < n_in && rng_in.next() >= idle_thr) {
            put_port(top->i___05Fpayload, &in[in_idx * IN_BYTES], IN_BYTES);
            presenting = true;
        }
        top->i___05Fvalid = presenting;
        top->o___05Fready = rng_out.next() >= bp_thr;
        top->clk = 0;
        top->eval();
        const bool in_fire = presenting && top->i___05Fready;
        if (presenting && !top->i___05Fready) {
            ++stall_cycles;
            if (++stall_run > max_stall) max_stall = stall_run;
        } else {
            stall_run = 0;
        }
#if HAS_TRACE
        if (top->trace___05Fvalid) {
            trace.push_back(cycle);
            trace.push_back(static_cast<uint64_t>(top->trace___05Fpayload));
        }
#endif
        if (top->o___05Fvalid) {
            quiet_from = cycle;
            if (top->o___05Fready) {
                get_port(top->o___05Fpayload, obuf, OUT_BYTES);
                out.insert(out.end(), obuf, obuf + OUT_BYTES);
                if (stamps) out_stamp.push_back(cycle);
                last_out = cycle;
            }
        }
        top->clk = 1;
        top->eval();
        if (in_fire) {
            if (stamps) in_stamp.push_back(cycle);
            if (first_in == UINT64_MAX) first_in = cycle;
            presenting = false;
            if (++in_idx == n_in) quiet_from = cycle;
        }
        ++cycle;
        if (stream_over(opts, cycle, in_idx, quiet_from, timed_out)) break;
    }
    auto t1 = std::chrono::steady_clock::now();
    top->i___05Fvalid = 0;
    top->o___05Fready = 0;

#if HAS_CTL
    ctl_read_all(args, top.get(), ctl_reads);
#endif
    top->final();

    write_file(args.prog, args.str("out"), out.data(), out.size());
    write_file(args.prog, args.str("trace"), trace.data(), trace.size() * 8);
    if (stamps) {
        write_file(args.prog, args.str("stamps_in"), in_stamp.data(), in_stamp.size() * 8);
        write_file(args.prog, args.str("stamps_out"), out_stamp.data(), out_stamp.size() * 8);
    }
    const double secs = std::chrono::duration<double>(t1 - t0).count();
    std::printf("{\"cycles\": %" PRIu64 ", \"in_beats\": %" PRIu64 ", \"out_beats\": %zu, \"timed_out\": %s, "
                "\"first_in\": %" PRId64 ", \"last_out\": %" PRId64 ", \"sim_seconds\": %.6f, "
                "\"max_stall\": %" PRIu64 ", \"stall_cycles\": %" PRIu64 ", \"ctl_reads\": [",
                cycle, in_idx, out.size() / OUT_BYTES, timed_out ? "true" : "false",
                first_in == UINT64_MAX ? (int64_t)-1 : (int64_t)first_in,
                last_out == UINT64_MAX ? (int64_t)-1 : (int64_t)last_out, secs, max_stall, stall_cycles);
    for (size_t k = 0; k < ctl_reads.size(); ++k) std::printf("%s%u", k ? ", " : "", ctl_reads[k]);
    std::printf("]}\n");
    return 0;
}
