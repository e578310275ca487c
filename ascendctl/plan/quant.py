"""Bytes per weight for each serving format, and which tensors a format quantizes.

Quantized checkpoints (msModelSlim W8A8 / W4A8, FP8) keep these tensors in the model
dtype (bf16): token embeddings, lm_head, every norm, the MoE router and shared-expert
gates, the Gated DeltaNet conv1d / A_log / dt_bias / in_proj_ba, the MTP `fc`, and the
whole vision encoder. Every other Linear weight of the decoder (attention q/k/v/o,
DeltaNet in_proj_qkvz / out_proj, dense, shared-expert and routed-expert MLPs, the MTP
decoder layer) is stored quantized, with its scales.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascendctl.errors import InputError

ENGINE_QUANTIZATION = {"w8a8": "ascend", "w4a8": "ascend"}


@dataclass(frozen=True)
class WeightFormat:
    name: str                 # none | w8a8 | w4a8 | fp8
    dtype_bytes: int          # unquantized tensors (bf16 / fp16)
    linear_bytes: float       # quantized Linear weights, per parameter
    expert_bytes: float       # routed experts, per parameter
    channel_overhead: int     # scale/offset bytes per output channel of a quantized Linear
    group_size: int = 0       # per-group scales (int4), 0 = none
    group_scale_bytes: int = 0

    def matrix_bytes(self, rows: int, cols: int, *, quantized: bool,
                     expert: bool = False) -> float:
        """Bytes of a `rows x cols` weight (rows = output channels held by this NPU)."""
        if not quantized or self.name == "none":
            return rows * cols * self.dtype_bytes
        per_param = self.expert_bytes if expert else self.linear_bytes
        size = rows * cols * per_param + rows * self.channel_overhead
        if expert and self.group_size:
            size += rows * -(-cols // self.group_size) * self.group_scale_bytes
        return size


def weight_format(quantization: str, dtype: str, checkpoint_dtype: str = "bfloat16"
                  ) -> WeightFormat:
    if dtype == "auto":
        dtype = checkpoint_dtype if checkpoint_dtype in ("bfloat16", "float16") else "bfloat16"
    if dtype not in ("bfloat16", "float16"):
        raise InputError(f"model.dtype {dtype!r}: the planner handles bfloat16 and float16")
    if quantization == "none":
        return WeightFormat("none", 2, 2, 2, 0)
    if quantization == "w8a8":
        # int8 weights; per-channel scale + offset (+ deq_scale / quant_bias for static W8A8)
        return WeightFormat("w8a8", 2, 1, 1, 16)
    if quantization == "w4a8":
        # int4 routed experts with per-group scales (group 256), int8 everywhere else
        return WeightFormat("w4a8", 2, 1, 0.5, 16, group_size=256, group_scale_bytes=8)
    if quantization == "fp8":
        # fp8 e4m3 weights with 128x128 block scales (fp32): 4 bytes per 16384 weights
        return WeightFormat("fp8", 2, 1 + 4 / 16384, 1 + 4 / 16384, 0)
    raise InputError(f"model.quantization {quantization!r} is not one of none, w8a8, w4a8, fp8")
