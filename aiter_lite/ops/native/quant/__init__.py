"""fp8 / int8 activation quantization in plain PyTorch (fp32 math), alone and fused with a
norm or a gated activation: the reference of ``aiter_lite.ops.triton.quant``, module for
module, and the "native" backend."""

from aiter_lite.ops.native.quant.act_quant import *  # noqa: F401,F403
from aiter_lite.ops.native.quant.fused_fp8_quant import *  # noqa: F401,F403
from aiter_lite.ops.native.quant.norm_quant import *  # noqa: F401,F403
from aiter_lite.ops.native.quant.quant import *  # noqa: F401,F403
from aiter_lite.ops.native.quant.mx_quant import *  # noqa: F401,F403
