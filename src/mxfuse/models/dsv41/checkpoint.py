"""The checkpoint: DeepSeek-V4.1's native safetensors format for one layer's attention sublayer.

Tensor names and formats follow the release (``layers.<i>.`` prefix):

=======================  ===================================  ===================================
name                     dtype                                shape (global)
=======================  ===================================  ===================================
attn.wq_a.weight         float8_e4m3fn                        [q_lora_rank, hidden]
attn.wq_a.scale          E8M0 per 32x32 block                 [q_lora_rank/32, hidden/32]
attn.wkv.weight / scale  same                                 [head_dim, hidden] / [.../32, .../32]
attn.q_norm.weight       bfloat16                             [q_lora_rank]
attn.kv_norm.weight      bfloat16                             [head_dim]
attn.wq_b.weight         bfloat16                             [heads * head_dim, q_lora_rank]
attn.wo_a.weight / scale float8_e4m3fn / E8M0 per 32x32       [o_groups * o_lora_rank, r] / /32
attn.wo_b.weight / scale float8_e4m3fn / E8M0 per 32x32       [hidden, o_groups * o_lora_rank] / /32
attn_norm.weight         bfloat16                             [hidden]
ffn_norm.weight          bfloat16                             [hidden]
hc_{attn,ffn}_fn         float32                              [24, 4 * hidden]
hc_{attn,ffn}_base       float32                              [24]
hc_{attn,ffn}_scale      float32                              [3]
=======================  ===================================  ===================================

The release keeps wq_a and wkv apart; serving engines stack them into one wqkv_a GEMM at load (SGLang
``SGLANG_OPT_FUSE_WQA_WKV``), and so does ``AttentionSublayer.load_weights``. The release stores wq_b in
FP8 too; here it is bf16, and the MXFP8 paths quantize it at load (``MxLinear``). Scales are
written as ``float8_e8m0fnu`` (safetensors ``F8_E8M0``, as in the release); uint8 is read as well.

``config.json`` beside ``model.safetensors`` holds the model dims and the block format; a reader checks
them against the config it loads for. ``read_checkpoint`` takes a rank's shard with
``safe_open(...).get_slice`` (only that slice is read): wq_b and wo_a by rows, wo_b by columns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import torch

from mxfuse.formats import E4M3_MAX
from mxfuse.hc import N_STREAMS
from mxfuse.models.dsv41.config import Dsv41Config

__all__ = [
    "CHECKPOINT_FILE",
    "CONFIG_FILE",
    "SCALE_DTYPE",
    "expected_tensors",
    "local_shapes",
    "make_checkpoint",
    "quantize_blocks_32x32",
    "read_checkpoint",
]

CHECKPOINT_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
BLOCK = 32  # weight_block_size [32, 32], scale_fmt ue8m0 (V4.1 release config)
SCALE_DTYPE = torch.float8_e8m0fnu

_E8M0 = "e8m0"  # marks a scale in expected_tensors: float8_e8m0fnu or uint8 bytes


_MIX = N_STREAMS * (N_STREAMS + 2)  # rows of hc fn / base: pre n | post n | comb n*n


def expected_tensors(config: Dsv41Config) -> dict[str, tuple[object, tuple[int, ...]]]:
    """Every tensor of the checkpoint, ``name -> (dtype or "e8m0", global shape)``, in file order."""
    c = config
    h, qr, d = c.hidden, c.q_lora_rank, c.head_dim
    gr = c.o_groups * c.o_lora_rank
    e4m3, bf16, f32 = torch.float8_e4m3fn, torch.bfloat16, torch.float32
    tensors: dict[str, tuple[object, tuple[int, ...]]] = {}

    def fp8(name: str, n: int, k: int) -> None:
        tensors[f"{name}.weight"] = (e4m3, (n, k))
        tensors[f"{name}.scale"] = (_E8M0, (-(-n // BLOCK), k // BLOCK))

    fp8("attn.wq_a", qr, h)
    fp8("attn.wkv", d, h)
    tensors["attn.q_norm.weight"] = (bf16, (qr,))
    tensors["attn.kv_norm.weight"] = (bf16, (d,))
    tensors["attn.wq_b.weight"] = (bf16, (c.heads * d, qr))
    fp8("attn.wo_a", gr, c.group_width)
    fp8("attn.wo_b", h, gr)
    tensors["attn_norm.weight"] = (bf16, (h,))
    tensors["ffn_norm.weight"] = (bf16, (h,))
    for sub in ("attn", "ffn"):
        tensors[f"hc_{sub}_fn"] = (f32, (_MIX, N_STREAMS * h))
        tensors[f"hc_{sub}_base"] = (f32, (_MIX,))
        tensors[f"hc_{sub}_scale"] = (f32, (3,))
    return tensors


# name -> the dim split across tensor-parallel ranks. wq_b and wo_a are column parallel (rows: heads,
# groups), wo_b row parallel (columns). A rank's share of rows or columns is a multiple of 32 (config
# rules), so splitting the 32x32-block scales into equal parts gives exactly that shard's blocks.
_SHARDED = {
    "attn.wq_b.weight": 0,
    "attn.wo_a.weight": 0,
    "attn.wo_a.scale": 0,
    "attn.wo_b.weight": 1,
    "attn.wo_b.scale": 1,
}


def local_shapes(config: Dsv41Config) -> dict[str, tuple[object, tuple[int, ...]]]:
    """``expected_tensors`` with the shapes one rank loads (its shard of the sharded tensors)."""
    shapes = {}
    for name, (dtype, shape) in expected_tensors(config).items():
        if name in _SHARDED:
            dim = _SHARDED[name]
            shape = tuple(size // config.tp_size if d == dim else size for d, size in enumerate(shape))
        shapes[name] = (dtype, shape)
    return shapes


def quantize_blocks_32x32(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(float8_e4m3fn [N, K], uint8 [N/32, K/32])``: one RCEIL E8M0 scale per 32x32 block.

    The release's weight format; the scale rule is ``mxfuse.formats``' RCEIL (``s = exponent(amax / 448)``
    rounded up), elements ``w / 2**(s - 127)`` rounded to nearest-even E4M3 and saturated. N and K must
    be multiples of 32 and the weight finite.
    """
    if weight.dim() != 2 or weight.shape[0] % BLOCK or weight.shape[1] % BLOCK:
        raise ValueError(
            f"weight must be [N, K] with N and K multiples of {BLOCK}; got {tuple(weight.shape)}"
        )
    n, k = weight.shape
    w = weight.float()
    if not torch.isfinite(w).all():
        raise ValueError("weight must be finite")
    blocks = w.view(n // BLOCK, BLOCK, k // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    bits = (amax / torch.full_like(amax, E4M3_MAX)).view(torch.int32)
    s = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    s = torch.where(amax == 0, 0, s.clamp(0, 254))
    factor = torch.where(s > 0, s << 23, 1 << 22).view(torch.float32)  # 2**(s-127); s = 0 is 2**-127
    q = (blocks / factor[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q.view(n, k), s.to(torch.uint8)


def _random_tensors(config: Dsv41Config, generator: torch.Generator, device: torch.device):
    """Random tensors of realistic magnitude: linears ~ N(0, 1/K) before quantization, norms ~ 1 + 0.1 N,
    hc fn ~ 1e-2 N, hc base and scale ~ 0.1 N (DeepGEMM's Mega-mHC test inputs)."""

    def randn(*shape: int, std: float = 1.0, mean: float = 0.0) -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=device) * std + mean

    out: dict[str, torch.Tensor] = {}
    for name, (dtype, shape) in expected_tensors(config).items():
        if name.endswith(".scale") and dtype == _E8M0:
            continue  # written with its weight
        if dtype == torch.float8_e4m3fn:
            base = name.removesuffix(".weight")
            q, s = quantize_blocks_32x32(randn(*shape, std=shape[1] ** -0.5))
            out[name], out[f"{base}.scale"] = q, s.view(SCALE_DTYPE)
        elif name == "attn.wq_b.weight":
            out[name] = randn(*shape, std=shape[1] ** -0.5).to(torch.bfloat16)
        elif name.endswith("norm.weight"):
            out[name] = randn(*shape, std=0.1, mean=1.0).to(torch.bfloat16)
        elif name.endswith("_fn"):
            out[name] = randn(*shape, std=1e-2)
        else:  # hc base and scale
            out[name] = randn(*shape, std=0.1)
    return out


def make_checkpoint(
    directory: str | Path,
    config: Dsv41Config,
    *,
    seed: int,
    layer: int = 0,
    device: str | torch.device = "cpu",
) -> Path:
    """Write a random checkpoint of ``config``'s global dims (``model.safetensors`` + ``config.json``) into
    ``directory`` (created if missing); returns the safetensors file. The same seed and device give the
    same bytes. ``device`` is where the random numbers are drawn and quantized (CUDA is much faster at
    the Flash dims)."""
    from safetensors.torch import save_file

    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int; got {seed!r}")
    if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
        raise ValueError(f"layer must be an int >= 0; got {layer!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(seed)
    tensors = _random_tensors(config, generator, device)
    prefix = f"layers.{layer}."
    named = {prefix + name: t.contiguous().cpu() for name, t in tensors.items()}
    path = directory / CHECKPOINT_FILE
    save_file(named, str(path), metadata={"format": "pt"})
    meta = {
        "model_dims": config.model_dims(),
        "layers": [layer],
        "weight_block_size": [BLOCK, BLOCK],
        "scale_fmt": "ue8m0",
        "scale_dtype": "float8_e8m0fnu",
        "seed": seed,
    }
    (directory / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return path


def _check_config(directory: Path, config: Dsv41Config) -> None:
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise ValueError(f"checkpoint: {path} is missing (a checkpoint directory holds {CONFIG_FILE})")
    meta = json.loads(path.read_text())
    dims = meta.get("model_dims")
    if dims != config.model_dims():
        diff = {
            k: (dims.get(k) if isinstance(dims, dict) else None, v)
            for k, v in config.model_dims().items()
            if not isinstance(dims, dict) or dims.get(k) != v
        }
        raise ValueError(
            f"checkpoint: {path} was written for other dims than config {config.name!r}: "
            + ", ".join(f"{k} = {a!r} in the checkpoint, {b!r} in the config" for k, (a, b) in diff.items())
        )
    if meta.get("weight_block_size") != [BLOCK, BLOCK]:
        raise ValueError(
            f"checkpoint: weight_block_size must be [32, 32]; got {meta.get('weight_block_size')!r}"
        )


def read_checkpoint(
    directory: str | Path, config: Dsv41Config, *, layer: int = 0, device: str | torch.device = "cpu"
) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` for every tensor of ``layers.<layer>.`` (prefix stripped), the rank's shard of
    the sharded ones (``config.tp_size``, ``config.tp_rank``), on ``device``. Checks config.json first."""
    from safetensors import safe_open

    directory = Path(directory)
    _check_config(directory, config)
    prefix = f"layers.{layer}."
    device = torch.device(device)
    with safe_open(str(directory / CHECKPOINT_FILE), framework="pt", device="cpu") as f:
        names = [n for n in f.keys() if n.startswith(prefix)]
        if not names:
            raise ValueError(f"checkpoint: no tensor named {prefix}* in {directory / CHECKPOINT_FILE}")
        for full in names:
            name = full.removeprefix(prefix)
            if name in _SHARDED and config.tp_size > 1:
                dim = _SHARDED[name]
                part = f.get_slice(full)
                size = part.get_shape()[dim]
                if size % config.tp_size:
                    raise ValueError(
                        f"checkpoint: {full} dim {dim} ({size}) does not split over {config.tp_size} ranks"
                    )
                step = size // config.tp_size
                lo = config.tp_rank * step
                index = (slice(lo, lo + step),) if dim == 0 else (slice(None), slice(lo, lo + step))
                tensor = part[index]
            else:
                tensor = f.get_tensor(full)
            yield name, tensor.to(device)
