// The random source of the C++ drivers (the stream harnesses' idles and back-pressure, axi_ram.h's
// latencies, pauses and reordering): one generator, so that a seed means the same draws in each.

#pragma once

#include <cstdint>

// xorshift64*: fast, seedable, good enough to decide idles, back-pressure and latencies.
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {
        if (s == 0) s = 1;
    }
    uint32_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return static_cast<uint32_t>((s * 0x2545F4914F6CDD1Dull) >> 32);
    }
    // A draw from 0 .. n-1.
    uint32_t below(uint32_t n) { return static_cast<uint32_t>((static_cast<uint64_t>(next()) * n) >> 32); }
};
