// An AXI4 (full) slave memory for the C++ drivers of Verilated designs, one clock cycle at a time.
//
// Why a model of our own: cocotb answers AXI at about 30k cycles/s, too slow for the volume runs of the
// external-buffer core (a 2^20-slot build spends 2^20 cycles clearing its slot states before the first
// beat). This model is a plain C++ object the driver calls twice a cycle:
//
//   drive(out)    before the falling-edge eval: the slave's outputs for this cycle (readies, B, R);
//   observe(in)   after it, with the master's outputs settled: the handshakes of this cycle happen.
//
// Behaviour (all random choices from one seeded xorshift, so a run is repeatable):
// * latency: a burst accepted on AR (or whose last W beat and AW are both in) waits a latency drawn from
//   lat_lo..lat_hi cycles before its first R beat (its B) may be offered;
// * back-pressure: each cycle, AWREADY, WREADY and ARREADY are each low with probability `pause`, and an R
//   or B that could be offered is held back with the same probability (valid, once raised, stays high);
// * reordering: with `reorder`, the next R beat (B) comes from a random ID among those with a due burst,
//   so bursts of different IDs interleave beat by beat, as AXI4 allows; one ID's bursts stay in order.
//   Without it, bursts are answered whole, oldest first;
// * writes reach the memory when their B is offered, so a read that overtakes a write it depends on reads
//   the old bytes;
// * errors: an address in `bad` (a beat's byte address) is answered SLVERR and not written;
// * bandwidth (`budget`, off unless set): the port moves at most `budget` data beats per cycle on average,
//   W beats taken and R beats delivered together, as one DRAM channel (an HBM pseudo-channel) shares its
//   bus between reads and writes. A credit grows by `budget` each cycle (up to one cycle's worth plus a
//   beat, so an idle port saves no burst), each W or R beat spends one, and WREADY is low and no new R beat
//   is offered while it is not positive; an R beat on offer stays offered, as AXI requires. Addresses and
//   write responses cost nothing (they have buses of their own).
// The memory is sparse (4 KiB pages made on first write; unwritten bytes read as zero), so a port may span
// many gigabytes.
//
// Checks of the master (the first violation is kept in `error`, with its cycle; the driver stops there):
// * a VALID on AW, W or AR that was not taken stays high with the same payload the next cycle;
// * bursts are INCR of the full data width, aligned, inside the memory and within one 4 KiB page;
// * WLAST is high on the beat that ends its burst (counted from AWLEN) and on no other. Write data may come
//   before its address (AXI4 allows it); its beats are kept and matched in order as addresses come;
// * RREADY and BREADY need no check: the slave holds its valid until they come.

#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "rng.h"

namespace axi {

using Rng = ::Rng;  // rng.h's, the stream harnesses' generator too

struct Config {
    uint64_t mem_bytes = 1ull << 32;
    uint32_t lanes = 64;  // bytes per beat
    uint32_t lat_lo = 1, lat_hi = 1;
    uint32_t pause = 0;  // probability in units of 2^-32
    bool reorder = false;
    uint64_t seed = 0;
    uint32_t budget = 0;  // data beats per cycle in units of 2^-16 (reads and writes together); 0: no limit
};

static constexpr int64_t BEAT = 1 << 16;  // one beat in the units of Config::budget

// The master's outputs, as sampled after the falling-edge eval.
struct MasterOut {
    bool awvalid = false, wvalid = false, wlast = false, bready = false, arvalid = false, rready = false;
    uint64_t awaddr = 0, araddr = 0, wstrb = 0;
    uint32_t awid = 0, awlen = 0, awsize = 0, awburst = 0, arid = 0, arlen = 0, arsize = 0, arburst = 0;
    const uint8_t* wdata = nullptr;
};

// The slave's outputs for one cycle.
struct SlaveOut {
    bool awready = false, wready = false, bvalid = false, arready = false, rvalid = false, rlast = false;
    uint32_t bid = 0, bresp = 0, rid = 0, rresp = 0;
    const uint8_t* rdata = nullptr;
};

static constexpr uint32_t OKAY = 0, SLVERR = 2;

class Ram {
  public:
    explicit Ram(const Config& c) : cfg(c), rng(c.seed), rbeat(c.lanes, 0) {
        size_shift = 0;
        while ((1u << size_shift) < cfg.lanes) ++size_shift;
    }

