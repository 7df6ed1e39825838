// XXH64 (Yann Collet's xxHash, 64-bit variant, seed 0 unless given): the model content
// hash and the slot file checksum. Fast (several GB/s), streaming, no dependency. Not a
// cryptographic hash: it detects corruption and tells models apart; a slot file's
// contents are validated on their own (see llama_stream.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace eliza {

class Xxh64 {
public:
    explicit Xxh64(uint64_t seed = 0) : seed_(seed) {
        v_[0] = seed + kP1 + kP2;
        v_[1] = seed + kP2;
        v_[2] = seed;
        v_[3] = seed - kP1;
    }

    void update(const void * data, size_t n) {
        const auto * p = static_cast<const unsigned char *>(data);
        total_ += n;
        if (buffered_ + n < 32) {
            std::memcpy(buf_ + buffered_, p, n);
            buffered_ += n;
            return;
        }
        if (buffered_ > 0) {
            const size_t take = 32 - buffered_;
            std::memcpy(buf_ + buffered_, p, take);
            stripe(buf_);
            p += take;
            n -= take;
            buffered_ = 0;
        }
        while (n >= 32) {
            stripe(p);
            p += 32;
            n -= 32;
        }
        std::memcpy(buf_, p, n);
        buffered_ = n;
    }

    uint64_t digest() const {
        uint64_t h;
        if (total_ >= 32) {
            h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
            for (uint64_t v : v_) {
                h ^= round(0, v);
                h = h * kP1 + kP4;
            }
        } else {
            h = seed_ + kP5;
        }
        h += total_;
        const unsigned char * p = buf_;
        size_t n = buffered_;
        while (n >= 8) {
            h ^= round(0, read64(p));
            h = rotl(h, 27) * kP1 + kP4;
            p += 8;
            n -= 8;
        }
        if (n >= 4) {
            h ^= static_cast<uint64_t>(read32(p)) * kP1;
            h = rotl(h, 23) * kP2 + kP3;
            p += 4;
            n -= 4;
        }
        while (n > 0) {
            h ^= (*p) * kP5;
            h = rotl(h, 11) * kP1;
            ++p;
            --n;
        }
        h ^= h >> 33;
        h *= kP2;
        h ^= h >> 29;
        h *= kP3;
        h ^= h >> 32;
        return h;
    }

    static uint64_t of(const void * data, size_t n, uint64_t seed = 0) {
        Xxh64 h(seed);
        h.update(data, n);
        return h.digest();
    }

private:
    static constexpr uint64_t kP1 = 11400714785074694791ull;
    static constexpr uint64_t kP2 = 14029467366897019727ull;
    static constexpr uint64_t kP3 = 1609587929392839161ull;
    static constexpr uint64_t kP4 = 9650029242287828579ull;
    static constexpr uint64_t kP5 = 2870177450012600261ull;

    static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
    // Little-endian reads (every supported target is little-endian).
    static uint64_t read64(const unsigned char * p) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        return v;
    }
    static uint32_t read32(const unsigned char * p) {
        uint32_t v;
        std::memcpy(&v, p, 4);
        return v;
    }
    static uint64_t round(uint64_t acc, uint64_t input) {
        acc += input * kP2;
        acc = rotl(acc, 31);
        return acc * kP1;
    }
    void stripe(const unsigned char * p) {
        v_[0] = round(v_[0], read64(p));
        v_[1] = round(v_[1], read64(p + 8));
        v_[2] = round(v_[2], read64(p + 16));
        v_[3] = round(v_[3], read64(p + 24));
    }

    uint64_t seed_;
    uint64_t v_[4];
    unsigned char buf_[32] = {0};
    size_t buffered_ = 0;
    uint64_t total_ = 0;
};

}  // namespace eliza
