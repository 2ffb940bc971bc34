"""LoRA model state against PyTorch on CPU (#15): a small Llama-shaped model with hand-written
LoRA adapters; the frozen base, the adapters, their gradients and their AdamW state are counted
tensor by tensor and compared with the estimate (exact, up to AdamW's 4-byte `step` counters).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpuplan.estimators import finetune as ftm  # noqa: E402
from gpuplan.estimators.memory import memory_breakdown  # noqa: E402
from gpuplan.spec import Layout, ModelSpec  # noqa: E402
from gpuplan.workload import finetune_spec, with_finetune  # noqa: E402

SPEC = ModelSpec(id="tiny", name="tiny", layers=2, hidden=64, heads=4, kv_heads=2, ffn=128,
                 vocab=100, mlp="swiglu")


class LoRALinear(torch.nn.Module):
    """y = x W + (x A) B: W frozen in bf16, A and B trained in fp32 (PEFT's default)."""

    def __init__(self, d_in: int, d_out: int, r: int | None) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(d_in, d_out, dtype=torch.bfloat16) * 0.02,
                                    requires_grad=False)
        self.a = self.b = None
        if r:
            self.a = torch.nn.Parameter(torch.randn(d_in, r) * 0.02)
            self.b = torch.nn.Parameter(torch.zeros(r, d_out))

    def forward(self, x):
        y = x @ self.w
        if self.a is not None:
            y = y + ((x.float() @ self.a) @ self.b).to(y.dtype)
        return y


def build(spec: ModelSpec, r: int, targets: str) -> torch.nn.Module:
    h, q, kv = spec.hidden, spec.heads * spec.d_head, spec.kv_heads * spec.d_head
    attn_r = r if targets in ("attn", "all") else None
    mlp_r = r if targets in ("mlp", "all") else None
    layers = []
    for _ in range(spec.layers):
        layers += [LoRALinear(h, q, attn_r), LoRALinear(h, kv, attn_r),
                   LoRALinear(h, kv, attn_r), LoRALinear(q, h, attn_r),
                   LoRALinear(h, spec.ffn, mlp_r), LoRALinear(h, spec.ffn, mlp_r),
                   LoRALinear(spec.ffn, h, mlp_r)]
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList(layers)
    frozen = [torch.nn.Parameter(torch.zeros(n, dtype=torch.bfloat16), requires_grad=False)
              for n in (spec.vocab * h, h * spec.vocab, h, *[h] * (2 * spec.layers))]
    model.extra = torch.nn.ParameterList(frozen)  # embedding, LM head, final and layer norms
    return model


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("targets", ["attn", "mlp", "all"])
@pytest.mark.parametrize("r", [1, 8])
def test_lora_state_matches_pytorch(r, targets):
    model = build(SPEC, r, targets)
    trained = [p for p in model.parameters() if p.requires_grad]
    frozen = [p for p in model.parameters() if not p.requires_grad]
    x = torch.randn(4, SPEC.hidden, dtype=torch.bfloat16)
    loss = sum(m(x if m.w.shape[0] == SPEC.hidden else torch.randn(
        4, m.w.shape[0], dtype=torch.bfloat16)).float().sum() for m in model.layers)
    loss.backward()
    opt = torch.optim.AdamW(trained, lr=1e-3)
    opt.step()
    moments = [v for s in opt.state.values() for k, v in s.items() if k != "step"]

    ft = finetune_spec(SPEC, method="lora", lora_rank=r, lora_targets=targets)
    bd = memory_breakdown(with_finetune(SPEC, ft), Layout(seq_len=4),
                          runtime_overhead_bytes=0.0, fragmentation=0.0)
    assert sum(p.numel() for p in trained) == ftm.adapter_params(SPEC, ft)
    assert float(bd.base_weights) == _bytes(frozen)
    assert float(bd.adapter_weights) == _bytes(trained)
    assert float(bd.gradients) == _bytes(p.grad for p in trained)
    assert float(bd.adapter_optimizer) == _bytes(moments)
