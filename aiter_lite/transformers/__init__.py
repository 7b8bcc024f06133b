"""Hugging Face models on aiter_lite's kernels: one call patches a loaded model in place.

    from transformers import AutoModelForCausalLM
    from aiter_lite.transformers import apply_aiter_lite

    model = AutoModelForCausalLM.from_pretrained(...)
    report = apply_aiter_lite(model)            # or apply_aiter_lite_to_llama(model), ...
    print(report)                               # what was patched, what was left and why

What is patched, per module instance (the model given, never the classes or module
globals other models of the process share; Liger-Kernel's ``apply_liger_kernel_to_*``
is the model, patching per instance throughout):

* every RMSNorm (the decoder norms, the final norm, Qwen3's / Gemma3's per-head q / k
  norms): ``rms_norm`` with the module's own ``weight`` and eps; Gemma's ``1 + weight``
  as ``weight_offset=1``;
* every gated MLP (``down_proj(act_fn(gate_proj(x)) * up_proj(x))``): ``act_mul`` of
  the two projections, SiLU or GELU (exact or tanh) as the module's ``act_fn`` computes;
  ``gate_proj`` / ``up_proj`` stay two ``nn.Linear`` (no merged weight: state dicts and
  optimizers see the model's own parameters);
* the rotary embedding: each attention module gets its own copy of its ``forward`` that
  calls aiter_lite's rotation (Q and K in one launch, ``rope_cached_thd_positions_2c_fwd``)
  with the ``(cos, sin)`` position embeddings the model computes, whatever batch and
  position layout ``generate`` produces (left padding, a cache, one shared batch row);
* the loss (``fused_linear_cross_entropy=True``): a ``*ForCausalLM`` model in training mode
  given ``labels`` computes its loss by ``fused_linear_cross_entropy`` from the last hidden
  states and ``lm_head``'s weight, as Hugging Face's causal-LM loss does (labels shifted,
  or its ``shift_labels``; ``ignore_index``; mean over the targets, or the sum over
  ``num_items_in_batch``; Gemma 2 / 3's final logit softcapping): the ``(tokens, vocab)``
  logits are never held, and the output's ``logits`` is None (as Liger's). In eval mode,
  without labels, or for a call it does not take (``logits_to_keep``, ``return_dict=False``,
  an head of another dtype than the hidden states) the model runs its own code.

A module is patched only where its own forward computes what the replacement computes:
each one is checked once, on random values, against the replacement's fp32 reference
(``aiter_lite.ops.native``), and left alone, with the reason in the report, where it
does not (a norm with another formula, an activation with no kernel, a rotary function
with partial or interleaved channels). A call the replacement does not take (a weight
of another dtype than the input, tables that require grad, an unexpected layout) runs
the module's own code.

Every patched forward is differentiable: training a patched model gives the same
gradients as the unpatched one, within each dtype's rounding.

Rounding (``casting_mode``): aiter_lite computes in fp32 and rounds once ("gemma", the
default: Gemma's own norm). Hugging Face's Llama norm (Llama, Mistral, Qwen2, Qwen3, ...)
rounds twice: the normalized value to the input's dtype, then its product with the
weight. ``casting_mode="llama"`` reproduces that for the bit-compatibility some users need
(as Liger's ``casting_mode``); ``casting_mode="hf"`` picks each norm's own: "llama" for the
Llama-style norms, "gemma" for Gemma's. In fp32 the modes agree.

``backend``: "triton" or "native" (the plain-PyTorch references); default each family's
(AITER_NORMALIZATION_BACKEND, AITER_ACTIVATION_BACKEND, AITER_ROPE_BACKEND,
AITER_CROSS_ENTROPY_BACKEND, else AITER_BACKEND: Triton where a GPU is present).

``transformers`` is an optional dependency (``pip install -e ".[hf]"``); this module
imports nothing from it.
"""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass, field

import torch
from torch import nn

