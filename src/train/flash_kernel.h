// The training attention's CPU kernel (FlashAttention's algorithm): one query block of one kv head
// against its keys, a key tile at a time, with an online softmax in the forward pass and the
// probabilities recomputed from the row log-sum-exp in the backward pass. No (rows, keys) matrix
// wider than one tile ever exists, so memory is linear in the keys. Plain pointers, no libtorch:
// the caller (packed_forward.cc) lays out the blocks, splits them over threads and owns every
// buffer. Tile products go through the process's BLAS (cblas_sgemm / cblas_dgemm, looked up at run
// time); without one, flash_available() is false and the caller keeps its tensor-op path.
#pragma once

#include <cstdint>

namespace ajet::train {

// One work item. Query rows are the block's rows for each of the kv head's `rep` query heads,
// stacked: row r * tq + i is query head r, block row i. q already carries the 1/sqrt(D) scale.
template <typename T>
struct FlashTile {
  int64_t rep = 1, tq = 0, d = 0;  // rows = rep * tq
  const T* q = nullptr;            // (rows, d)
  int64_t keys = 0;                // K
  const T* k = nullptr;            // (K, d)
  const T* v = nullptr;            // (K, d)
  int64_t full_keys = 0;           // the first full_keys keys are visible to every row
  const float* bias = nullptr;     // (tq, K - full_keys): 0 or -inf, the mask of the other keys
};

// Keys per tile: 256 keys of up to 2 x 128 rows keep a score tile within L2.
inline constexpr int64_t kFlashKeyTile = 256;

// Whether a BLAS with cblas_sgemm and cblas_dgemm is loaded in this process.
bool flash_available();

// Scratch a work item needs, in elements of T: flash_forward and flash_backward take a buffer this
// big.
int64_t flash_scratch(int64_t rows, int64_t d);

// o (rows, d) = softmax(q k^T + mask) v; lse (rows,) = the rows' log-sum-exp (for the backward
// pass).
template <typename T>
void flash_forward(const FlashTile<T>& t, T* o, T* lse, T* scratch);

// Given dout (rows, d), delta (rows,) = rowsum(dout * o) and lse: dq (rows, d) = the query gradient
// (overwritten); dk, dv (K, d) += the key and value gradients of this item.
template <typename T>
void flash_backward(const FlashTile<T>& t, const T* dout, const T* delta, const T* lse, T* dq,
                    T* dk, T* dv, T* scratch);

}  // namespace ajet::train
