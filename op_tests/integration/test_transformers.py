"""Hugging Face models patched by ``aiter_lite.transformers`` against the same models
unpatched: forward logits, greedy ``generate`` (left padding included) and the gradient of
every parameter after ``loss.backward()``, in fp32 (tight) and bf16 (within Hugging Face's
own bf16 error against its fp32 model), for every supported family, on the Triton backend
(the interpreter on the CPU). Tiny random models from configs (no download); the GPU run
uses real head dims and wider layers."""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the Hugging Face integration tests need transformers "
                                                          "(pip install -e '.[hf]')")

import aiter_lite.transformers as alt  # noqa: E402
from aiter_lite.ops.triton import activation as t_act  # noqa: E402
from aiter_lite.ops.triton import cross_entropy as t_ce  # noqa: E402
from aiter_lite.ops.triton.normalization import rmsnorm as t_rms  # noqa: E402
from aiter_lite.ops.triton.rope import rope as t_rope  # noqa: E402
from op_tests.utils import DEVICE, ON_GPU  # noqa: E402

# (hidden, intermediate, heads, kv heads, head dim, vocab)
WIDTH = (256, 704, 4, 2, 64, 512) if ON_GPU else (64, 96, 4, 2, 16, 128)


def _config(family: str):
    hidden, inter, heads, kv, head_dim, vocab = WIDTH
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=2,
                  num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim, max_position_embeddings=128,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    c = transformers
    if family == "llama":
        return c.LlamaConfig(**common), c.LlamaForCausalLM
    if family == "mistral":
        return c.MistralConfig(**common, sliding_window=None), c.MistralForCausalLM
    if family == "qwen2":
        return c.Qwen2Config(**common), c.Qwen2ForCausalLM
    if family == "qwen3":
        return c.Qwen3Config(**common), c.Qwen3ForCausalLM
    if family == "gemma":
        return c.GemmaConfig(**common, hidden_act="gelu_pytorch_tanh"), c.GemmaForCausalLM
    if family == "gemma2":
        return c.Gemma2Config(**common, query_pre_attn_scalar=head_dim, sliding_window=64), c.Gemma2ForCausalLM
    if family == "gemma3":
        return c.Gemma3TextConfig(**common, query_pre_attn_scalar=head_dim, sliding_window=64), c.Gemma3ForCausalLM
    raise AssertionError(family)


FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3"]
# norms per decoder layer (+1 final); Qwen3 and Gemma3 add per-head q / k norms, Gemma2 / 3 a
# pre- and post-feedforward pair
NORMS = {"llama": 2, "mistral": 2, "qwen2": 2, "qwen3": 4, "gemma": 2, "gemma2": 4, "gemma3": 6}


def _models(family: str, dtype: torch.dtype, **patch):
    """(unpatched, patched) copies of one random model, eager attention, eval mode."""
    torch.manual_seed(0)
    config, cls = _config(family)
    config._attn_implementation = "eager"
    model = cls(config).to(device=DEVICE, dtype=dtype).eval()
    for p in model.parameters():  # Gemma's norm weights start at 0, Llama's at 1: random weights test both
        if p.dim() == 1:
            p.data.add_(torch.randn_like(p) * 0.1)
    patched = copy.deepcopy(model)
    report = alt.apply_aiter_lite(patched, backend="triton", **patch)
    return model, patched, report


@pytest.fixture
def calls(monkeypatch):
    """How often the patched model reached each aiter_lite Triton op."""
    counts = {"rms_norm": 0, "act_mul": 0, "rope": 0}

    def counting(module, name, key):
        fn = getattr(module, name)

        def wrapper(*args, **kwargs):
            counts[key] += 1
            return fn(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counting(t_rms, "rms_norm", "rms_norm")
    counting(t_act, "act_mul", "act_mul")
    counting(t_rope, "rope_cached_thd_positions_2c_fwd", "rope")
    return counts


def _batch(seq: int = 11, batch: int = 2):
    vocab = WIDTH[-1]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab, (batch, seq), generator=g).to(DEVICE)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding in the second sequence
    ids[1, :3] = 0
    return ids, mask


