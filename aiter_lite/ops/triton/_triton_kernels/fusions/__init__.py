"""Attention-block fusions: QKV split + RoPE, RoPE + paged KV-cache write, Q/K concatenation."""
