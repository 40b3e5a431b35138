// The hand-written CPU kernel behind cached attention (float32 queries and arithmetic; keys and
// values stored as float32 or bfloat16), on plain pointers (no libtorch, so it compiles fast and
// can be built for several instruction sets at once). Never allocates per call beyond a reusable
// scratch vector; never decides what to attend to (AttentionBatch does).
#pragma once

#include <cstdint>
#include <vector>

namespace ajet::infer {

// Consecutive tokens of one sequence in a step's flat batch.
struct AttentionSegment {
  int64_t token_begin = 0;  // first row in the flat batch
  int64_t num_tokens = 0;
  int64_t start_pos = 0;    // position of the first token; token i sits at start_pos + i
  int64_t table_begin = 0;  // its block table: block_tables[table_begin, + table_size)
  int64_t table_size = 0;
};

// Up to kTileTokens consecutive tokens of one segment: the kernel's unit of work (with one kv
// head). Queries of a tile share every key and value they load, so prefill reads the cache once per
// tile instead of once per token.
inline constexpr int64_t kTileTokens = 8;
struct AttentionTile {
  int32_t segment = 0;
  int32_t first_token = 0;  // row in the flat batch
  int32_t num_tokens = 0;
};

// How the cache stores keys and values. bfloat16 elements are their 16 bits (the top half of the
// float32); the kernel widens them exactly, so it computes what float32 keys holding the same
// values would give.
enum class KvElementType { kFloat32, kBFloat16 };

struct CpuAttentionArgs {
  const float* q;    // (N, H, D)
  float* out;        // (N, H, D)
  const void* keys;  // (num_blocks, Hkv, block_size, D) of one layer, elements of kv_type (written
                     // to as well when new_keys is set)
  const void* values;  // (num_blocks, Hkv, block_size, D)
  KvElementType kv_type;
  int64_t heads, kv_heads, head_dim, block_size;
  float scale;  // 1 / sqrt(D)
  const AttentionSegment* segments;
  const int32_t* block_tables;
  const AttentionTile* tiles;
  int64_t num_tiles;
  // Set when every tile is a whole segment (decode steps, chunks of up to kTileTokens): the batch's
  // new keys and values, (N, Hkv, D) float32, which each item writes into the cache (its tile's
  // rows of its kv head, converted to kv_type as KvCache::write does) just before it reads them. No
  // other item reads those rows. Null: they are in the cache already.
  const float* new_keys = nullptr;
  const float* new_values = nullptr;
};

// Computes work items [begin, end) of num_tiles * Hkv: one tile of tokens with one kv head,
// covering the H / Hkv query heads of each token that read it. Each token attends to positions [0,
// its position]. Items are ordered so that any contiguous range mixes short and long contexts (a
// causal prefill's cost grows with position), which keeps an even split between threads balanced.
struct AttentionScratch {
  std::vector<float> scores;         // (rows, len) of the current item
  std::vector<int64_t> offsets;      // (len) element offset of each position's key (and value) row
  std::vector<const float*> q_rows;  // (rows) each query row of the current item
};
// `then`: the item this thread computes after the range (its first keys are prefetched during the
// last item), or -1.
void attend_cpu_f32(const CpuAttentionArgs& args, int64_t begin, int64_t end,
                    AttentionScratch& scratch, int64_t then = -1);

}  // namespace ajet::infer