def _loss_and_grads(model, ids, mask):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, attention_mask=mask, labels=ids)
    out.loss.backward()
    return out.logits.detach().float(), {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / (b.norm() + 1e-12)).item()


@pytest.mark.parametrize("family", FAMILIES)
def test_patched_fp32_matches_unpatched(family, calls):
    """fp32: logits and every parameter's gradient equal the unpatched model's (one
    rounding of fp32 math apart), through every patched module."""
    model, patched, report = _models(family, torch.float32)
    layers = model.config.num_hidden_layers
    assert len(report.rms_norm) == NORMS[family] * layers + 1, report
    assert len(report.mlp) == layers and len(report.rope) == layers, report
    assert not report.skipped, report
    ids, mask = _batch()
    logits, grads = _loss_and_grads(model, ids, mask)
    assert calls == {"rms_norm": 0, "act_mul": 0, "rope": 0}  # the unpatched copy never reaches aiter_lite
    p_logits, p_grads = _loss_and_grads(patched, ids, mask)
    assert calls["rms_norm"] == len(report.rms_norm) and calls["act_mul"] == layers and calls["rope"] == layers
    assert (p_logits - logits).abs().max() <= 1e-4 * logits.abs().max()
    assert set(p_grads) == set(grads) == {n for n, _ in model.named_parameters()}
    for name, g in grads.items():
        assert _rel(p_grads[name], g) < 2e-4, f"{family} {name}: gradient rel. error {_rel(p_grads[name], g):.2e}"


@pytest.mark.parametrize("family", FAMILIES)
def test_patched_bf16_within_hf_noise(family):
    """bf16: the patched model is as close to the fp32 model as Hugging Face's own bf16
    model is (logits and every gradient; aiter_lite rounds once where HF rounds at each op)."""
    ref, _, _ = _models(family, torch.float32)
    model, patched, _ = _models(family, torch.bfloat16)
    ids, mask = _batch()
    logits, grads = _loss_and_grads(ref, ids, mask)
    hf_logits, hf_grads = _loss_and_grads(model, ids, mask)
    p_logits, p_grads = _loss_and_grads(patched, ids, mask)
    hf_err, our_err = _rel(hf_logits, logits), _rel(p_logits, logits)
    assert our_err <= 1.5 * hf_err + 1e-3, f"{family} logits: patched {our_err:.2e}, HF bf16 {hf_err:.2e}"
    for name, g in grads.items():
        hf_err, our_err = _rel(hf_grads[name], g), _rel(p_grads[name], g)
        assert our_err <= 1.5 * hf_err + 1e-2, f"{family} {name}: patched {our_err:.2e}, HF bf16 {hf_err:.2e}"


@pytest.mark.parametrize("family, dtype", [(f, torch.float32) for f in FAMILIES] + [
    (f, torch.bfloat16) for f in ("llama", "qwen3", "gemma2")], ids=str)
