// The co-simulation's library of cores (corelib.cpp) for the external-buffer build: each core's AXI4
// master ports mem0__ .. mem<K-1>__ are answered by an axi::Ram (sim/verilator/axi_ram.h) with a fixed
// latency and a beat budget per port, clocked in the same cycles as the core.
//
// corelib.cpp's cores, queues, stamps and C API serve unchanged: its Core holds its model as a `Vtop`, and
// here `Vtop` names ExtTop, the Verilated model with its memories, whose eval() steps the memories
// around the falling-edge evaluation exactly as axi_harness.cpp does (each memory drives its slave
// outputs, the model settles, each memory observes its master's outputs), then the rising edge. Every
// cycle of the core, whether in a run, a reset or a control access, is thus a cycle of its memories.
//
// Built by wanreduce.sim.verify.extcosim with IN_BITS, OUT_BITS, MEM_PORTS and LANES defined. The memory
// configuration (ext_configure) applies to the cores made after it.

#include "Vtop.h"
#include "axi_ram.h"
#include "ports.h"
#include "verilated.h"

static axi::Config g_mem;

class ExtTop : public Vtop {
  public:
    explicit ExtTop(VerilatedContext* ctx) : Vtop(ctx) {
        for (int k = 0; k < MEM_PORTS; ++k) {
            axi::Config c = g_mem;
            c.lanes = LANES;
            c.seed = g_mem.seed * 16 + 3 + k;
            rams.emplace_back(new axi::Ram(c));
        }
        io = {AXI_PORTS(this, wbuf)};
        const axi::SlaveOut quiet{};
        for (auto& p : io) p.drive(quiet);
    }
    ExtTop(const ExtTop&) = delete;
    ExtTop& operator=(const ExtTop&) = delete;

    void eval() {
        if (clk) {
            Vtop::eval();
            return;
        }
        for (int k = 0; k < MEM_PORTS; ++k) {
            axi::SlaveOut s{};
            rams[k]->drive(s);
            io[k].drive(s);
        }
        Vtop::eval();
        for (int k = 0; k < MEM_PORTS; ++k) {
            axi::MasterOut m{};
            io[k].sample(m);
            rams[k]->observe(m);
        }
    }

    std::vector<std::unique_ptr<axi::Ram>> rams;

  private:
    std::vector<axi::PortIo> io;
    uint8_t wbuf[MEM_PORTS][LANES + 8];
};

#define Vtop ExtTop
#include "corelib.cpp"
#undef Vtop

extern "C" {

size_t ext_mem_ports() { return MEM_PORTS; }

// The memories of the cores made from now on: latency (cycles, AR to first R beat and last W beat to B),
// the beat budget per port (units of 2^-16 beats per cycle, 0: none) and each port's size in bytes.
void ext_configure(uint32_t latency, uint32_t budget, uint64_t mem_bytes) {
    g_mem.lat_lo = g_mem.lat_hi = latency;
    g_mem.budget = budget;
    g_mem.mem_bytes = mem_bytes;
}

// Port k of core i: W beats taken, R beats delivered, bursts written and read (out[0..3]); the first
// breach of the AXI rules, or an empty string.
const char* ext_mem_stats(void* h, int i, int k, uint64_t* out) {
    const axi::Ram& r = *core(h, i)->top->rams[k];
    out[0] = r.n_w;
    out[1] = r.n_r;
    out[2] = r.n_aw;
    out[3] = r.n_ar;
    return r.error.c_str();
}
}
