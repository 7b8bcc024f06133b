"""Raw @triton.jit kernels. Call them through aiter_lite.ops.triton, never directly."""