from aiter_lite import envs
from aiter_lite.ops.native import activation as native_activation
from aiter_lite.ops.native import cross_entropy as native_ce
from aiter_lite.ops.native.normalization import rmsnorm as native_rms
from aiter_lite.ops.native.rope import rope as native_rope
from aiter_lite.ops.triton import activation as triton_activation
from aiter_lite.ops.triton import cross_entropy as triton_ce
from aiter_lite.ops.triton.normalization import rmsnorm as triton_rms
from aiter_lite.ops.triton.rope import rope as triton_rope
from aiter_lite.spec.rope import RotateStyle
from aiter_lite.utils.checks import check_bool, check_choice

__all__ = ["apply_aiter_lite", "PatchReport", "FAMILIES", "CASTING_MODES"] + [
    f"apply_aiter_lite_to_{f}" for f in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3",
                                         "olmo2")]

CASTING_MODES = ("gemma", "llama", "hf")
# Hugging Face model_type -> the family function's name; every family takes the same patches
FAMILIES = {
    "llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3", "gemma": "gemma",
    "gemma2": "gemma2", "gemma3": "gemma3", "gemma3_text": "gemma3", "phi3": "phi3", "olmo2": "olmo2",
}
_OP = "apply_aiter_lite"
_ROPE_GLOBAL = "apply_rotary_pos_emb"
_ACTIVATIONS = ("silu", "gelu", "gelu_tanh")


@dataclass
class PatchReport:
    """What :func:`apply_aiter_lite` did: the patched modules' names per kind, and the
    modules it left alone with the reason."""

    rms_norm: list[str] = field(default_factory=list)
    mlp: list[str] = field(default_factory=list)
    rope: list[str] = field(default_factory=list)
    loss: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"aiter_lite patched {len(self.rms_norm)} RMSNorm, {len(self.mlp)} gated MLP, "
                 f"{len(self.rope)} attention (rotary) and {len(self.loss)} causal-LM loss modules"]
        lines += [f"  left alone: {name}: {why}" for name, why in self.skipped.items()]
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# the patched forwards (bound to one instance each; the module's class is untouched)


@dataclass(frozen=True)
class _NormPatch:
    offset: float  # 1.0: Gemma's (1 + weight)
    eps_attr: str  # "variance_epsilon" (Llama) or "eps" (Gemma)
    casting_mode: str
    backend: str


def _rms_norm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    p: _NormPatch = self._aiter_lite
    w = self.weight
    if not isinstance(hidden_states, torch.Tensor) or w.dtype != hidden_states.dtype:
        # Llama's norm promotes an input of another dtype to the weight's: the module's own code
        return type(self).forward(self, hidden_states)
    ops = triton_rms if p.backend == "triton" else native_rms
    return ops.rms_norm(hidden_states, w, getattr(self, p.eps_attr), p.offset, casting_mode=p.casting_mode)


@dataclass(frozen=True)
class _MlpPatch:
    activation: str
    backend: str


def _mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    p: _MlpPatch = self._aiter_lite
    ops = triton_activation if p.backend == "triton" else native_activation
    return self.down_proj(ops.act_mul(self.gate_proj(x), self.up_proj(x), p.activation))


