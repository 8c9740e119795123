// What the stream harness executables share (harness.cpp, axi_harness.cpp): their KEY=VALUE arguments and
// stream settings, binary files in and out (the input beats, the control port's writes and reads, which the
// Python side hands over as files), the start of a run (reset, control writes) and the test for its end.
// Every failure prints "<program>: <what>" on stderr and exits with 3, the code the Python side reports.

#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ports.h"

// The command line as KEY=VALUE pairs; a missing key reads as its default.
struct Args {
    const char* prog;
    std::map<std::string, std::string> opt;

    Args(const char* prog_name, int argc, char** argv) : prog(prog_name) {
        for (int k = 1; k < argc; ++k) {
            std::string a = argv[k];
            size_t eq = a.find('=');
            if (eq == std::string::npos) {
                std::fprintf(stderr, "%s: argument %s is not KEY=VALUE\n", prog, a.c_str());
                std::exit(3);
            }
            opt[a.substr(0, eq)] = a.substr(eq + 1);
        }
    }
    uint64_t num(const char* key, const char* dflt) const {
        auto it = opt.find(key);
        return std::strtoull((it != opt.end() ? it->second : std::string(dflt)).c_str(), nullptr, 10);
    }
    std::string str(const char* key) const {
        auto it = opt.find(key);
        return it != opt.end() ? it->second : std::string();
    }
};

// The settings every stream harness takes, with their defaults; unpacked in this order.
struct StreamOptions {
    uint64_t n_in, max_cycles, drain, reset_cycles, seed;
    // Probabilities come as integers in units of 2^-32 so that the C++ and Python sides agree exactly.
    uint64_t idle_thr, bp_thr;

    explicit StreamOptions(const Args& a)
        : n_in(a.num("n_in", "0")),
          max_cycles(a.num("max_cycles", "1000000")),
          drain(a.num("drain", "64")),
          reset_cycles(a.num("reset_cycles", "4")),
          seed(a.num("seed", "0")),
          idle_thr(a.num("idle", "0")),
          bp_thr(a.num("bp", "0")) {}
};

// The end of a cycle of the stream phase, `cycle` already counted: the run is over once every input beat
// is in and the output has been quiet for more than `drain` cycles, or at max_cycles, which sets
// `timed_out`.
static inline bool stream_over(const StreamOptions& o, uint64_t cycle, uint64_t in_idx, uint64_t quiet_from,
                               bool& timed_out) {
    if (in_idx == o.n_in && cycle - quiet_from > o.drain) return true;
    if (cycle >= o.max_cycles) {
        timed_out = true;
        return true;
    }
    return false;
}

// The whole file; empty for an empty path.
static std::vector<uint8_t> read_file(const char* prog, const std::string& path) {
    std::vector<uint8_t> buf;
    if (path.empty()) return buf;
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) {
        std::fprintf(stderr, "%s: cannot open %s\n", prog, path.c_str());
        std::exit(3);
    }
    std::fseek(f, 0, SEEK_END);
    long size = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    buf.resize(static_cast<size_t>(size));
    if (size > 0 && std::fread(buf.data(), 1, buf.size(), f) != buf.size()) {
        std::fprintf(stderr, "%s: short read on %s\n", prog, path.c_str());
        std::exit(3);
    }
    std::fclose(f);
    return buf;
}

// Nothing for an empty path.
static void write_file(const char* prog, const std::string& path, const void* data, size_t size) {
    if (path.empty()) return;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size)) {
        std::fprintf(stderr, "%s: cannot write %s\n", prog, path.c_str());
        std::exit(3);
    }
    std::fclose(f);
}

// The first n input beats of IN_BYTES each from the file `in`.
static std::vector<uint8_t> read_beats(const Args& args, uint64_t n) {
    std::vector<uint8_t> in = read_file(args.prog, args.str("in"));
    if (in.size() < n * IN_BYTES) {
        std::fprintf(stderr, "%s: input file holds fewer than %" PRIu64 " beats\n", args.prog, n);
        std::exit(3);
    }
    // Verilator assumes bits above a port's width are zero; clear them once rather than trusting callers.
    if (IN_BITS % 8) {
        const uint8_t mask = static_cast<uint8_t>((1u << (IN_BITS % 8)) - 1);
        for (uint64_t b = 0; b < n; ++b) in[b * IN_BYTES + IN_BYTES - 1] &= mask;
    }
    return in;
}

// The control-port writes of the file `ctl_w` (n_ctl_w little-endian address, data word pairs), one a
// cycle, then one idle cycle.
template <typename Top>
static void ctl_write_all(const Args& args, Top* top) {
    std::vector<uint8_t> w = read_file(args.prog, args.str("ctl_w"));
    const uint64_t n_w = args.num("n_ctl_w", "0");
    for (uint64_t k = 0; k < n_w; ++k) {
        uint32_t a, d;
        std::memcpy(&a, &w[k * 8], 4);
        std::memcpy(&d, &w[k * 8 + 4], 4);
        ctl_write(top, a, d);
    }
    tick(top);
}

// The control-port reads of the addresses in the file `ctl_r` (n_ctl_r little-endian words), appended
// to `reads` in order.
template <typename Top>
static void ctl_read_all(const Args& args, Top* top, std::vector<uint32_t>& reads) {
    std::vector<uint8_t> r = read_file(args.prog, args.str("ctl_r"));
    const uint64_t n_r = args.num("n_ctl_r", "0");
    for (uint64_t k = 0; k < n_r; ++k) {
        uint32_t a;
        std::memcpy(&a, &r[k * 4], 4);
        reads.push_back(ctl_read(top, a));
    }
}

// The start of every stream run: both streams and the control port quiet, `reset_cycles` cycles in reset
// (a design with a reset) and one out of it, then the control-port writes of ctl_w (a design with a
// control port).
template <bool HasRst, bool HasCtl, typename Top>
static void start_stream(const Args& args, Top* top, uint64_t reset_cycles) {
    top->i___05Fvalid = 0;
    top->o___05Fready = 0;
    if constexpr (HasCtl) {
        top->ctl___05Fwe = 0;
        top->ctl___05Fre = 0;
        top->ctl___05Faddr = 0;
        top->ctl___05Fwdata = 0;
    }
    if constexpr (HasRst) top->rst = 1;
    for (uint64_t k = 0; k < reset_cycles; ++k) tick(top);
    if constexpr (HasRst) top->rst = 0;
    tick(top);
    if constexpr (HasCtl) ctl_write_all(args, top);
}