    std::string error;          // the first violation of the AXI rules, empty if none
    uint64_t error_cycle = 0;
    std::set<uint64_t> bad;     // byte addresses answered SLVERR
    uint64_t n_aw = 0, n_w = 0, n_b = 0, n_ar = 0, n_r = 0;
    uint64_t first_r = UINT64_MAX, last_r = 0;
    // Read latency as the master saw it: AR accepted to the burst's first R beat taken, least and most.
    uint64_t r_lat_min = UINT64_MAX, r_lat_max = 0;

    bool idle() const { return reads.empty() && writes.empty() && aws.empty() && wbursts.empty() && !wcur; }

    uint64_t cycle() const { return now; }

    // Bytes of the memory (for a test's own check of what was written).
    void peek(uint64_t addr, uint8_t* dst, size_t n) const {
        for (size_t k = 0; k < n; ++k) {
            auto it = pages.find((addr + k) >> 12);
            dst[k] = it == pages.end() ? 0 : it->second[(addr + k) & 4095];
        }
    }

    void drive(SlaveOut& o) {
        if (cfg.budget) credit = std::min<int64_t>(credit + cfg.budget, cfg.budget + BEAT);
        const bool beat_ok = !cfg.budget || credit > 0;
        o.awready = !pause();
        o.wready = !pause() && beat_ok;
        o.arready = !pause();
        if (!b_offer) pick_b();
        o.bvalid = b_offer;
        if (b_offer) {
            o.bid = b_cur.id;
            o.bresp = b_cur.resp;
        }
        if (!r_offer && beat_ok) pick_r();
        o.rvalid = r_offer;
        if (r_offer) {
            o.rid = r_id;
            o.rlast = r_last;
            o.rresp = r_resp;
            o.rdata = rbeat.data();
        }
        drove = o;
    }

    void observe(const MasterOut& m) {
        check_held(m);
        if (m.awvalid && drove.awready) {
            ++n_aw;
            if (check_burst("aw", m.awaddr, m.awlen, m.awsize, m.awburst)) {
                aws.push_back({m.awid, m.awaddr, m.awlen + 1});
            }
        }
        if (m.wvalid && drove.wready) {
            take_w(m);
            credit -= BEAT;
        }
        match_writes();
        if (m.arvalid && drove.arready) {
            ++n_ar;
            if (check_burst("ar", m.araddr, m.arlen, m.arsize, m.arburst)) {
                reads.push_back({m.arid, m.araddr, m.arlen + 1, 0, now + latency(), seq++, now});
            }
        }
        if (drove.bvalid && m.bready) {
            ++n_b;
            b_offer = false;
        }
        if (drove.rvalid && m.rready) {
            ++n_r;
            if (first_r == UINT64_MAX) first_r = now;
            last_r = now;
            r_offer = false;
            credit -= BEAT;
            Read& r = *find_read(r_seq);
            if (r.done == 0) {
                r_lat_min = std::min(r_lat_min, now - r.t_ar);
                r_lat_max = std::max(r_lat_max, now - r.t_ar);
            }
            if (++r.done == r.beats) erase_read(r_seq);
        }
        ++now;
    }

  private:
    struct Aw {
        uint32_t id;
        uint64_t addr;
        uint32_t beats;
    };
    struct Read {
        uint32_t id;
        uint64_t addr;
        uint32_t beats, done;
        uint64_t due, seq, t_ar;
    };
    struct Write {
        uint32_t id;
        uint64_t addr;
        std::vector<uint8_t> data, strb;  // strb: one byte per data byte (0 or 1)
        uint64_t due, seq;
    };
    struct Resp {
        uint32_t id, resp;
    };

