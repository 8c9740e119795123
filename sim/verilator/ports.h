// Port helpers shared by the C++ drivers of Verilated designs (harness.cpp, the stream harness, and
// sim/verify/corelib.cpp, the co-simulation's library of cores): byte records in and out of ports of any
// width, one clock cycle, and the control port's word write and read.
//
// The design is built with `--prefix Vtop`. Verilator escapes "__" in identifiers as "___05F", so
// Amaranth's ctl__addr is ctl___05Faddr here. The helpers are templates, so a design without a control
// port still compiles as long as it does not call them.

#pragma once

#include <cstdint>
#include <cstring>

#include "verilated.h"

#ifndef IN_BITS
#error "IN_BITS must be defined"
#endif
#ifndef OUT_BITS
#error "OUT_BITS must be defined"
#endif

static constexpr size_t IN_BYTES = (IN_BITS + 7) / 8;
static constexpr size_t OUT_BYTES = (OUT_BITS + 7) / 8;

// Copy a little-endian byte record into a port, whatever Verilator made of it (C/S/I/QData or VlWide).
template <typename T>
static inline void put_port(T& port, const uint8_t* src, size_t nbytes) {
    if constexpr (VlIsVlWide<T>::value) {
        std::memcpy(port.data(), src, nbytes);
    } else {
        uint64_t v = 0;
        std::memcpy(&v, src, nbytes);
        port = static_cast<T>(v);
    }
}

template <typename T>
static inline void get_port(const T& port, uint8_t* dst, size_t nbytes) {
    if constexpr (VlIsVlWide<T>::value) {
        std::memcpy(dst, port.data(), nbytes);
    } else {
        uint64_t v = static_cast<uint64_t>(port);
        std::memcpy(dst, &v, nbytes);
    }
}

// One cycle: clk low settles the combinational paths, clk high is the rising edge.
template <typename Top>
static inline void tick(Top* top) {
    top->clk = 0;
    top->eval();
    top->clk = 1;
    top->eval();
}

// One control-port write: address, data and we for one rising edge.
template <typename Top>
static inline void ctl_write(Top* top, uint32_t addr, uint32_t data) {
    top->ctl___05Faddr = addr;
    top->ctl___05Fwdata = data;
    top->ctl___05Fwe = 1;
    tick(top);
    top->ctl___05Fwe = 0;
}

// One control-port read: rdata is valid two cycles after re, sampled before the third rising edge.
template <typename Top>
static inline uint32_t ctl_read(Top* top, uint32_t addr) {
    top->ctl___05Faddr = addr;
    top->ctl___05Fre = 1;
    tick(top);
    top->ctl___05Fre = 0;
    tick(top);
    top->clk = 0;
    top->eval();
    uint32_t v = static_cast<uint32_t>(top->ctl___05Frdata);
    top->clk = 1;
    top->eval();
    return v;
}
