// Several instances of one Verilated aggregator core in one process, driven through a C API (ctypes).
//
// The co-simulation (wanreduce.sim.verify.cosim) owns the clock of the WAN; each core here is a Verilated model
// with its own VerilatedContext, its own queue of input beats and its own cycle counter. The caller pushes
// the beats of frames that arrived, runs the core until the input is consumed and the output has stayed
// quiet for `drain` cycles, and takes the output beats with the cycle on which each left. Between bursts an
// idle core's counter may be moved forward without clocking it (nothing in it changes while it is idle,
// except its free-running performance counter `cycles`, which therefore counts clocked cycles only).
//
// Ports as for the stream harness (harness.cpp): clk, rst, i__payload/i__valid/i__ready,
// o__payload/o__valid/o__ready, ctl__addr/ctl__wdata/ctl__we/ctl__re/ctl__rdata. IN_BITS and OUT_BITS come
// from the build. The output is always ready: the WAN side of a core never back-pressures in this model.
// With HAS_BYPASS defined the core also has the in-line bypass output bypass__payload/valid/ready (the same
// beat layout as o), always ready too, whose beats are kept apart with their own cycle stamps.

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "Vtop.h"
#include "ports.h"
#include "verilated.h"

struct Core {
    std::unique_ptr<VerilatedContext> ctx;
    std::unique_ptr<Vtop> top;
    std::deque<std::vector<uint8_t>> in;
    std::vector<uint8_t> out;
    std::vector<uint64_t> stamps;
    std::vector<uint8_t> byp;
    std::vector<uint64_t> byp_stamps;
    uint64_t cycle = 0;
    uint64_t in_beats = 0;
    uint64_t longest_stall = 0;  // most consecutive cycles with a beat offered and i__ready low

    Core() : ctx(new VerilatedContext), top(new Vtop(ctx.get())) {
        top->i___05Fvalid = 0;
        top->o___05Fready = 1;
#ifdef HAS_BYPASS
        top->bypass___05Fready = 1;
#endif
        top->ctl___05Fwe = 0;
        top->ctl___05Fre = 0;
        top->rst = 1;
        for (int k = 0; k < 4; ++k) tick();
        top->rst = 0;
        tick();
    }

    void tick() { ::tick(top.get()); }
    void ctl_write(uint32_t addr, uint32_t data) { ::ctl_write(top.get(), addr, data); }
    uint32_t ctl_read(uint32_t addr) { return ::ctl_read(top.get(), addr); }

    // Clock until the input queue is empty and no beat has gone in or out for `drain` cycles (or max_cycles).
    // Returns 0, or 1 if max_cycles was reached first.
    int run(uint64_t drain, uint64_t max_cycles) {
        uint64_t quiet = 0, n = 0, stall = 0;
        bool presenting = false;
        uint8_t obuf[OUT_BYTES + 8];
        while (true) {
            if (!presenting && !in.empty()) {
                put_port(top->i___05Fpayload, in.front().data(), IN_BYTES);
                presenting = true;
            }
            top->i___05Fvalid = presenting;
            top->clk = 0;
            top->eval();
            const bool fire = presenting && top->i___05Fready;
            bool busy = false;
            if (top->o___05Fvalid) {
                get_port(top->o___05Fpayload, obuf, OUT_BYTES);
                out.insert(out.end(), obuf, obuf + OUT_BYTES);
                stamps.push_back(cycle);
                busy = true;
            }
#ifdef HAS_BYPASS
            if (top->bypass___05Fvalid) {
                get_port(top->bypass___05Fpayload, obuf, OUT_BYTES);
                byp.insert(byp.end(), obuf, obuf + OUT_BYTES);
                byp_stamps.push_back(cycle);
                busy = true;
            }
#endif
            quiet = busy || fire ? 0 : quiet + 1;
            stall = presenting && !fire ? stall + 1 : 0;
            if (stall > longest_stall) longest_stall = stall;
            top->clk = 1;
            top->eval();
            if (fire) {
                in.pop_front();
                presenting = false;
                ++in_beats;
            }
            ++cycle;
            ++n;
            if (in.empty() && !presenting && quiet > drain) {
                top->i___05Fvalid = 0;
                return 0;
            }
            if (n >= max_cycles) return 1;
        }
    }
};

extern "C" {

void* cores_new(int n) {
    auto* v = new std::vector<Core*>();
    for (int k = 0; k < n; ++k) v->push_back(new Core());
    return v;
}

void cores_free(void* h) {
    auto* v = static_cast<std::vector<Core*>*>(h);
    for (Core* c : *v) {
        c->top->final();
        delete c;
    }
    delete v;
}

static inline Core* core(void* h, int i) { return (*static_cast<std::vector<Core*>*>(h))[i]; }

size_t cores_in_bytes() { return IN_BYTES; }
size_t cores_out_bytes() { return OUT_BYTES; }

void core_ctl_write(void* h, int i, uint32_t addr, uint32_t data) { core(h, i)->ctl_write(addr, data); }
uint32_t core_ctl_read(void* h, int i, uint32_t addr) { return core(h, i)->ctl_read(addr); }

void core_push(void* h, int i, const uint8_t* beats, uint64_t nbeats) {
    Core* c = core(h, i);
    for (uint64_t k = 0; k < nbeats; ++k)
        c->in.emplace_back(beats + k * IN_BYTES, beats + (k + 1) * IN_BYTES);
}

int core_run(void* h, int i, uint64_t drain, uint64_t max_cycles) { return core(h, i)->run(drain, max_cycles); }

uint64_t core_cycle(void* h, int i) { return core(h, i)->cycle; }
uint64_t core_longest_stall(void* h, int i) { return core(h, i)->longest_stall; }

void core_skip_to(void* h, int i, uint64_t cycle) {
    Core* c = core(h, i);
    if (cycle > c->cycle) c->cycle = cycle;
}

uint64_t core_out_beats(void* h, int i) { return core(h, i)->stamps.size(); }

// Copy out and clear the output beats and their cycle stamps (the caller sized the buffers).
void core_take(void* h, int i, uint8_t* out, uint64_t* stamps) {
    Core* c = core(h, i);
    std::memcpy(out, c->out.data(), c->out.size());
    std::memcpy(stamps, c->stamps.data(), c->stamps.size() * 8);
    c->out.clear();
    c->stamps.clear();
}

uint64_t core_bypass_beats(void* h, int i) { return core(h, i)->byp_stamps.size(); }

// The same for the bypass output (empty without HAS_BYPASS).
void core_take_bypass(void* h, int i, uint8_t* out, uint64_t* stamps) {
    Core* c = core(h, i);
    std::memcpy(out, c->byp.data(), c->byp.size());
    std::memcpy(stamps, c->byp_stamps.data(), c->byp_stamps.size() * 8);
    c->byp.clear();
    c->byp_stamps.clear();
}
}
