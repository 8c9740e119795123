// The receive loop of wanreduce.host.fastio: every datagram queued on a non-blocking UDP socket, read with
// UDP GRO (Linux 5.0: one recvmsg returns a run of same-size datagrams that a GSO send, or a NIC's GRO,
// kept as one buffer) into the rows of a caller's array, one datagram a row, with its length.
//
// The iovecs of a read are cut at the datagram size the caller expects, one a row, so a run of datagrams
// of that size lands in its rows with no copy. Anything else (another size, more datagrams than rows left,
// a datagram longer than a row) is copied through a staging buffer and parked until rows are free: the
// rows and lengths are the same as one recvmmsg datagram a row with MSG_TRUNC gives, in the same order.
// Plain C ABI (extern "C"), loaded with ctypes; no Python headers needed.

#include <errno.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <new>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#ifndef UDP_GRO
#define UDP_GRO 104
#endif

// The sums are built for AVX2 as well where the compiler can, the one the CPU runs chosen when
// the library loads (GCC's function multiversioning): the same IEEE operations, four or eight at a time.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WR_SIMD __attribute__((target_clones("avx2", "default")))
#else
#define WR_SIMD
#endif

namespace {

constexpr size_t kStage = 1 << 17;  // more than the largest UDP payload a read can return (64 KiB)
constexpr int kMaxIov = 1023;       // UIO_MAXIOV less the staging buffer's iovec
constexpr size_t kLongest = 65535;  // the most a read returns (an IPv4 datagram's total length)
constexpr int kTooLong = -(1 << 20);  // udpio_send: a datagram longer than its segment (fastio.TOO_LONG)

struct Rx {
    uint8_t stage[kStage];  // what did not fit the rows' iovecs
    uint8_t parked[kStage];  // a read that must be re-cut, and the part of it not yet handed out
    size_t parked_len = 0, parked_off = 0, parked_seg = 0;
    iovec iov[kMaxIov + 1];
    char control[CMSG_SPACE(sizeof(int))];
};

// Hand out parked datagrams into rows [n, max_rows); returns the new n.
int unpark(Rx* rx, uint8_t* rows, size_t row_bytes, int n, int max_rows, int64_t* lengths) {
    while (rx->parked_off < rx->parked_len && n < max_rows) {
        size_t len = rx->parked_len - rx->parked_off;
        if (len > rx->parked_seg) len = rx->parked_seg;
        memcpy(rows + static_cast<size_t>(n) * row_bytes, rx->parked + rx->parked_off,
               len < row_bytes ? len : row_bytes);
        lengths[n++] = static_cast<int64_t>(len);
        rx->parked_off += len;
    }
    if (rx->parked_off >= rx->parked_len) rx->parked_len = rx->parked_off = 0;
    return n;
}

int recv_rows(Rx* rx, int fd, uint8_t* rows, size_t row_bytes, int max_rows, int64_t* lengths, size_t seg) {
    if (seg == 0 || seg > row_bytes) seg = row_bytes;
    int n = unpark(rx, rows, row_bytes, 0, max_rows, lengths);
    while (n < max_rows) {
        // Rows for the longest read there can be, no more: the kernel copies in every iovec it is given.
        int k = max_rows - n, most = static_cast<int>(kLongest / seg) + 1;
        if (k > most) k = most;
        if (k > kMaxIov) k = kMaxIov;
        for (int i = 0; i < k; i++) {
            rx->iov[i].iov_base = rows + static_cast<size_t>(n + i) * row_bytes;
            rx->iov[i].iov_len = seg;
        }
        rx->iov[k].iov_base = rx->stage;
        rx->iov[k].iov_len = kStage;
        msghdr msg = {};
        msg.msg_iov = rx->iov;
        msg.msg_iovlen = static_cast<size_t>(k) + 1;
        msg.msg_control = rx->control;
        msg.msg_controllen = sizeof rx->control;
        ssize_t got = recvmsg(fd, &msg, MSG_DONTWAIT);
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            return n ? n : -errno;
        }
        size_t total = static_cast<size_t>(got), size = total;
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) {
                int g;
                memcpy(&g, CMSG_DATA(c), sizeof g);
                if (g > 0) size = static_cast<size_t>(g);
            }
        }
        if (size == 0) size = 1;  // an empty datagram
        size_t count = total ? (total + size - 1) / size : 1;
        if ((size == seg || count == 1) && total <= static_cast<size_t>(k) * seg && size <= seg) {
            // In place: every datagram in a row of its own.
            for (size_t i = 0; i + 1 < count; i++) lengths[n++] = static_cast<int64_t>(size);
            lengths[n++] = static_cast<int64_t>(total - (count - 1) * size);
            continue;
        }
        // Re-cut: gather the read as it lies (rows' iovecs, then the stage), hand it out a datagram a row.
        size_t at = 0;
        for (int i = 0; i <= k && at < total; i++) {
            size_t part = total - at < rx->iov[i].iov_len ? total - at : rx->iov[i].iov_len;
            memcpy(rx->parked + at, rx->iov[i].iov_base, part);
            at += part;
        }
        rx->parked_len = total;
        rx->parked_off = 0;
        rx->parked_seg = size;
        if (total == 0) {
            lengths[n] = 0;  // an empty datagram: a row of its own, nothing in it
            n++;
            continue;
        }
        n = unpark(rx, rows, row_bytes, n, max_rows, lengths);
    }
    return n;
}

}  // namespace