    Config cfg;
    Rng rng;
    uint32_t size_shift;
    uint64_t now = 0, seq = 0;
    int64_t credit = 0;  // the bandwidth budget's credit, in units of 2^-16 beats
    SlaveOut drove;
    std::unordered_map<uint64_t, std::unique_ptr<uint8_t[]>> pages;
    std::deque<Aw> aws;                  // addresses waiting for their data
    std::deque<std::vector<uint8_t>> wbursts;  // whole bursts of data (up to WLAST) waiting for an address
    std::vector<uint8_t> wdata_cur;      // the burst being received (data bytes, then strobe bytes)
    std::vector<uint8_t> wstrb_cur;
    std::deque<std::vector<uint8_t>> wstrbs;
    uint32_t wcur = 0;                   // beats of the burst being received
    std::vector<Read> reads;
    std::vector<Write> writes;
    // The held-valid check: what was offered and not taken last cycle.
    bool aw_held = false, w_held = false, ar_held = false;
    MasterOut last;
    std::vector<uint8_t> last_wdata;
    // The response on offer.
    bool b_offer = false, r_offer = false, r_last = false;
    Resp b_cur{0, 0};
    uint32_t r_id = 0, r_resp = 0;
    uint64_t r_seq = 0;
    std::vector<uint8_t> rbeat;

    bool pause() { return cfg.pause && rng.next() < cfg.pause; }

    uint64_t latency() { return cfg.lat_lo + rng.below(cfg.lat_hi - cfg.lat_lo + 1); }

    void fail(const std::string& what) {
        if (error.empty()) {
            error = what;
            error_cycle = now;
        }
    }

    bool check_burst(const char* ch, uint64_t addr, uint32_t len, uint32_t size, uint32_t burst) {
        char buf[200];
        const uint64_t bytes = static_cast<uint64_t>(len + 1) * cfg.lanes;
        if (burst != 1 || size != size_shift) {
            std::snprintf(buf, sizeof buf, "%s burst at %#llx is not INCR of %u-byte beats (burst %u, size %u)",
                          ch, (unsigned long long)addr, cfg.lanes, burst, size);
        } else if (addr % cfg.lanes) {
            std::snprintf(buf, sizeof buf, "%s burst at %#llx is not aligned to its %u-byte beats", ch,
                          (unsigned long long)addr, cfg.lanes);
        } else if (addr + bytes > cfg.mem_bytes) {
            std::snprintf(buf, sizeof buf, "%s burst at %#llx of %llu bytes ends beyond the %llu-byte memory",
                          ch, (unsigned long long)addr, (unsigned long long)bytes,
                          (unsigned long long)cfg.mem_bytes);
        } else if ((addr & 4095) + bytes > 4096) {
            std::snprintf(buf, sizeof buf, "%s burst at %#llx of %llu bytes crosses a 4 KiB boundary", ch,
                          (unsigned long long)addr, (unsigned long long)bytes);
        } else {
            return true;
        }
        fail(buf);
        return false;
    }

    void check_held(const MasterOut& m) {
        if (aw_held && (!m.awvalid || m.awaddr != last.awaddr || m.awlen != last.awlen || m.awid != last.awid ||
                        m.awsize != last.awsize || m.awburst != last.awburst))
            fail("awvalid dropped or its payload changed before awready");
        if (ar_held && (!m.arvalid || m.araddr != last.araddr || m.arlen != last.arlen || m.arid != last.arid ||
                        m.arsize != last.arsize || m.arburst != last.arburst))
            fail("arvalid dropped or its payload changed before arready");
        if (w_held && (!m.wvalid || m.wlast != last.wlast || m.wstrb != last.wstrb ||
                       std::memcmp(m.wdata, last_wdata.data(), cfg.lanes) != 0))
            fail("wvalid dropped or its payload changed before wready");
        aw_held = m.awvalid && !drove.awready;
        ar_held = m.arvalid && !drove.arready;
        w_held = m.wvalid && !drove.wready;
        last = m;
        if (w_held) last_wdata.assign(m.wdata, m.wdata + cfg.lanes);
    }

    void take_w(const MasterOut& m) {
        ++n_w;
        wdata_cur.insert(wdata_cur.end(), m.wdata, m.wdata + cfg.lanes);
        for (uint32_t b = 0; b < cfg.lanes; ++b) wstrb_cur.push_back((m.wstrb >> b) & 1);
        ++wcur;
        // The burst this beat belongs to: the oldest address without its data, if it came already.
        const size_t k = wbursts.size();
        if (k < aws.size()) {
            const uint32_t want = aws[k].beats;
            if (m.wlast != (wcur == want)) {
                char buf[120];
                std::snprintf(buf, sizeof buf, "wlast %s on beat %u of a %u-beat burst",
                              m.wlast ? "high" : "low", wcur, want);
                fail(buf);
            }
        } else if (wcur > 256) {
            fail("more than 256 write beats without wlast");
        }
        if (m.wlast) {
            wbursts.push_back(std::move(wdata_cur));
            wstrbs.push_back(std::move(wstrb_cur));
            wdata_cur.clear();
            wstrb_cur.clear();
            wcur = 0;
        }
    }

