// FIPS 180-4 SHA-256 of a file, streamed: the bench tools name the library they drove by
// it, and the runtimes' backends check that their artifacts were converted from the
// bundle's GGUF (the converters record the GGUF's sha256 and the files they wrote). Gemma's
// converted weights are 1.1 GB, checked at every open: on x86-64 the CPU's SHA extensions
// do the rounds where it has them.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define ELIZA_SHA256_SHANI 1
#else
#define ELIZA_SHA256_SHANI 0
#endif

namespace eliza {

class Sha256 {
public:
    void update(const unsigned char * p, size_t n) {
        bytes_ += n;
        if (fill_ > 0) {
            const size_t take = std::min(n, size_t{64} - fill_);
            std::memcpy(buf_.data() + fill_, p, take);
            fill_ += take;
            p += take;
            n -= take;
            if (fill_ < 64) return;
            blocks(buf_.data(), 1);
            fill_ = 0;
        }
        // whole blocks straight from the input, not copied a byte at a time
        const size_t whole = n / 64;
        if (whole > 0) blocks(p, whole);
        p += whole * 64;
        n -= whole * 64;
        std::memcpy(buf_.data(), p, n);
        fill_ = n;
    }

    std::string hex_digest() {
        const uint64_t bits = bytes_ * 8;
        const unsigned char one = 0x80, zero = 0;
        update(&one, 1);
        while (fill_ != 56) update(&zero, 1);
        unsigned char length[8];
        for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((bits >> (8 * (7 - i))) & 0xff);
        update(length, 8);
        char out[65];
        for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", h_[static_cast<size_t>(i)]);
        return std::string(out, 64);
    }

private:
    static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

    void blocks(const unsigned char * p, size_t count) {
#if ELIZA_SHA256_SHANI
        // The x86 SHA extensions where the CPU has them: about 5x the portable rounds, which
        // matters when a runtime's 1 GB of converted weights is checked at every open.
        static const bool shani = cpu_has_sha_extensions();
        if (shani) {
            blocks_shani(h_.data(), p, count);
            return;
        }
#endif
        for (size_t i = 0; i < count; ++i) block(p + 64 * i);
    }

#if ELIZA_SHA256_SHANI
    static bool cpu_has_sha_extensions() {
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
        const bool ssse3 = (c & (1u << 9)) != 0, sse41 = (c & (1u << 19)) != 0;
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
        return ssse3 && sse41 && (b & (1u << 29)) != 0;
    }

    __attribute__((target("sha,sse4.1,ssse3"))) static void blocks_shani(uint32_t * state, const unsigned char * p,
                                                                         size_t count) {
        const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
        __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(state)), 0xB1);
        __m128i state1 = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(state + 4)), 0x1B);
        __m128i state0 = _mm_alignr_epi8(tmp, state1, 8);  // ABEF
        state1 = _mm_blend_epi16(state1, tmp, 0xF0);       // CDGH
        for (; count > 0; --count, p += 64) {
            const __m128i abef = state0, cdgh = state1;
            __m128i w[16];
            for (int j = 0; j < 16; ++j) {
                if (j < 4) {
                    w[j] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 16 * j)), byte_swap);
                } else {
                    const __m128i sum = _mm_add_epi32(_mm_sha256msg1_epu32(w[j - 4], w[j - 3]),
                                                      _mm_alignr_epi8(w[j - 1], w[j - 2], 4));
                    w[j] = _mm_sha256msg2_epu32(sum, w[j - 1]);
                }
                __m128i msg = _mm_add_epi32(w[j], _mm_loadu_si128(reinterpret_cast<const __m128i *>(kRound + 4 * j)));
                state1 = _mm_sha256rnds2_epu32(state1, state0, msg);
                msg = _mm_shuffle_epi32(msg, 0x0E);
                state0 = _mm_sha256rnds2_epu32(state0, state1, msg);
            }
            state0 = _mm_add_epi32(state0, abef);
            state1 = _mm_add_epi32(state1, cdgh);
        }
        tmp = _mm_shuffle_epi32(state0, 0x1B);              // FEBA
        state1 = _mm_shuffle_epi32(state1, 0xB1);           // DCHG
        state0 = _mm_blend_epi16(tmp, state1, 0xF0);        // DCBA
        state1 = _mm_alignr_epi8(state1, tmp, 8);           // HGFE
        _mm_storeu_si128(reinterpret_cast<__m128i *>(state), state0);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(state + 4), state1);
    }
#endif

    static constexpr uint32_t kRound[64] = {
            0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
            0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
            0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
            0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
            0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
            0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
            0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
            0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

    void block(const unsigned char * p) {
        const uint32_t * k = kRound;
        uint32_t w[64];
        for (int i = 0; i < 16; ++i)
            w[i] = (uint32_t(p[4 * i]) << 24) | (uint32_t(p[4 * i + 1]) << 16) | (uint32_t(p[4 * i + 2]) << 8) | p[4 * i + 3];
        for (int i = 16; i < 64; ++i) {
            const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], hh = h_[7];
        for (int i = 0; i < 64; ++i) {
            const uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
            const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
        }
        h_[0] += a; h_[1] += b; h_[2] += c; h_[3] += d; h_[4] += e; h_[5] += f; h_[6] += g; h_[7] += hh;
    }

    std::array<uint32_t, 8> h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::array<unsigned char, 64> buf_{};
    size_t fill_ = 0;
    uint64_t bytes_ = 0;
};

// The hex digest of a whole file; "" when it cannot be read (an empty file included, as the
// bench records have always had it).
inline std::string sha256_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return "";
    Sha256 s;
    std::vector<char> block(64u << 10);  // small: the bench tools count their own peak RSS
    uint64_t total = 0;
    while (in) {
        in.read(block.data(), static_cast<std::streamsize>(block.size()));
        const std::streamsize got = in.gcount();
        if (got <= 0) break;
        s.update(reinterpret_cast<const unsigned char *>(block.data()), static_cast<size_t>(got));
        total += static_cast<uint64_t>(got);
    }
    if (in.bad() || total == 0) return "";
    return s.hex_digest();
}

}  // namespace eliza