def test_training_loss_by_fused_linear_cross_entropy(family, dtype, monkeypatch):
    """Training mode with labels: the loss by fused_linear_cross_entropy from the hidden
    states (no logits returned; Gemma 2 / 3 softcapped), the loss and every gradient as the
    unpatched model's (fp32: tight; bf16: within HF's own bf16 error against fp32)."""
    calls = []
    flce = t_ce.fused_linear_cross_entropy
    monkeypatch.setattr(t_ce, "fused_linear_cross_entropy", lambda *a, **k: calls.append(1) or flce(*a, **k))
    ref, _, _ = _models(family, torch.float32)
    model, patched, report = _models(family, dtype)
    assert report.loss == [type(patched).__name__], report
    for m in (ref, model, patched):
        m.train()
    ids, mask = _batch()
    labels = ids.masked_fill(mask == 0, -100)
    outs = {}
    for key, m in (("ref", ref), ("hf", model), ("ours", patched)):
        m.zero_grad(set_to_none=True)
        out = m(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        outs[key] = out.loss.detach().float(), out.logits, {n: p.grad.float() for n, p in m.named_parameters()}
    assert len(calls) == 1 and outs["ours"][1] is None and outs["hf"][1] is not None
    (loss, _, grads), (hf_loss, _, hf_grads), (our_loss, _, our_grads) = outs["ref"], outs["hf"], outs["ours"]
    for name, g in grads.items():
        if dtype == torch.float32:
            err = _rel(our_grads[name], g)
            assert err < 2e-4, f"{family} {name}: gradient rel. error {err:.2e}"
        else:
            hf_err, our_err = _rel(hf_grads[name], g), _rel(our_grads[name], g)
            assert our_err <= 1.5 * hf_err + 1e-2, f"{family} {name}: patched {our_err:.2e}, HF bf16 {hf_err:.2e}"
    tol = 1e-5 if dtype == torch.float32 else 1.5 * (hf_loss - loss).abs().item() + 1e-2
    assert (our_loss - loss).abs().item() <= tol * max(1.0, loss.abs().item()), (family, our_loss, loss)


def test_training_loss_takes_hf_loss_arguments():
    """num_items_in_batch (a sum over that many targets), shift_labels, ignore_index and
    positional arguments, as Hugging Face's forward takes them; eval mode and
    fused_linear_cross_entropy=False keep the model's own loss (and logits)."""
    only_loss = dict(rope=False, rms_norm=False, swiglu=False)  # the loss alone on the interpreter
    model, patched, _ = _models("llama", torch.float32, **only_loss)
    _, plain, report = _models("llama", torch.float32, fused_linear_cross_entropy=False, **only_loss)
    assert report.loss == []
    for m in (model, patched, plain):
        m.train()
    ids, mask = _batch()
    shift = torch.roll(ids, -1, 1)
    shift[:, -1] = 7
    for kwargs in (dict(num_items_in_batch=torch.tensor(9, device=DEVICE)), dict(shift_labels=shift),
                   dict(ignore_index=5, num_items_in_batch=4)):
        want = model(input_ids=ids, labels=ids, **kwargs).loss
        got = patched(input_ids=ids, labels=ids, **kwargs)
        assert got.logits is None and torch.allclose(got.loss, want, rtol=1e-5, atol=1e-6), kwargs
    assert torch.allclose(patched(ids, mask, labels=ids).loss, model(ids, mask, labels=ids).loss, rtol=1e-5)
    assert plain(input_ids=ids, labels=ids).logits is not None
    patched.eval()
    out = patched(input_ids=ids, labels=ids)
    want = model.eval()(input_ids=ids, labels=ids).loss
    assert out.logits is not None and torch.allclose(out.loss, want, rtol=1e-5)


def test_training_loss_with_tied_embeddings():
    """A head that shares the embedding's weight: its gradient from the fused loss and the
    embedding's add up in the one parameter, as unpatched."""
    torch.manual_seed(0)
    config, cls = _config("llama")
    config.tie_word_embeddings = True
    model = cls(config).to(DEVICE).train()
    patched = copy.deepcopy(model)
    assert patched.lm_head.weight is patched.model.embed_tokens.weight
    alt.apply_aiter_lite(patched, backend="triton", rope=False, rms_norm=False, swiglu=False)
    ids, mask = _batch()
    grads = []
    for m in (model, patched):
        m(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
        grads.append({n: p.grad for n, p in m.named_parameters()})
    for name, g in grads[0].items():
        assert _rel(grads[1][name], g) < 2e-4, name


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma"])
def test_greedy_generate_identical(family):
    """Greedy decoding with a KV cache and a left-padded batch: the same tokens."""
    model, patched, _ = _models(family, torch.float32)
    ids, mask = _batch(seq=7)
    kw = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = model.generate(ids, **kw)
        got = patched.generate(ids, **kw)
    assert torch.equal(got, want)


def test_casting_mode_llama_rounds_as_hf():
    """casting_mode="llama": the norms round twice, as Hugging Face's Llama norm: its bf16
    output equals HF's (on the interpreter, which truncates to bf16 at each of the two
    roundings, within 2 ulp)."""
    model, patched, report = _models("llama", torch.bfloat16, casting_mode="llama")
    x = torch.randn(3, 5, WIDTH[0], device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad():
        hf = model.model.norm(x)
        ours = patched.model.norm(x)
    assert patched.model.norm._aiter_lite.casting_mode == "llama"
    diff = (ours.float() - hf.float()).abs()
    if ON_GPU:
        assert torch.equal(ours, hf)
    else:
        assert (diff <= hf.float().abs() * 2**-6 + 1e-30).all()


def test_casting_mode_hf_picks_each_norms_own():
    _, patched, _ = _models("gemma", torch.float32, casting_mode="hf")
    assert patched.model.norm._aiter_lite.casting_mode == "gemma"
    assert patched.model.norm._aiter_lite.offset == 1.0
    _, patched, _ = _models("qwen3", torch.float32, casting_mode="hf")
    assert patched.model.layers[0].self_attn.q_norm._aiter_lite.casting_mode == "llama"


def test_patch_is_per_instance_and_keeps_the_state_dict():
    model, patched, _ = _models("llama", torch.float32)
    assert not any(hasattr(m, "_aiter_lite") for m in model.modules())
    assert list(patched.state_dict()) == list(model.state_dict())
    assert [id(p) for p in patched.parameters()] == [id(p) for p in patched.parameters()]
    # the classes and the modeling module's globals are untouched
    cls = type(patched.model.layers[0].self_attn)
    assert "forward" not in vars(patched.model.norm) or type(patched.model.norm).forward is not patched.model.norm.forward
    mod = __import__(cls.__module__, fromlist=["apply_rotary_pos_emb"])
    assert mod.apply_rotary_pos_emb.__module__ == cls.__module__
    # patching again changes nothing; a deep copy of a patched model stays patched
    again = alt.apply_aiter_lite(patched, backend="triton")
    assert not again.rms_norm and not again.mlp and not again.rope
    twin = copy.deepcopy(patched)
    assert twin.model.norm.forward.__self__ is twin.model.norm


def test_family_functions_check_the_model_type():
    model, _, _ = _models("qwen2", torch.float32)
    with pytest.raises(ValueError, match=r"^apply_aiter_lite_to_llama: model must be a llama model"):
        alt.apply_aiter_lite_to_llama(model)
    assert alt.apply_aiter_lite_to_qwen2(model, backend="native").rms_norm
    with pytest.raises(ValueError, match=r"^apply_aiter_lite: casting_mode must be one of"):
        alt.apply_aiter_lite(model, casting_mode="fp16")
    with pytest.raises(TypeError, match=r"^apply_aiter_lite: model must be a torch.nn.Module"):
        alt.apply_aiter_lite("llama")


def test_modules_with_another_formula_are_left_alone():
    """A norm, an MLP or a rotary function computing something else is not patched, and the
    report says why."""

    class OddRMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.rand(8) + 0.5)
            self.variance_epsilon = 1e-6

        def forward(self, x):  # mean |x|, not the root mean square
            return x / (x.abs().mean(-1, keepdim=True) + self.variance_epsilon) * self.weight

    class ReluMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = torch.nn.Linear(8, 12), torch.nn.Linear(8, 12)
            self.down_proj, self.act_fn = torch.nn.Linear(12, 8), torch.nn.Softplus()

        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    model = torch.nn.Sequential(OddRMSNorm(), ReluMLP()).to(DEVICE)
    report = alt.apply_aiter_lite(model, backend="native")
    assert not report.rms_norm and not report.mlp
    assert "neither" in report.skipped["0"] and "Softplus" in report.skipped["1"]
    assert not hasattr(model[0], "_aiter_lite")