extern "C" {

void* udpio_new() { return new (std::nothrow) Rx(); }

void udpio_free(void* rx) { delete static_cast<Rx*>(rx); }

// Turn UDP GRO on for the socket: 0, or -errno where the kernel has none.
int udpio_gro(int fd) {
    int on = 1;
    return setsockopt(fd, IPPROTO_UDP, UDP_GRO, &on, sizeof on) == 0 ? 0 : -errno;
}

// Up to max_rows datagrams into rows (row_bytes apart); datagram i is rows[i][:min(lengths[i], row_bytes)].
// seg: the datagram size expected (the iovecs' cut). heads (head_bytes apart, may be null): each row's
// first head_bytes bytes again, packed, for checks of a whole batch of headers. Returns how many (0: none
// queued) or -errno.
int udpio_recv(void* handle, int fd, uint8_t* rows, size_t row_bytes, int max_rows, int64_t* lengths,
               size_t seg, uint8_t* heads, size_t head_bytes) {
    int n = recv_rows(static_cast<Rx*>(handle), fd, rows, row_bytes, max_rows, lengths, seg);
    if (heads && head_bytes <= row_bytes) {
        for (int i = 0; i < n; i++)
            memcpy(heads + static_cast<size_t>(i) * head_bytes, rows + static_cast<size_t>(i) * row_bytes,
                   head_bytes);
    }
    return n;
}

// Whether rows 1..n-1 of heads (head_bytes apart) equal row 0 on the bytes where mask is non-zero, and the
// big-endian 4-byte word at offset seq counts up by one from row to row (a run of in-order datagrams of
// one kind): 1 or 0.
int udpio_run_of(const uint8_t* heads, size_t head_bytes, int n, const uint8_t* mask, size_t seq) {
    auto word = [&](int i) {
        const uint8_t* p = heads + static_cast<size_t>(i) * head_bytes + seq;
        return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
    };
    uint32_t first = word(0);
    for (int i = 1; i < n; i++) {
        const uint8_t* row = heads + static_cast<size_t>(i) * head_bytes;
        for (size_t b = 0; b < head_bytes; b++)
            if (mask[b] && row[b] != heads[b]) return 0;
        if (word(i) != first + static_cast<uint32_t>(i)) return 0;
    }
    return 1;
}

// Rows i < k (count values at src + i * src_bytes) divided by g into dst + i * dst_bytes, IEEE binary32
// division as numpy's (one correctly rounded division a value). The results go to memory with streaming
// stores where the destination allows (SSE2): the result array is written once and not read here, so
// its cache lines need not be fetched first. Returns 0.
int udpio_div_f32(const uint8_t* src, size_t src_bytes, uint8_t* dst, size_t dst_bytes, int k, int count,
                  float g) {
    for (int i = 0; i < k; i++) {
        const float* a = reinterpret_cast<const float*>(src + static_cast<size_t>(i) * src_bytes);
        float* out = reinterpret_cast<float*>(dst + static_cast<size_t>(i) * dst_bytes);
        int e = 0;
#if defined(__SSE2__)
        for (; e < count && (reinterpret_cast<uintptr_t>(out + e) & 15); e++) out[e] = a[e] / g;
        const __m128 by = _mm_set1_ps(g);
        for (; e + 4 <= count; e += 4) _mm_stream_ps(out + e, _mm_div_ps(_mm_loadu_ps(a + e), by));
#endif
        for (; e < count; e++) out[e] = a[e] / g;
    }
#if defined(__SSE2__)
    _mm_sfence();  // the streamed results are visible before this returns
#endif
    return 0;
}

// Datagram i is head_len bytes at heads + head_starts[i] then lengths[i] bytes at addrs[i], sent to the
// IPv4 address addr. With segment > 0 (the socket's UDP_SEGMENT), runs of datagrams of exactly segment
// bytes go up to per_send a send, a run ending after a shorter one (GSO: only the last may be shorter).
// Returns how many datagrams were sent (fewer when the socket's buffer is full), or -errno, or kTooLong
// when a datagram is longer than a segment (nothing sent).
int udpio_send(int fd, const sockaddr_in* addr, const uint8_t* heads, const int64_t* head_starts,
               size_t head_len, const uint64_t* addrs, const int64_t* lengths, int count, size_t segment,
               int per_send) {
    constexpr int kMsgs = 64, kMaxRun = 64;  // messages a call; datagrams a GSO send (UDP_MAX_SEGMENTS)
    if (segment == 0 || per_send < 1) per_send = 1;
    if (per_send > kMaxRun) per_send = kMaxRun;
    if (segment) {
        for (int i = 0; i < count; i++)
            if (head_len + static_cast<size_t>(lengths[i]) > segment) return kTooLong;
    }
    static thread_local iovec iov[kMsgs * 2 * kMaxRun];
    mmsghdr msgs[kMsgs];
    int first[kMsgs + 1];
    int done = 0;
    while (done < count) {
        int m = 0, i = done, v = 0;
        while (m < kMsgs && i < count) {
            first[m] = i;
            msghdr& h = msgs[m].msg_hdr;
            h = msghdr{};
            h.msg_name = const_cast<sockaddr_in*>(addr);
            h.msg_namelen = sizeof(sockaddr_in);
            h.msg_iov = iov + v;
            int k = 0;
            while (i < count && k < per_send) {
                size_t size = head_len + static_cast<size_t>(lengths[i]);
                iov[v].iov_base = const_cast<uint8_t*>(heads + head_starts[i]);
                iov[v++].iov_len = head_len;
                iov[v].iov_base = reinterpret_cast<void*>(addrs[i]);
                iov[v++].iov_len = static_cast<size_t>(lengths[i]);
                i++;
                k++;
                if (size != segment) break;
            }
            h.msg_iovlen = static_cast<size_t>(2 * k);
            m++;
        }
        first[m] = i;
        int got = sendmmsg(fd, msgs, static_cast<unsigned>(m), MSG_DONTWAIT);
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return done;
            return done ? done : -errno;
        }
        done = first[got];
        if (got < m) return done;
    }
    return done;
}

