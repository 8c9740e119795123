"""The golden aggregator's rules on a whole batch of datagrams at once (``wanreduce aggd``'s default).

:class:`BatchAggregator` takes the UDP payloads of one ``recvmmsg`` call as rows of a uint8 array and
does what :class:`~wanreduce.host.golden.GoldenAggregator` does to them one by one (gather mode, one
job): the header rules (drop codes 9-21) are checked for the whole batch with numpy, on the header viewed
as :data:`~wanreduce.host.protocol.HEADER_DTYPE`, the lowest code winning; the slot table is arrays
(state, the tag of the chunk held and of the shadow, the bitmap, dtype, count, group and flags, member
buffers, shadow RESULTs); only the reorder buffer's rules (codes 22-25, in arrival order, because each
datagram changes the slot the next one meets) run per datagram, on plain integers. A completed chunk is
summed with one numpy addition per member in the group's summation order, in the packet's dtype, then
NaNs become the dtype's canonical NaN: the golden model's arithmetic, bit for bit.

Its counters, RESULT payloads and their order equal the golden model's for any sequence of datagrams
(``tests/host/test_batchagg.py`` holds them equal on seeded mixes of good and malformed datagrams).

Latency: a batch's RESULTs are ready when :meth:`BatchAggregator.feed_batch` returns. Back-pressure: none;
the caller sends :attr:`BatchAggregator.out` rows ``[:k]`` before the next batch overwrites them.
"""

import math

import numpy as np

from ..spec.core import bank_slot
from ..spec.protocol import FLAGS_VALID, HEADER_BYTES, MAGIC, MAX_RANKS, UDP_PORT, VERSION, Drop, DType, Kind
from ..spec.regmap import COUNTER_NAMES
from . import fastio
from .frames import parse_frame
from .golden import expected_order
from .protocol import HEADER_DTYPE, np_dtype

__all__ = ["BatchAggregator"]

_EMPTY, _LIVE, _DONE = 0, 1, 2
#: Bytes per element by dtype code (0 where the code is not a dtype).
_SIZES = np.zeros(256, np.int64)
for _d in DType:
    _SIZES[int(_d)] = _d.size


def _nan_rule(dtype):
    """``(magnitude mask, infinity bits, canonical NaN)`` of a dtype's bit patterns: a NaN's magnitude
    exceeds infinity's."""
    return (1 << (dtype.width - 1)) - 1, ((1 << dtype.exp_bits) - 1) << dtype.man_bits, dtype.canonical_nan


_NAN = {int(d): _nan_rule(d) for d in DType}
_BITS = {int(d): np.dtype(f"<u{d.size}") for d in DType}
_FP32 = int(DType.FP32)


class _Work:
    """One batch's bookkeeping: per live slot the rows of this batch it holds (``{member: row}``), the
    chunks completed (slot, row, group, flags, bitmap) whose headers are still to write, and the RESULTs to
    send (a row of ``store`` each, and its length)."""

    __slots__ = ("inrows", "done", "completed", "outs", "out_len", "sums")

    def __init__(self):
        self.inrows, self.done, self.completed, self.outs, self.out_len = {}, [], set(), [], []
        self.sums = {}  # (dtype, count, members) → chunks whose contributions all came in this batch