    // Addresses meet their data in order; data that came first is checked against AWLEN here.
    void match_writes() {
        while (!aws.empty() && !wbursts.empty()) {
            Aw a = aws.front();
            const uint32_t got = static_cast<uint32_t>(wbursts.front().size() / cfg.lanes);
            if (got != a.beats) {
                char buf[120];
                std::snprintf(buf, sizeof buf, "wlast after %u beats of a %u-beat burst", got, a.beats);
                fail(buf);
            }
            writes.push_back({a.id, a.addr, std::move(wbursts.front()), std::move(wstrbs.front()),
                              now + latency(), seq++});
            aws.pop_front();
            wbursts.pop_front();
            wstrbs.pop_front();
        }
        // Data of a burst whose address came, still arriving: a WLAST that is late is caught here.
        if (wcur && wbursts.empty() && !aws.empty() && wcur > aws.front().beats)
            fail("wlast missing on the last beat of a burst");
    }

    // The next response among the due ones: per ID the oldest; across IDs the oldest or (reorder) any.
    template <typename T>
    T* choose(std::vector<T>& v) {
        std::map<uint32_t, T*> heads;  // per ID, its oldest
        for (T& x : v) {
            auto it = heads.find(x.id);
            if (it == heads.end() || x.seq < it->second->seq) heads[x.id] = &x;
        }
        std::vector<T*> due;
        for (auto& [id, x] : heads)
            if (x->due <= now) due.push_back(x);
        if (due.empty()) return nullptr;
        if (cfg.reorder) return due[rng.below(static_cast<uint32_t>(due.size()))];
        T* best = due[0];
        for (T* x : due)
            if (x->seq < best->seq) best = x;
        return best;
    }

    void pick_b() {
        Write* w = choose(writes);
        if (!w || pause()) return;
        bool err = false;
        const size_t n = w->data.size();
        for (size_t k = 0; k < n; k += cfg.lanes) err |= bad.count(w->addr + k) > 0;
        if (!err)
            for (size_t k = 0; k < n; ++k)
                if (w->strb[k]) page(w->addr + k)[(w->addr + k) & 4095] = w->data[k];
        b_cur = {w->id, err ? SLVERR : OKAY};
        b_offer = true;
        writes.erase(writes.begin() + (w - writes.data()));
    }

    void pick_r() {
        // Without reordering a burst is answered whole: the burst begun stays the choice.
        Read* r = nullptr;
        if (!cfg.reorder) {
            for (Read& x : reads)
                if (x.done && (!r || x.seq < r->seq)) r = &x;
        }
        if (!r) r = choose(reads);
        if (!r || pause()) return;
        const uint64_t a = r->addr + static_cast<uint64_t>(r->done) * cfg.lanes;
        peek(a, rbeat.data(), cfg.lanes);
        r_id = r->id;
        r_last = r->done + 1 == r->beats;
        r_resp = bad.count(a) ? SLVERR : OKAY;
        r_seq = r->seq;
        r_offer = true;
    }

    Read* find_read(uint64_t s) {
        for (Read& x : reads)
            if (x.seq == s) return &x;
        return nullptr;
    }

    void erase_read(uint64_t s) {
        for (size_t k = 0; k < reads.size(); ++k)
            if (reads[k].seq == s) {
                reads.erase(reads.begin() + k);
                return;
            }
    }

    uint8_t* page(uint64_t addr) {
        auto& p = pages[addr >> 12];
        if (!p) {
            p.reset(new uint8_t[4096]);
            std::memset(p.get(), 0, 4096);
        }
        return p.get();
    }
};

}  // namespace axi

namespace axi {

// How a driver connects a Ram to one master port of its Verilated design: drive() puts the slave's
// outputs on the port, sample() reads the master's outputs (AXI_PORT builds one).
struct PortIo {
    std::function<void(const SlaveOut&)> drive;
    std::function<void(MasterOut&)> sample;
};

}  // namespace axi

