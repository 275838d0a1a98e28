// backend/registry/verify_backend.h — `--verify cpu`: every op runs on the chosen backend and on a
// reference backend (the CPU), and every output is compared bit for bit as soon as the op has run.
//
// What it is for: a kernel (or a fused path, or a graph) that breaks the bits shows up as the first op
// whose output differs, with its place in the step, instead of as logits that differ somewhere after
// 43 layers. The backend contract (backend.h) says every backend gives the same bits, so any
// difference is a bug (NaNs compare equal to NaNs: their payload is not part of the contract).
//
// How: the wrapper owns both backends. Every allocation, weight and upload is made on both; tensors
// the forward pass holds are the primary's, and each op's tensors are translated to the reference's
// by their offset in the allocation they belong to. After each op the outputs (the tensors the op
// writes, backend.h) are downloaded from both and compared; the first difference is kept and
// end_step() returns it as an error naming the step, the op's index and name, the block (the count of
// hc_pre / hc_pre_norm calls so far in the step: DS4's attention and FFN halves, two per layer), the output and the
// first differing element. Slow (one synchronisation per op): a debugging tool.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace dsv4::backend {

// A backend that runs `primary` and checks every op against `reference`.
std::unique_ptr<Backend> make_verifying_backend(std::unique_ptr<Backend> primary, std::unique_ptr<Backend> reference);

}  // namespace dsv4::backend