def _rotary(original, backend: str):
    """``apply_rotary_pos_emb(q, k, cos, sin)`` on aiter_lite's kernel: q (b, h, s, d), k
    (b, kh, s, d) as Hugging Face's attention lays them out, cos / sin (b or 1, s, d) as its
    rotary embedding computes them (NeoX pairs, each channel its own table entry). Any other
    call goes to ``original``."""
    ops = triton_rope if backend == "triton" else native_rope

    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        if args or kwargs.get("unsqueeze_dim", 1) != 1 or len(kwargs) > ("unsqueeze_dim" in kwargs) \
                or not _rotary_fits(q, k, cos, sin):
            return original(q, k, cos, sin, *args, **kwargs)
        b, h, s, d = q.shape
        kh = k.shape[1]
        if cos.shape[0] == b:  # a table row per token (batch-major, as q's tokens)
            positions = torch.arange(b * s, device=q.device)
        else:  # one batch row of tables shared by every sequence
            positions = torch.arange(s, device=q.device).repeat(b)
        qo, ko = ops.rope_cached_thd_positions_2c_fwd(
            q.transpose(1, 2).reshape(b * s, h, d), k.transpose(1, 2).reshape(b * s, kh, d),
            cos.reshape(-1, d), sin.reshape(-1, d), positions, int(RotateStyle.NEOX), False, False)
        return qo.view(b, s, h, d).transpose(1, 2), ko.view(b, s, kh, d).transpose(1, 2)

    return apply_rotary_pos_emb


def _rotary_fits(q, k, cos, sin) -> bool:
    if not all(isinstance(t, torch.Tensor) for t in (q, k, cos, sin)):
        return False
    if q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or sin.shape != cos.shape:
        return False
    b, _, s, d = q.shape
    if k.shape[0] != b or k.shape[2] != s or k.shape[3] != d or cos.shape[1:] != (s, d) or cos.shape[0] not in (1, b):
        return False
    if k.dtype != q.dtype or not q.is_floating_point() or q.numel() == 0 or k.numel() == 0:
        return False
    if len({q.device, k.device, cos.device, sin.device}) != 1 or cos.dtype != sin.dtype:
        return False
    # tables with a gradient of their own: the module's code differentiates them
    return not (torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad))


@dataclass(frozen=True)
class _LossPatch:
    softcap: float | None  # Gemma 2 / 3's final logit softcapping
    backend: str


def _causal_lm_forward(self, *args, **kwargs):
    """The causal-LM forward with its loss by ``fused_linear_cross_entropy`` (training mode,
    labels given); every other call runs the class's own forward."""
    forward = type(self).forward
    if args:  # positional arguments: by the forward's own names
        bound = inspect.signature(forward).bind(self, *args, **kwargs)
        extra = bound.arguments.pop("kwargs", {})
        bound.arguments.pop("self", None)
        kwargs = {**bound.arguments, **extra}
    if not self.training or kwargs.get("labels") is None or kwargs.get("return_dict") is False \
            or not _keeps_every_position(kwargs.get("logits_to_keep", 0)):
        return forward(self, **kwargs)
    p: _LossPatch = self._aiter_lite
    labels = kwargs.pop("labels")
    kwargs.pop("logits_to_keep", None)
    outputs = self.model(**kwargs)
    hidden = outputs.last_hidden_state
    head = self.lm_head
    if hidden.dtype != head.weight.dtype:  # (autocast) the model's own head and loss
        logits = head(hidden)
        if p.softcap is not None:
            logits = torch.tanh(logits / p.softcap) * p.softcap
        loss = self.loss_function(logits, labels, self.config.vocab_size, **kwargs)
    else:
        logits = None
        loss = _causal_lm_loss(hidden, head, labels, p, **kwargs)
    from transformers.modeling_outputs import CausalLMOutputWithPast

    rest = {k: v for k, v in outputs.items() if k != "last_hidden_state"}
    return CausalLMOutputWithPast(loss=loss, logits=logits, **rest)


def _keeps_every_position(logits_to_keep) -> bool:
    return isinstance(logits_to_keep, int) and not isinstance(logits_to_keep, bool) and logits_to_keep == 0


def _causal_lm_loss(hidden, head, labels, p: _LossPatch, num_items_in_batch=None, ignore_index: int = -100,
                    shift_labels=None, **_):
    """Hugging Face's ``ForCausalLMLoss`` of ``head(hidden)``, without the logits."""
    if shift_labels is None:  # tokens < n predict n
        shift_labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    ops = triton_ce if p.backend == "triton" else native_ce
    reduction = "mean" if num_items_in_batch is None else "sum"
    loss = ops.fused_linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), head.weight,
                                          shift_labels.reshape(-1).to(hidden.device), head.bias, ignore_index,
                                          reduction, 0.0, p.softcap)
    if num_items_in_batch is not None:
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        loss = loss / num_items_in_batch
    return loss


