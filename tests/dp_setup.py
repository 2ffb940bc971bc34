"""The small model, efficiency and 8-GPU node the data-parallel tests (test_dp_cp_group,
test_dp_fp8_experts) time their hand formulas against: one definition for both."""

from __future__ import annotations

from gpuplan.estimators import comm
from gpuplan.estimators.compute import Efficiency
from gpuplan.spec import Hardware, ModelSpec

TINY = ModelSpec(id="t", name="t", layers=2, hidden=256, heads=4, kv_heads=4, ffn=1024,
                 vocab=1000)  # < 40M parameters: one gradient bucket
EFF = Efficiency(matmul_max=0.6, half_dim=200.0, fp8_ratio=0.75, memory_fraction=0.7,
                 layer_overhead_s=5e-4, tp_overlap=0.15)
UP, A_UP, NIC, A_OUT = 450e9, 2e-6, 50e9, 4e-6
HW = Hardware(memory_bytes=80e9, memory_bandwidth_bytes_per_s=3.35e12, peak_flops=989e12,
              scale_up_bytes_per_s=UP, scale_up_latency_s=A_UP, scale_up_domain=8,
              scale_out_bytes_per_s=NIC, scale_out_latency_s=A_OUT, gpus_per_node=8,
              tdp_watts=700)
OUT = NIC * comm.NET_EFFICIENCY  # the scale-out link at the network's efficiency