class BatchAggregator:
    """One site's aggregator for job ``job``; ``period`` lists each round's expected entry (a bitmap or
    the ranks in summation order, as :class:`~wanreduce.host.golden.GoldenAggregator` takes them).
    ``batch`` is the most datagrams one call takes (and RESULTs it can return). ``native`` (default: when
    :func:`wanreduce.host.fastio.library` builds) sums binary32 chunks in ``udpio.cc``: the same bits."""

    def __init__(self, *, rank, job, period, slots, members, slot_bytes, bank_bits, batch=256, native=None):
        if not 0 <= rank < MAX_RANKS:
            raise ValueError(f"The rank must be in 0..{MAX_RANKS - 1}, not {rank}.")
        if slots < 1 or slots & (slots - 1) or members < 1 or slot_bytes < 1:
            raise ValueError(
                "The slot count must be a power of two, and the members per slot and slot bytes positive."
            )
        if not period:
            raise ValueError(f"Job {job} has an empty schedule period.")
        if not 0 <= bank_bits <= slots.bit_length() - 1:
            raise ValueError(f"A bank of 2**{bank_bits} slots does not fit {slots} slots.")
        self.rank, self.job, self.slot_bytes, self.members = rank, int(job), int(slot_bytes), int(members)
        self.period, self.bank_bits, self.n_slots = len(period), int(bank_bits), int(slots)
        entries = [expected_order(e) for e in period]
        self.expected = [bitmap for bitmap, _ in entries]
        self.orders = [order for _, order in entries]
        self._gsize = [len(order) for order in self.orders]
        self._gsizes = np.asarray(self._gsize, np.int64)
        # pos[round mod P, src]: the member buffer of src in that round's summation order, -1 if unexpected.
        self.pos = np.full((self.period, MAX_RANKS), -1, np.int64)
        for r, order in enumerate(self.orders):
            if len(order) > members:
                raise ValueError(
                    f"Job {job} expects {len(order)} members in a round, more than the {members} buffers "
                    "a slot has."
                )
            self.pos[r, list(order)] = np.arange(len(order))
        # Per-slot scalars, read and written per datagram, as lists; member buffers and shadows as arrays
        # (rows padded to whole 32-bit words, so that every dtype can view them).
        self.state = [_EMPTY] * slots
        self.key = [0] * slots  # round << 32 | chunk of the chunk the slot holds
        self.last_key = [-1] * slots  # ... and of the shadow's chunk (-1: none yet)
        self.bitmap = [0] * slots
        self.sdtype, self.scount = [0] * slots, [0] * slots
        self.sgroup, self.sflags = [0] * slots, [0] * slots
        cap = -(-slot_bytes // 4) * 4
        self.data = np.zeros((slots, members, cap), np.uint8)
        self.row_bytes = HEADER_BYTES + cap
        self.batch = int(batch)
        # The shadow RESULT of every slot, then a row per datagram of a batch for a RESULT that must be kept
        # apart from its shadow (the slot completed again within the batch): RESULTs are sent from here.
        self.store = np.zeros((slots + self.batch, self.row_bytes), np.uint8)
        self.shadow = self.store[:slots]
        self.shadow_len = [0] * slots
        for buf in (self.data, self.store):
            buf.fill(0)  # touch every page now rather than on the first datagrams
        self._shadow_hdr = self.shadow[:, :HEADER_BYTES].view(HEADER_DTYPE)[:, 0]
        payloads = self.shadow[:, HEADER_BYTES:]
        self._views = {int(d): (self.data.view(np_dtype(d)), payloads.view(np_dtype(d))) for d in DType}
        self._rowvals = {}  # this batch's rows viewed as each dtype's values
        self._scratch = np.zeros(cap // 2, np.uint32)
        #: The RESULTs of the last call: row ``out_rows[i]`` of :attr:`store` holds ``out_len[i]`` bytes.
        self.out_rows = np.zeros(self.batch, np.int64)
        self.out_len = np.zeros(self.batch, np.int64)
        self._one = np.zeros((1, max(self.row_bytes, 16384)), np.uint8)
        self.counters = {name: 0 for name in COUNTER_NAMES}
        self._lib = fastio.library() if native is None or native else None

    # The header rules of PROTOCOL.md (validate.check_payload), for every row at once.
    def _codes(self, rows, lengths, heads):
        n = len(lengths)
        packed = np.ascontiguousarray(rows[:n, :HEADER_BYTES] if heads is None else heads[:n, :HEADER_BYTES])
        h = packed.view(HEADER_DTYPE)[:, 0]
        kind, src, count = h["kind"].astype(np.int64), h["src"].astype(np.int64), h["count"].astype(np.int64)
        size = _SIZES[h["dtype"]]
        srcbit = np.left_shift(np.uint64(1), np.minimum(src, MAX_RANKS - 1).astype(np.uint64))
        # Placed a round's schedule entry: the member buffer of src (-1: src unexpected, another job).
        member = np.where(
            (h["job"] == self.job) & (src < MAX_RANKS),
            self.pos[h["round"] % self.period, np.minimum(src, MAX_RANKS - 1)],
            -1,
        )
        rules = (
            (lengths < HEADER_BYTES, Drop.SHORT_HEADER),
            (h["magic"] != MAGIC, Drop.BAD_MAGIC),
            (h["version"] != VERSION, Drop.BAD_VERSION),
            ((kind != Kind.CONTRIB) & (kind != Kind.RESULT), Drop.BAD_KIND),
            (size == 0, Drop.BAD_DTYPE),
            ((h["flags"] & (0xFF & ~FLAGS_VALID)) != 0, Drop.BAD_FLAGS),
            (h["reserved"] != 0, Drop.BAD_RESERVED),
            (count == 0, Drop.BAD_COUNT),
            (lengths != HEADER_BYTES + count * size, Drop.BAD_LENGTH),
            (kind == Kind.RESULT, Drop.RESULT_ON_INPUT),
            ((src >= MAX_RANKS) | (h["bitmap"] != srcbit), Drop.BAD_BITMAP),
            (count * size > self.slot_bytes, Drop.TOO_LARGE),
            (member < 0, Drop.UNEXPECTED_SRC),
        )
        code = np.zeros(n, np.int64)
        if np.logical_or.reduce([cond for cond, _ in rules]).any():  # (the usual batch breaks no rule)
            for cond, drop in reversed(rules):  # the lowest code applied last wins
                code[cond] = int(drop)
        return h, code, member, size * count

    def feed_batch(self, rows, lengths, heads=None):
        """Datagrams ``rows[i, :lengths[i]]`` (i < len(lengths)) in arrival order → the number k of RESULT
        payloads, in the order the golden model emits them: ``out_len[j]`` bytes of row ``out_rows[j]`` of
        :attr:`store` for j < k (until the next call). ``heads``: the rows' headers packed (their first
        ``HEADER_BYTES`` bytes, as :class:`~wanreduce.host.mmsg.Receiver` keeps them), if at hand."""
        n = len(lengths)
        if n > self.batch:
            raise ValueError(f"A batch of {n} datagrams is more than the {self.batch} this aggregator takes.")
        self.counters["frames_in"] += n
        if n == 0:
            return 0
        h, code, member, nbytes = self._codes(rows, np.asarray(lengths, np.int64), heads)
        bad = code[code != 0]
        if bad.size:
            for c, k in zip(*np.unique(bad, return_counts=True), strict=True):
                self.counters[Drop(int(c)).counter] += int(k)
        good = np.flatnonzero(code == 0)
        if good.size == 0:
            return 0
        rnd, chunk = h["round"][good].astype(np.uint64), h["chunk"][good].astype(np.uint64)
        slot = bank_slot(rnd, chunk, period=self.period, bank_bits=self.bank_bits, slots=self.n_slots)
        tags = (rnd << np.uint64(32)) | chunk
        w = _Work()
        # The longest start of the batch made of whole chunks goes at once; the rest datagram by datagram.
        used = self._whole_chunks(h, good, slot, tags, member[good], nbytes[good], rnd, w)
        good, slot, tags, rnd = good[used:], slot[used:], tags[used:], rnd[used:]
        member, nbytes = member[good], nbytes[good]
        slot = slot.tolist()
        key = tags.tolist()  # Python ints: tags compare as (round, chunk)
        fields = (
            good.tolist(),
            slot,
            key,
            h["src"][good].tolist(),
            member.tolist(),
            h["dtype"][good].tolist(),
            h["count"][good].tolist(),
            h["group"][good].tolist(),
            h["flags"][good].tolist(),
            (rnd % np.uint64(self.period)).tolist(),
            nbytes.tolist(),
        )
        return self._slots(rows, h, w, *fields)

    def _by_slot(self, slot, rnd):
        """The datagrams by slot, each slot's in arrival order: ``(order, slots so ordered, where a slot's
        run starts, the runs' first positions, each run's phase in the period)``."""
        order = np.argsort(slot, kind="stable")
        ss = slot[order]
        start = np.empty(len(ss), bool)
        start[:1] = True
        np.not_equal(ss[1:], ss[:-1], out=start[1:])
        first = np.flatnonzero(start)
        phase = (rnd[order[first]] % np.uint64(self.period)).astype(np.int64)
        return order, ss, start, first, phase

    def _whole_chunks(self, h, good, slot, tags, member, nbytes, rnd, w):
        """The usual batch, without a Python step per datagram: every slot its first ``u`` datagrams touch
        is free (empty, or done with an older chunk) and gets exactly its round's members' contributions to
        one chunk, all of one dtype and count, so each completes here. Returns ``u`` (0: no such start; the
        chunks cut by the batch's end are left to :meth:`_slots`, which judges the rest datagram by
        datagram with the same outcome as if all had gone so), the sums pending in ``w``."""
        n = good.size
        if n == 0:
            return 0
        order, ss, start, first, phase = self._by_slot(slot, rnd)
        g = self._gsizes[phase]
        short = np.diff(first, append=n) < g
        if short.any():  # chunks not all in: the start before the first of their datagrams
            run = np.cumsum(start) - 1
            n = int(order[short[run]].min())
            if n == 0:
                return 0
            good, slot, tags, member, nbytes, rnd = (a[:n] for a in (good, slot, tags, member, nbytes, rnd))
            order, ss, start, first, phase = self._by_slot(slot, rnd)
            g = self._gsizes[phase]
        run = np.cumsum(start) - 1
        tag = tags[order]
        dt, cnt = h["dtype"][good], h["count"][good]
        if (
            (g != g[0]).any()
            or (np.diff(first, append=n) != g).any()
            or (tag != tag[first][run]).any()
            or (dt != dt[0]).any()
            or (cnt != cnt[0]).any()
        ):
            return 0
        src = h["src"][good][order].astype(np.uint64)
        bitmap = np.bitwise_or.reduceat(np.left_shift(np.uint64(1), src), first)
        if (bitmap != np.asarray(self.expected, np.uint64)[phase]).any():
            return 0  # g datagrams covering g expected bits: one from each member
        slot_arr = ss[first]
        slots, chunk_tags = slot_arr.tolist(), tag[first].tolist()
        state, key, last_key = self.state, self.key, self.last_key
        for s, t in zip(slots, chunk_tags, strict=True):
            if t == last_key[s] or state[s] == _LIVE or (state[s] == _DONE and t < key[s]):
                return 0
        # Accepted: the state each slot ends in, its RESULT in the order the chunks completed.
        g, dt, cnt = int(g[0]), int(dt[0]), int(cnt[0])
        idx = good[order]
        last = idx[np.append(first[1:], n) - 1]  # the datagram that completes each chunk
        flags = np.bitwise_or.reduceat(h["flags"][idx], first)
        group = h["group"][idx[first]]
        nb = int(nbytes[0])
        rows_of = np.empty((len(first), g + 1), np.int64)
        rows_of[:, 0] = slot_arr
        rows_of[run, 1 + member[order]] = idx
        w.sums[(dt, cnt, g)] = rows_of
        # The slots are distinct and nothing before this in the batch wrote their shadows, so their RESULT
        # headers are written now, all at once (what _heads would write at the end).
        # (As bytes: numpy copies structured rows field by field.)
        heads = h.view(np.uint8).reshape(len(h), HEADER_BYTES)[last]
        t = heads.view(HEADER_DTYPE)[:, 0]
        t["kind"], t["src"], t["reserved"] = Kind.RESULT, self.rank, 0
        t["group"], t["flags"], t["bitmap"] = group, flags, bitmap
        self.shadow[slot_arr, :HEADER_BYTES] = heads
        sbitmap, sgroup, sflags, shadow_len = self.bitmap, self.sgroup, self.sflags, self.shadow_len
        sdtype, scount, length = self.sdtype, self.scount, HEADER_BYTES + nb
        per_slot = zip(slots, chunk_tags, bitmap.tolist(), group.tolist(), flags.tolist(), strict=True)
        for s, t, b, gr, fl in per_slot:
            state[s], key[s], last_key[s], sbitmap[s] = _DONE, t, t, b
            sdtype[s], scount[s], sgroup[s], sflags[s], shadow_len[s] = dt, cnt, gr, fl, length
        done = slot_arr[np.argsort(last, kind="stable")].tolist()
        w.outs += done
        w.out_len += [length] * len(done)
        w.completed.update(done)
        self.counters["results"] += len(done)
        return n

    def _slots(self, rows, h, w, *fields):
        """The reorder buffer's rules (codes 22-25) per datagram, in arrival order, on plain integers. A
        chunk that completes is summed at once, from this batch's rows and the member buffers; RESULT headers
        and the stores of contributions still waiting are done for the whole batch by :meth:`_finish`."""
        idx, slots, keys, srcs, members, dtypes, counts, groups, flags, phases, sizes = fields
        if w.sums:
            # The whole-chunk path's sums (an array of rows per key) first: a chunk after a cut-short one
            # may complete below with the same dtype, count and group size, and its key starts a list.
            self._flush(rows, w)
        c = self.counters
        state, key, last_key, bitmap = self.state, self.key, self.last_key, self.bitmap
        sdtype, scount, sflags, sgroup = self.sdtype, self.scount, self.sflags, self.sgroup
        expected, sizes_g, shadow_len = self.expected, self._gsize, self.shadow_len
        inrows, outs, out_len = w.inrows, w.outs, w.out_len
        results = 0
        with np.errstate(all="ignore"):
            for i, s, tag, src, m, dt, cnt, grp, fl, ph, nb in zip(
                idx, slots, keys, srcs, members, dtypes, counts, groups, flags, phases, sizes, strict=True
            ):
                if tag == last_key[s]:
                    # Completed here already: never counted again; its sender may lack the RESULT.
                    c["duplicate"] += 1
                    c["results_reemitted"] += 1
                    outs.append(s)
                    out_len.append(shadow_len[s])
                    # the re-emitted RESULT is the shadow as it is now: should the slot complete another
                    # chunk later in this batch, it must move to a row of its own first
                    w.completed.add(s)
                    continue
                st, held = state[s], key[s]
                if st == _LIVE and held != tag:
                    if not tag < held:
                        c["ahead_of_window"] += 1
                        continue
                    if tag < last_key[s]:
                        c["stale"] += 1
                        continue
                    c["evictions"] += 1  # an older chunk takes its slot back (golden.py says why)
                    st = _EMPTY
                if st == _LIVE:
                    if bitmap[s] >> src & 1:
                        c["duplicate"] += 1
                        continue
                    if dt != sdtype[s] or cnt != scount[s]:
                        c["slot_mismatch"] += 1
                        continue
                elif st == _DONE and tag < held:
                    c["stale"] += 1
                    continue
                if st != _LIVE:
                    state[s], key[s], bitmap[s] = _LIVE, tag, 0
                    sdtype[s], scount[s], sgroup[s], sflags[s] = dt, cnt, grp, 0
                    here = inrows[s] = {}  # an evicted chunk's contributions of this batch go with it
                else:
                    here = inrows.get(s)
                    if here is None:
                        here = inrows[s] = {}
                here[m] = i
                got = bitmap[s] = bitmap[s] | 1 << src
                sflags[s] |= fl
                if got != expected[ph]:
                    continue
                if s in w.completed:
                    self._flush(rows, w)
                    self._apart(h, w, s)
                here, g = inrows.pop(s), sizes_g[ph]
                if len(here) == g:  # the usual case: summed with the batch's other such chunks
                    w.sums.setdefault((dt, cnt, g), []).append((s, *(here[m] for m in range(g))))
                else:
                    self._sum(rows, s, dt, cnt, g, here)
                state[s], last_key[s] = _DONE, tag
                shadow_len[s] = HEADER_BYTES + nb
                results += 1
                w.completed.add(s)
                w.done.append((s, i, sgroup[s], sflags[s], bitmap[s]))
                outs.append(s)
                out_len.append(HEADER_BYTES + nb)
        c["results"] += results
        self._flush(rows, w)
        self._rowvals.clear()
        return self._finish(rows, h, w)

    def _rows_as(self, rows, dt):
        rv = self._rowvals.get(dt)
        if rv is None:
            whole = rows.shape[1] - rows.shape[1] % 4
            rv = self._rowvals[dt] = rows[:, HEADER_BYTES:whole].view(self._views[dt][0].dtype)
        return rv

    def _flush(self, rows, w):
        """The chunks of this batch whose contributions all came in it, summed into their shadows a whole
        (dtype, count, group size) at a time: the same additions in the same order as :meth:`_sum`, so
        the same bits, with numpy's loop over chunks instead of Python's."""
        for (dt, count, g), chunks in w.sums.items():
            cols = np.ascontiguousarray(chunks, np.int64)
            if dt == _FP32 and self._lib is not None and rows.flags.c_contiguous:
                # The same additions in C (udpio.cc), one pass a chunk, straight into the shadows.
                self._lib.udpio_sum_f32(
                    rows.ctypes.data,
                    rows.shape[1],
                    HEADER_BYTES,
                    cols.ctypes.data,
                    len(cols),
                    g,
                    count,
                    self.store.ctypes.data,
                    self.row_bytes,
                    _NAN[dt][2],
                )
                continue
            rv = self._rows_as(rows, dt)[:, :count]
            acc = rv[cols[:, 1]]  # a copy: the first term, then the others added in summation order
            for j in range(2, g + 1):
                np.add(acc, rv[cols[:, j]], out=acc)
            mag, inf, canonical = _NAN[dt]
            bits = acc.view(_BITS[dt])
            odd = (bits & mag) > inf
            if odd.any():
                bits[odd] = canonical
            self._views[dt][1][cols[:, 0], :count] = acc
        w.sums.clear()

    def _sum(self, rows, s, dt, count, g, here):
        """Slot ``s``'s ``g`` contributions summed in summation order into its shadow's payload, one rounding
        per addition in the dtype (code ``dt``) as the golden model adds, NaNs made canonical. ``here`` maps
        a member to its row of this batch; the others are in the slot's member buffers."""
        data, shadow = self._views[dt]
        rv = self._rowvals.get(dt)
        if rv is None:
            whole = rows.shape[1] - rows.shape[1] % 4
            rv = self._rowvals[dt] = rows[:, HEADER_BYTES:whole].view(data.dtype)
        acc = shadow[s, :count]
        if len(here) == g:  # every contribution came in this batch (the usual case): no buffer is read
            rows_of = [here[m] for m in range(g)]
            terms = [rv[i, :count] for i in rows_of]
        else:
            terms = [rv[here[m], :count] if m in here else data[s, m, :count] for m in range(g)]
        if g == 1:
            acc[:] = terms[0]
        else:
            np.add(terms[0], terms[1], out=acc)
            for t in terms[2:]:
                np.add(acc, t, out=acc)
        if dt == _FP32 and not math.isnan(np.dot(acc, acc)):
            return  # a sum of squares is NaN exactly when a term is (BLAS: the quickest look at every value)
        mag, inf, canonical = _NAN[dt]
        bits = acc.view(_BITS[dt])
        scratch = self._scratch.view(_BITS[dt])[:count]
        if np.bitwise_and(bits, mag, out=scratch).max() > inf:
            bits[scratch > inf] = canonical

    def _heads(self, h, w):
        """The RESULT headers of the chunks completed since the last call, for all of them at once."""
        if w.done:
            cs, ci, grp, fl, bm = (np.array(col) for col in zip(*w.done, strict=True))
            hdr = self._shadow_hdr
            hdr[cs] = h[ci]
            hdr["kind"][cs], hdr["src"][cs], hdr["reserved"][cs] = Kind.RESULT, self.rank, 0
            hdr["group"][cs], hdr["flags"][cs], hdr["bitmap"][cs] = grp, fl, bm.astype(np.uint64)
            w.done.clear()

    def _apart(self, h, w, s):
        """Slot ``s`` completes a second chunk within the batch: its RESULTs so far move to rows of their own
        before the shadow is overwritten."""
        self._heads(h, w)
        for j, row in enumerate(w.outs):
            if row == s:
                self.store[self.n_slots + j] = self.store[s]
                w.outs[j] = self.n_slots + j

    def _finish(self, rows, h, w):
        """Store the contributions of chunks still incomplete, head the completed ones, list the RESULTs."""
        stores = [(s, m, i) for s, here in w.inrows.items() for m, i in here.items()]
        if stores:
            ss, ms, rs = (np.array(col, np.int64) for col in zip(*stores, strict=True))
            nbs = h["count"][rs].astype(np.int64) * _SIZES[h["dtype"][rs]]
            for nb in set(nbs.tolist()):
                pick = nbs == nb
                self.data[ss[pick], ms[pick], :nb] = rows[rs[pick], HEADER_BYTES : HEADER_BYTES + nb]
        self._heads(h, w)
        k = len(w.outs)
        self.out_rows[:k] = w.outs
        self.out_len[:k] = w.out_len
        return k

    def results(self, k):
        """The last call's ``k`` RESULT payloads as bytes."""
        return [self.store[self.out_rows[j], : self.out_len[j]].tobytes() for j in range(k)]

    def feed_payload(self, payload):
        """One UDP payload → the RESULT payloads (bytes) it completes or re-emits."""
        payload = bytes(payload)
        n = min(len(payload), self._one.shape[1])
        self._one[0, :n] = np.frombuffer(payload[:n], np.uint8)
        return self.results(self.feed_batch(self._one, np.array([len(payload)])))

    def feed_frame(self, frame, *, port=UDP_PORT):
        """A whole Ethernet frame (a copy the emulated WAN corrupted) → the RESULT payloads it causes."""
        payload, _, reason = parse_frame(frame, port=port)
        if reason is not None:
            self.counters["frames_in"] += 1
            self.counters[reason.counter] += 1
            return []
        return self.feed_payload(payload)

    def missing(self, job, round_, chunk):
        """Ranks whose contribution to the chunk this aggregator has not stored (GoldenAggregator.missing)."""
        if job != self.job:
            return ()
        order = self.orders[round_ % self.period]
        tag = round_ << 32 | chunk
        s = bank_slot(round_, chunk, period=self.period, bank_bits=self.bank_bits, slots=self.n_slots)
        if self.last_key[s] == tag or (self.state[s] == _DONE and self.key[s] == tag):
            return ()
        seen = self.bitmap[s] if self.state[s] == _LIVE and self.key[s] == tag else 0
        return tuple(r for r in order if not seen >> r & 1)