// BatchAggregator._flush for binary32 (wanreduce.host.batchagg): chunk j (of k) sums the payloads of rows
// cols[j*(g+1)+1 ..+g] (row_bytes apart, payload at head, count values) in that order, one rounding an
// addition as numpy adds, into row cols[j*(g+1)] of shadow (shadow_bytes apart, payload at head); a NaN
// becomes the canonical NaN. A block of values at a time, summed in a local buffer that the compiler
// knows nothing else points into (so it vectorises), checked for NaN there, then stored. Returns 0.
WR_SIMD int udpio_sum_f32(const uint8_t* rows, size_t row_bytes, size_t head, const int64_t* cols, int k,
                          int g, int count, uint8_t* shadow, size_t shadow_bytes, uint32_t canonical) {
    constexpr int kBlock = 512;
    float acc[kBlock];
    for (int j = 0; j < k; j++) {
        const int64_t* c = cols + static_cast<size_t>(j) * (g + 1);
        uint8_t* out = shadow + static_cast<size_t>(c[0]) * shadow_bytes + head;
        auto term = [&](int m, int at) {
            return reinterpret_cast<const float*>(rows + static_cast<size_t>(c[m]) * row_bytes + head) + at;
        };
        for (int at = 0; at < count; at += kBlock) {
            int n = count - at < kBlock ? count - at : kBlock;
            const float* a = term(1, at);
            if (g == 1) {
                for (int e = 0; e < n; e++) acc[e] = a[e];
            } else {
                const float* b = term(2, at);
                for (int e = 0; e < n; e++) acc[e] = a[e] + b[e];
                for (int m = 3; m <= g; m++) {
                    const float* t = term(m, at);
                    for (int e = 0; e < n; e++) acc[e] += t[e];
                }
            }
            int nan = 0;
            for (int e = 0; e < n; e++) nan |= acc[e] != acc[e];
            if (nan) {
                for (int e = 0; e < n; e++)
                    if (acc[e] != acc[e]) memcpy(acc + e, &canonical, sizeof canonical);
            }
            memcpy(out + static_cast<size_t>(at) * sizeof(float), acc, static_cast<size_t>(n) * sizeof(float));
        }
    }
    return 0;
}

}  // extern "C"