# ---------------------------------------------------------------------------
# which modules compute what the replacements compute: checked on random values


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    tol = 1e-4 if want.dtype == torch.float32 and got.dtype == torch.float32 else 3e-2
    got, want = got.float(), want.float()
    scale = want.abs().max().item() + 1e-6
    return got.shape == want.shape and bool(((got - want).abs().max() <= tol * scale).item())


def _probe(module: nn.Module, *shape: int) -> torch.Tensor:
    p = next(module.parameters())
    g = torch.Generator(device="cpu").manual_seed(0)
    return torch.randn(*shape, generator=g).to(device=p.device, dtype=torch.float32)


def _as_norm(module: nn.Module, casting_mode: str, backend: str) -> _NormPatch | str:
    """The norm patch for ``module``, or why it has none."""
    w = getattr(module, "weight", None)
    if not isinstance(w, torch.Tensor) or w.dim() != 1:
        return "no 1-D weight"
    eps_attr = next((a for a in ("variance_epsilon", "eps") if isinstance(getattr(module, a, None), float)), None)
    if eps_attr is None:
        return "no float variance_epsilon / eps"
    if w.device.type == "meta":
        return "weights on the meta device (patch after loading)"
    x = _probe(module, 3, w.shape[0])
    eps = getattr(module, eps_attr)
    with torch.no_grad():
        want = type(module).forward(module, x.to(w.dtype))
        for offset, style in ((0.0, "llama"), (1.0, "gemma")):
            got = native_rms.rms_norm(x.to(w.dtype), w, eps, offset, casting_mode="gemma")
            if _close(got, want):
                mode = style if casting_mode == "hf" else casting_mode
                return _NormPatch(offset, eps_attr, mode, backend)
    return "its forward is neither x * rsqrt(mean(x^2) + eps) * weight nor Gemma's * (1 + weight)"


