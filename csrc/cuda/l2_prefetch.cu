// L2Prefetch of a quantized matrix (ops.h).
#include "ops.h"

namespace monorail {

L2Prefetch l2_prefetch_of(const QMatrix& W, int line) {
  L2Prefetch f;
  if (line <= 0 || !W.codes) return f;
  f.line = line;
  f.ptr[0] = W.codes;
  f.bytes[0] = qmatrix_code_bytes(W.rows, W.cols, W.q.bits);
  f.ptr[1] = W.high;
  f.bytes[1] = W.high ? qmatrix_high_bytes(W.rows, W.cols, W.q.bits) : 0;
  f.ptr[2] = W.scales;
  f.bytes[2] = qmatrix_scale_bytes(W.rows, W.cols, W.q.group);
  return f;
}

}  // namespace monorail