// One port's wiring for the drivers (axi_harness.cpp, sim/verify/extcorelib.cpp): TOP is the Verilated
// model (a pointer), P the port's Verilated prefix (Verilator writes Amaranth's "__" as "___05F"), WBUF a
// buffer of LANES bytes (plus 8) for the write data; the lambdas capture by reference, so TOP and WBUF
// must outlive the PortIo. Needs ports.h's put_port/get_port and LANES where it is used.
#define AXI_PORT(TOP, P, WBUF)                                                                   \
    axi::PortIo {                                                                                \
        [&](const axi::SlaveOut& s) {                                                            \
            TOP->P##awready = s.awready;                                                         \
            TOP->P##wready = s.wready;                                                           \
            TOP->P##arready = s.arready;                                                         \
            TOP->P##bvalid = s.bvalid;                                                           \
            TOP->P##bid = s.bid;                                                                 \
            TOP->P##bresp = s.bresp;                                                             \
            TOP->P##rvalid = s.rvalid;                                                           \
            TOP->P##rid = s.rid;                                                                 \
            TOP->P##rresp = s.rresp;                                                             \
            TOP->P##rlast = s.rlast;                                                             \
            if (s.rdata) put_port(TOP->P##rdata, s.rdata, LANES);                                \
        },                                                                                       \
            [&](axi::MasterOut& m) {                                                             \
                m.awvalid = TOP->P##awvalid;                                                     \
                m.awaddr = static_cast<uint64_t>(TOP->P##awaddr);                                \
                m.awlen = TOP->P##awlen;                                                         \
                m.awsize = TOP->P##awsize;                                                       \
                m.awburst = TOP->P##awburst;                                                     \
                m.awid = static_cast<uint32_t>(TOP->P##awid);                                    \
                m.wvalid = TOP->P##wvalid;                                                       \
                get_port(TOP->P##wdata, WBUF, LANES);                                            \
                m.wdata = WBUF;                                                                  \
                m.wstrb = static_cast<uint64_t>(TOP->P##wstrb);                                  \
                m.wlast = TOP->P##wlast;                                                         \
                m.bready = TOP->P##bready;                                                       \
                m.arvalid = TOP->P##arvalid;                                                     \
                m.araddr = static_cast<uint64_t>(TOP->P##araddr);                                \
                m.arlen = TOP->P##arlen;                                                         \
                m.arsize = TOP->P##arsize;                                                       \
                m.arburst = TOP->P##arburst;                                                     \
                m.arid = static_cast<uint32_t>(TOP->P##arid);                                    \
                m.rready = TOP->P##rready;                                                       \
            }                                                                                    \
    }

// Every memory port of a core with MEM_PORTS (1, 2, 4 or 8) of them, as the initialiser of a list of
// PortIo: port k is Amaranth's memk, its write data in WBUF[k].
#define AXI_PORTS_1(TOP, WBUF) AXI_PORT(TOP, mem0___05F, WBUF[0])
#define AXI_PORTS_2(TOP, WBUF) AXI_PORTS_1(TOP, WBUF), AXI_PORT(TOP, mem1___05F, WBUF[1])
#define AXI_PORTS_4(TOP, WBUF) \
    AXI_PORTS_2(TOP, WBUF), AXI_PORT(TOP, mem2___05F, WBUF[2]), AXI_PORT(TOP, mem3___05F, WBUF[3])
#define AXI_PORTS_8(TOP, WBUF)                                                                 \
    AXI_PORTS_4(TOP, WBUF), AXI_PORT(TOP, mem4___05F, WBUF[4]), AXI_PORT(TOP, mem5___05F, WBUF[5]), \
        AXI_PORT(TOP, mem6___05F, WBUF[6]), AXI_PORT(TOP, mem7___05F, WBUF[7])
#define AXI_PORTS_OF(N) AXI_PORTS_##N
#define AXI_PORTS_N(N, TOP, WBUF) AXI_PORTS_OF(N)(TOP, WBUF)
#define AXI_PORTS(TOP, WBUF) AXI_PORTS_N(MEM_PORTS, TOP, WBUF)

// Every driver that includes this header (axi_harness.cpp, extcorelib.cpp) expands AXI_PORTS, so its
// build must define the core's port count and beat width.
#ifndef MEM_PORTS
#error "MEM_PORTS must be defined"
#endif
#ifndef LANES
#error "LANES must be defined"
#endif
