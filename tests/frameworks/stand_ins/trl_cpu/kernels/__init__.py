"""FAKE ``kernels`` (Hugging Face's kernel hub client), for TRL's AsyncGRPOTrainer on CPU.

trl 1.16.0's tree attention (trl/experimental/async_grpo/packing.py l.160-201) fetches
FlashAttention 3 from the hub (``get_kernel("kernels-community/flash-attn3", version=1)``)
and calls its ``flash_attn_varlen_func``: a CUDA kernel, downloaded at run time, which this
machine can neither fetch nor run. This stand-in answers with the same function in plain
torch on CPU: per segment (``cu_seqlens``), causal aligned to the bottom right as
FlashAttention's varlen is when a segment has more keys than queries, grouped-query heads
shared, ``softmax_scale`` applied. Nothing else of the hub client is here.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch


def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                           max_seqlen_q: int, max_seqlen_k: int,
                           softmax_scale: float | None = None, causal: bool = True,
                           window_size: tuple[int, int] = (-1, -1), **kwargs) -> torch.Tensor:
    """``(total_q, heads, dim)`` queries against ``(total_k, kv_heads, dim)`` keys, segment by
    segment, as FlashAttention's varlen function computes them."""
    out = torch.empty_like(q)
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    groups = q.shape[1] // k.shape[1]
    for i in range(len(cu_seqlens_q) - 1):
        q0, q1 = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
        k0, k1 = int(cu_seqlens_k[i]), int(cu_seqlens_k[i + 1])
        if q1 <= q0:
            continue
        qs = q[q0:q1].transpose(0, 1)  # heads, n_q, dim
        ks = k[k0:k1].repeat_interleave(groups, dim=1).transpose(0, 1)
        vs = v[k0:k1].repeat_interleave(groups, dim=1).transpose(0, 1)
        scores = torch.matmul(qs.float(), ks.float().transpose(-1, -2)) * scale
        if causal:
            n_q, n_k = q1 - q0, k1 - k0
            rows = torch.arange(n_q).unsqueeze(1) + (n_k - n_q)
            cols = torch.arange(n_k).unsqueeze(0)
            scores = scores.masked_fill(cols > rows, float("-inf"))
        out[q0:q1] = torch.matmul(scores.softmax(-1), vs.float()).transpose(0, 1).to(q.dtype)
    return out


def get_kernel(repo_id: str, version: int | None = None, **kwargs: object) -> SimpleNamespace:
    """The FlashAttention kernels TRL asks for, as the CPU function above."""
    if "flash-attn" not in repo_id:
        raise ValueError(f"FAKE kernels: no CPU stand-in for {repo_id}")
    return SimpleNamespace(flash_attn_varlen_func=flash_attn_varlen_func)