def _as_mlp(module: nn.Module, backend: str) -> _MlpPatch | str:
    """The gated-MLP patch for ``module``, or why it has none."""
    parts = [getattr(module, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
    if not all(isinstance(p, nn.Module) for p in parts) or not callable(getattr(module, "act_fn", None)):
        return "not gate_proj / up_proj / down_proj / act_fn"
    if any(p.device.type == "meta" for p in module.parameters()):
        return "weights on the meta device (patch after loading)"
    hidden = getattr(parts[0], "in_features", None)
    if hidden is None:
        return "gate_proj has no in_features"
    dtype = next(module.parameters()).dtype
    x = _probe(module, 2, hidden).to(dtype)
    with torch.no_grad():
        want = type(module).forward(module, x)
        gate, up = parts[0](x), parts[1](x)
        for activation in _ACTIVATIONS:
            if _close(parts[2](native_activation.act_mul(gate, up, activation)), want):
                return _MlpPatch(activation, backend)
    return f"its activation {type(module.act_fn).__name__} is none of {_ACTIVATIONS}"


def _as_loss(model: nn.Module, backend: str) -> _LossPatch | str:
    """The loss patch for a causal LM ``model``, or why it has none."""
    head, config = getattr(model, "lm_head", None), getattr(model, "config", None)
    if not isinstance(head, nn.Linear) or not isinstance(getattr(model, "model", None), nn.Module):
        return "no lm_head Linear and decoder model"
    if head.out_features != getattr(config, "vocab_size", None):
        return f"lm_head has {head.out_features} outputs for a vocab_size of {getattr(config, 'vocab_size', None)}"
    loss_function = getattr(model, "loss_function", None)
    if getattr(loss_function, "__name__", None) != "ForCausalLMLoss":
        return f"its loss is {getattr(loss_function, '__name__', loss_function)!r}, not Hugging Face's ForCausalLMLoss"
    softcap = getattr(config, "final_logit_softcapping", None)
    if softcap is not None and not (isinstance(softcap, (int, float)) and softcap > 0):
        return f"final_logit_softcapping {softcap!r}"
    return _LossPatch(None if softcap is None else float(softcap), backend)


def _rotary_function_checked(fn) -> str | None:
    """Why ``fn`` is not Hugging Face's NeoX ``apply_rotary_pos_emb`` (None: it is)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k = torch.randn(2, 3, 5, 8, generator=g), torch.randn(2, 1, 5, 8, generator=g)
    cos, sin = torch.randn(2, 5, 8, generator=g), torch.randn(2, 5, 8, generator=g)
    try:
        with torch.no_grad():
            want = fn(q, k, cos, sin)
    except Exception as e:  # noqa: BLE001  (a function of another signature: not this one)
        return f"{_ROPE_GLOBAL} takes another signature ({type(e).__name__})"
    got = _rotary(fn, "native")(q, k, cos, sin)
    if not (isinstance(want, tuple) and len(want) == 2 and all(_close(a, b) for a, b in zip(got, want))):
        return f"{_ROPE_GLOBAL} is not the NeoX rotation of the whole head"
    return None


def _wrapped_functions(fn):
    """(cell index, function) of each function ``fn``'s closure holds: what a decorator wraps."""
    for i, cell in enumerate(fn.__closure__ or ()):
        try:
            inner = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(inner, types.FunctionType):
            yield i, inner


def _with_global(fn, name: str, value):
    """``fn`` reading ``value`` for its module global ``name``: a copy of ``fn`` over a copy
    of its globals, and each decorator's wrapper around it rebuilt around the copy; ``fn``
    itself where neither it nor a function it wraps reads that global."""
    if name in fn.__code__.co_names and name in fn.__globals__:
        new_globals = dict(fn.__globals__)
        new_globals[name] = value
        return _copy_function(fn, new_globals, fn.__closure__)
    cells, changed = list(fn.__closure__ or ()), False
    for i, inner in _wrapped_functions(fn):
        new = _with_global(inner, name, value)
        if new is not inner:
            cells[i], changed = types.CellType(new), True
    return _copy_function(fn, fn.__globals__, tuple(cells)) if changed else fn


def _copy_function(fn, globals_: dict, closure):
    new = types.FunctionType(fn.__code__, globals_, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(fn.__dict__)
    new.__qualname__, new.__module__, new.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    return new


def _rope_forward(module: nn.Module, rotary, backend: str, checked: dict) -> types.FunctionType | str:
    """A copy of the attention module's forward that rotates on aiter_lite (``rotary``: the
    function it calls), or why none."""
    if id(rotary) not in checked:
        checked[id(rotary)] = _rotary_function_checked(rotary)
    if checked[id(rotary)] is not None:
        return checked[id(rotary)]
    return _with_global(type(module).forward, _ROPE_GLOBAL, _rotary(rotary, backend))


def _reads_global(fn, name: str, depth: int = 0):
    """The value of module global ``name`` that ``fn`` (or a function it wraps) reads."""
    if name in fn.__code__.co_names and name in fn.__globals__:
        return fn.__globals__[name]
    if depth < 8:
        for _, inner in _wrapped_functions(fn):
            found = _reads_global(inner, name, depth + 1)
            if found is not None:
                return found
    return None


# ---------------------------------------------------------------------------
# entry points


def apply_aiter_lite(model: nn.Module, *, rope: bool = True, rms_norm: bool = True, swiglu: bool = True,
                     fused_linear_cross_entropy: bool = True, casting_mode: str = "gemma",
                     backend: str | None = None) -> PatchReport:
    """Patch a loaded Hugging Face model in place (see the module doc); returns what was
    patched. Calling it again on the same model changes nothing already patched."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"{_OP}: model must be a torch.nn.Module, got {type(model).__name__}")
    rope, rms_norm, swiglu, flce = (check_bool(_OP, n, v) for n, v in (
        ("rope", rope), ("rms_norm", rms_norm), ("swiglu", swiglu),
        ("fused_linear_cross_entropy", fused_linear_cross_entropy)))
    casting_mode = check_choice(_OP, "casting_mode", casting_mode, CASTING_MODES)
    backends = {f: envs.layer_backend(_OP, f, backend) for f in ("normalization", "activation", "rope")}
    backends["loss"] = envs.layer_backend(_OP, "cross_entropy", backend)
    report = PatchReport()
    checked: dict[int, str | None] = {}
    for name, module in model.named_modules():
        if getattr(module, "_aiter_lite", None) is not None:
            continue
        cls = type(module).__name__
        if flce and cls.endswith("ForCausalLM"):
            _patch(module, name or cls, _as_loss(module, backends["loss"]), _causal_lm_forward, report.loss, report)
        elif rms_norm and cls.endswith("RMSNorm"):
            _patch(module, name, _as_norm(module, casting_mode, backends["normalization"]), _rms_norm_forward,
                   report.rms_norm, report)
        elif swiglu and hasattr(module, "gate_proj") and hasattr(module, "up_proj"):
            _patch(module, name, _as_mlp(module, backends["activation"]), _mlp_forward, report.mlp, report)
        elif rope and "forward" in type(module).__dict__ and \
                (rotary := _reads_global(type(module).forward, _ROPE_GLOBAL)) is not None:
            forward = _rope_forward(module, rotary, backends["rope"], checked)
            if isinstance(forward, str):
                report.skipped[name] = forward
            else:
                module._aiter_lite = "rope"
                module.forward = types.MethodType(forward, module)
                report.rope.append(name)
    return report


def _patch(module: nn.Module, name: str, patch, forward, patched: list, report: PatchReport) -> None:
    if isinstance(patch, str):
        report.skipped[name] = patch
        return
    module._aiter_lite = patch
    module.forward = types.MethodType(forward, module)
    patched.append(name)


def _family(family: str):
    types_ = sorted(t for t, f in FAMILIES.items() if f == family)

    def apply(model: nn.Module, *, rope: bool = True, rms_norm: bool = True, swiglu: bool = True,
              fused_linear_cross_entropy: bool = True, casting_mode: str = "gemma",
              backend: str | None = None) -> PatchReport:
        op = f"apply_aiter_lite_to_{family}"
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        if model_type not in types_:
            raise ValueError(f"{op}: model must be a {' / '.join(types_)} model (config.model_type), "
                             f"got {model_type!r}; apply_aiter_lite(model) takes any")
        return apply_aiter_lite(model, rope=rope, rms_norm=rms_norm, swiglu=swiglu,
                                fused_linear_cross_entropy=fused_linear_cross_entropy, casting_mode=casting_mode,
                                backend=backend)

    apply.__name__ = apply.__qualname__ = f"apply_aiter_lite_to_{family}"
    apply.__doc__ = f"""``apply_aiter_lite`` for a {' / '.join(types_)} model: the same patches; a model of another
    ``config.model_type`` raises ValueError."""
    return apply


apply_aiter_lite_to_llama = _family("llama")
apply_aiter_lite_to_mistral = _family("mistral")
apply_aiter_lite_to_qwen2 = _family("qwen2")
apply_aiter_lite_to_qwen3 = _family("qwen3")
apply_aiter_lite_to_gemma = _family("gemma")
apply_aiter_lite_to_gemma2 = _family("gemma2")
apply_aiter_lite_to_gemma3 = _family("gemma3")
apply_aiter_lite_to_phi3 = _family("phi3")
apply_aiter_lite_to_olmo2 = _family("olmo2")
