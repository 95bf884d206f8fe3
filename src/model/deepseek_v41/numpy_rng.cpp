#include "model/deepseek_v41/numpy_rng.h"

#include <array>

#include "core/error.h"

namespace deepinfer::model {
namespace {

using u128 = unsigned __int128;

// numpy/random/bit_generator.pyx: SeedSequence(seed).generate_state(4, uint64) with a pool of 4 words.
std::array<uint64_t, 4> seed_sequence_state(uint64_t seed) {
  constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded,
                     kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
  std::vector<uint32_t> entropy;  // the seed's 32-bit words, least significant first; 0 is one word
  do {
    entropy.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed);
  uint32_t hash_const = kInitA;
  auto hashmix = [&](uint32_t v) {
    v ^= hash_const;
    hash_const *= kMultA;
    v *= hash_const;
    return v ^ (v >> 16);
  };
  auto mix = [](uint32_t x, uint32_t y) {
    const uint32_t r = kMixMultL * x - kMixMultR * y;
    return r ^ (r >> 16);
  };
  std::array<uint32_t, 4> pool{};
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0);
  for (size_t src = 0; src < pool.size(); ++src)
    for (size_t dst = 0; dst < pool.size(); ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
  for (size_t src = pool.size(); src < entropy.size(); ++src)
    for (size_t dst = 0; dst < pool.size(); ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src]));

  uint32_t out_const = kInitB;
  std::array<uint64_t, 4> state{};
  for (size_t i = 0; i < 2 * state.size(); ++i) {  // 8 uint32 words cycling the pool, paired little-endian
    uint32_t v = pool[i % pool.size()] ^ out_const;
    out_const *= kMultB;
    v *= out_const;
    v ^= v >> 16;
    state[i / 2] |= static_cast<uint64_t>(v) << (32 * (i % 2));
  }
  return state;
}

// numpy/random/src/pcg64: PCG64 seeded by pcg64_set_seed(state[0..1], state[2..3]).
class Pcg64 {
 public:
  explicit Pcg64(uint64_t seed) {
    const auto s = seed_sequence_state(seed);
    const u128 init_state = (u128{s[0]} << 64) | s[1], init_seq = (u128{s[2]} << 64) | s[3];
    inc_ = (init_seq << 1) | 1;
    step();
    state_ += init_state;
    step();
  }
  uint64_t next64() {
    step();
    const auto hi = static_cast<uint64_t>(state_ >> 64), lo = static_cast<uint64_t>(state_);
    const unsigned rot = static_cast<unsigned>(state_ >> 122);
    const uint64_t x = hi ^ lo;
    return (x >> rot) | (x << ((64 - rot) & 63));
  }
  uint32_t next32() {  // the low half of a 64-bit draw, then its high half
    if (has_high_) {
      has_high_ = false;
      return high_;
    }
    const uint64_t v = next64();
    high_ = static_cast<uint32_t>(v >> 32);
    has_high_ = true;
    return static_cast<uint32_t>(v);
  }

 private:
  void step() {
    constexpr u128 kMult = (u128{0x2360ED051FC65DA4ULL} << 64) | 0x4385DF649FCCF645ULL;
    state_ = state_ * kMult + inc_;
  }
  u128 state_ = 0, inc_ = 0;
  uint32_t high_ = 0;
  bool has_high_ = false;
};

// numpy/random/src/distributions: a draw from [0, rng] (rng inclusive), Lemire's method.
uint64_t bounded_lemire_uint64(Pcg64& g, uint64_t rng) {
  const uint64_t excl = rng + 1;
  u128 m = u128{g.next64()} * excl;
  if (static_cast<uint64_t>(m) < excl) {
    const uint64_t threshold = (UINT64_MAX - rng) % excl;
    while (static_cast<uint64_t>(m) < threshold) m = u128{g.next64()} * excl;
  }
  return static_cast<uint64_t>(m >> 64);
}

uint32_t bounded_lemire_uint32(Pcg64& g, uint32_t rng) {
  const uint32_t excl = rng + 1;
  uint64_t m = uint64_t{g.next32()} * excl;
  if (static_cast<uint32_t>(m) < excl) {
    const uint32_t threshold = (UINT32_MAX - rng) % excl;
    while (static_cast<uint32_t>(m) < threshold) m = uint64_t{g.next32()} * excl;
  }
  return static_cast<uint32_t>(m >> 32);
}

}  // namespace

std::vector<int64_t> numpy_integers(uint64_t seed, int64_t low, int64_t high, int64_t n) {
  check(low < high, "numpy_integers: empty range [", low, ", ", high, ")");
  check(n >= 0, "numpy_integers: negative count ", n);
  Pcg64 g(seed);
  // random_bounded_uint64_fill: the range picks the 32- or 64-bit path
  const uint64_t rng = static_cast<uint64_t>(high) - 1 - static_cast<uint64_t>(low);
  std::vector<int64_t> out(n);
  for (auto& v : out) {
    uint64_t r;
    if (rng == 0) r = 0;
    else if (rng < UINT32_MAX) r = bounded_lemire_uint32(g, static_cast<uint32_t>(rng));
    else if (rng == UINT32_MAX) r = g.next32();
    else r = bounded_lemire_uint64(g, rng);
    v = static_cast<int64_t>(static_cast<uint64_t>(low) + r);
  }
  return out;
}

}  // namespace deepinfer::model
