"""FLOPs and bytes of one framework op from its recorded shapes (docs/ops.md has every formula).

torch.profiler with ``record_shapes=True`` writes, per op, ``Input Dims`` (one shape per argument),
``Input type`` (``float``, ``c10::BFloat16``, ``Scalar`` ...) and ``Concrete Inputs`` (the value of
non-tensor arguments as text: ``"[1, 1]"``, ``"True"``). Each formula reads the arguments at the
positions of the op's ATen schema. FLOPs count a multiply-add as 2. Bytes are the ideal traffic:
every tensor argument read once and every output written once (no re-reads, no caching), so achieved
bandwidth is a lower bound of the real traffic's.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Element size in bytes and the peak-table dtype of each Kineto ``Input type`` string.
DTYPES: dict[str, tuple[int, str | None]] = {
    "double": (8, "fp64"), "float": (4, "fp32"), "c10::Half": (2, "fp16"), "c10::BFloat16": (2, "bf16"),
    "c10::Float8_e4m3fn": (1, "fp8"), "c10::Float8_e5m2": (1, "fp8"), "c10::Float8_e4m3fnuz": (1, "fp8"),
    "c10::Float8_e5m2fnuz": (1, "fp8"), "c10::complex<float>": (8, None), "c10::complex<double>": (16, None),
    "long int": (8, None), "int": (4, None), "short int": (2, None), "signed char": (1, None),
    "unsigned char": (1, None), "bool": (1, None),
}


@dataclass(frozen=True)
class OpCost:
    op_class: str  # gemm, conv, attention, elementwise, reduce, norm
    flops: int
    bytes: int
    dtype: str | None  # the peak-table dtype of the op's first floating tensor (None: not a float op)


@dataclass(frozen=True)
class _Args:
    dims: list[list[int]]
    types: list[str]
    concrete: list[str]

    def tensor(self, i: int) -> list[int] | None:
        """The shape of argument ``i`` when it is a tensor (None for scalars, None-args, lists)."""
        if i < len(self.types) and self.types[i] in DTYPES and i < len(self.dims):
            d = self.dims[i]
            if isinstance(d, list) and all(isinstance(x, int) for x in d):
                return d
        return None

    def size(self, i: int) -> int:
        return DTYPES[self.types[i]][0] if i < len(self.types) and self.types[i] in DTYPES else 0

    def tensor_bytes(self, i: int) -> int:
        shape = self.tensor(i)
        return numel(shape) * self.size(i) if shape is not None else 0

    def all_tensor_bytes(self) -> int:
        return sum(self.tensor_bytes(i) for i in range(len(self.types)))

    def value(self, i: int) -> Any:
        """A concrete argument parsed as a Python literal (None when absent or not a literal)."""
        if i >= len(self.concrete) or self.concrete[i] == "":
            return None
        try:
            return ast.literal_eval(self.concrete[i])
        except (ValueError, SyntaxError):
            return self.concrete[i]

    def dtype(self) -> str | None:
        for t in self.types:
            if t in DTYPES and DTYPES[t][1] is not None:
                return DTYPES[t][1]
        return None


def numel(shape: list[int]) -> int:
    return math.prod(shape)


def _broadcast(*shapes: list[int]) -> list[int]:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(rank):
        sizes = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        big = max(sizes)
        out.append(0 if 0 in sizes else big)
    return out


# -- GEMM -----------------------------------------------------------------------------------------


def _gemm(a: _Args, ia: int, ib: int, extra: tuple[int, ...] = ()) -> OpCost | None:
    """C[batch, m, n] = A[batch, m, k] @ B[batch, k, n] with torch.matmul's broadcasting and 1-D rules."""
    x, y = a.tensor(ia), a.tensor(ib)
    if x is None or y is None or not x or not y:
        return None
    m = 1 if len(x) == 1 else x[-2]
    k = x[-1]
    n = 1 if len(y) == 1 else y[-1]
    batch = numel(_broadcast(x[:-2], y[:-2]))
    out_bytes = batch * m * n * a.size(ia)
    moved = a.tensor_bytes(ia) + a.tensor_bytes(ib) + sum(a.tensor_bytes(i) for i in extra) + out_bytes
    return OpCost("gemm", 2 * batch * m * k * n, moved, a.dtype())


def _linear(a: _Args) -> OpCost | None:
    """linear(input[..., k], weight[n, k], bias[n]?): 2 * prod(input[:-1]) * k * n."""
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or len(w) != 2 or not x:
        return None
    rows, k, n = numel(x[:-1]), x[-1], w[0]
    out_bytes = rows * n * a.size(0)
    return OpCost("gemm", 2 * rows * k * n, a.all_tensor_bytes() + out_bytes, a.dtype())


# -- convolution ----------------------------------------------------------------------------------


def _conv(a: _Args, stride_i: int, pad_i: int, dil_i: int, groups_i: int, transposed_i: int | None,
          out_pad_i: int | None) -> OpCost | None:
    """2 * N * Cout * prod(out spatial) * (Cin / groups) * prod(kernel) (transposed: swap in and out)."""
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return None
    spatial = len(x) - 2
    stride, pad, dil = (_per_dim(a.value(i), spatial, d) for i, d in ((stride_i, 1), (pad_i, 0), (dil_i, 1)))
    groups = a.value(groups_i) or 1
    transposed = bool(a.value(transposed_i)) if transposed_i is not None else False
    if not isinstance(groups, int) or stride is None or dil is None:
        return None
    kernel = w[2:]
    if transposed:
        out_pad = _per_dim(a.value(out_pad_i), spatial, 0) if out_pad_i is not None else [0] * spatial
        if pad is None or out_pad is None:
            return None
        out = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1
               for i, s, p, d, k, op in zip(x[2:], stride, pad, dil, kernel, out_pad, strict=True)]
        c_out = w[1] * groups
        flops = 2 * x[0] * x[1] * numel(x[2:]) * w[1] * numel(kernel)
    else:
        if pad is None:  # padding="same" keeps the size at stride 1; "valid" is no padding
            text = a.value(pad_i)
            pad = [d * (k - 1) // 2 for d, k in zip(dil, kernel, strict=True)] if text == "same" else (
                [0] * spatial if text == "valid" else None)
            if pad is None:
                return None
        out = [(i + 2 * p - d * (k - 1) - 1) // s + 1
               for i, s, p, d, k in zip(x[2:], stride, pad, dil, kernel, strict=True)]
        c_out = w[0]
        flops = 2 * x[0] * c_out * numel(out) * w[1] * numel(kernel)
    out_bytes = x[0] * c_out * numel(out) * a.size(0)
    return OpCost("conv", flops, a.all_tensor_bytes() + out_bytes, a.dtype())


def _conv_backward(a: _Args) -> OpCost | None:
    """convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask): one forward's FLOPs per gradient asked for (input, weight)."""
    g, x, w = a.tensor(0), a.tensor(1), a.tensor(2)
    mask = a.value(10)
    groups = a.value(9) or 1
    if g is None or x is None or w is None or len(g) < 3 or not isinstance(groups, int):
        return None
    transposed = bool(a.value(7))
    # Forward FLOPs from the shapes alone: the grad_output is the forward output.
    small, big = (g, x) if transposed else (x, g)
    fwd = 2 * big[0] * big[1] * numel(big[2:]) * (small[1] // groups) * numel(w[2:])
    asked = sum(bool(v) for v in mask[:2]) if isinstance(mask, list | tuple) else 2
    out_bytes = (a.tensor_bytes(1) if not isinstance(mask, list | tuple) or mask[0] else 0) + (
        a.tensor_bytes(2) if not isinstance(mask, list | tuple) or mask[1] else 0)
    return OpCost("conv", fwd * asked, a.all_tensor_bytes() + out_bytes, a.dtype())


def _per_dim(v: Any, n: int, default: int) -> list[int] | None:
    if v is None:
        return [default] * n
    if isinstance(v, int):
        return [v] * n
    if isinstance(v, list | tuple) and all(isinstance(x, int) for x in v):
        return list(v) * n if len(v) == 1 else list(v) if len(v) == n else None
    return None


# -- attention ------------------------------------------------------------------------------------


def _attention(a: _Args, q_i: int, causal_i: int, *, heads_second: bool = True, factor: float = 1.0,
               out_tensors: int = 1) -> OpCost | None:
    """Q·Kᵀ and P·V: 2·B·H·pairs·(E + Ev), pairs = L·S, or the unmasked (i, j ≤ i) pairs when causal.

    ``factor`` 2.5 for backward passes (5 matmuls to the forward's 2, as FlashAttention counts them).
    """
    q, k, v = a.tensor(q_i), a.tensor(q_i + 1), a.tensor(q_i + 2)
    if q is None or k is None or v is None or len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    if heads_second:  # [B, H, L, E]
        b, h, lq, e = q
        s, ev = k[2], v[3]
    else:  # [B, L, H, E] (the flash kernels' own layout)
        b, lq, h, e = q
        s, ev = k[1], v[3]
    causal = a.value(causal_i) is True
    pairs = lq * s
    if causal:  # top-left aligned mask, as torch's is_causal: query i sees keys 0..i
        pairs = lq * (lq + 1) // 2 if lq <= s else s * (s + 1) // 2 + (lq - s) * s
    flops = round(2 * b * h * pairs * (e + ev) * factor)
    out_bytes = out_tensors * b * h * lq * ev * a.size(q_i)
    return OpCost("attention", flops, a.all_tensor_bytes() + out_bytes, a.dtype())


# -- memory-bound classes -------------------------------------------------------------------------


def _elementwise(a: _Args, *, flops_per_element: int = 1, in_place: bool = False) -> OpCost | None:
    """One output per element of the inputs' broadcast shape; bytes = tensor inputs + the output."""
    shapes = [s for i in range(len(a.types)) if (s := a.tensor(i)) is not None]
    if not shapes:
        return None
    out = numel(_broadcast(*shapes))
    first = next(i for i in range(len(a.types)) if a.tensor(i) is not None)
    written = out * a.size(first)
    return OpCost("elementwise", flops_per_element * out, a.all_tensor_bytes() + written, a.dtype())


def _copy(a: _Args) -> OpCost | None:
    """copy_(self, src): read src, write self; no arithmetic."""
    if a.tensor(0) is None or a.tensor(1) is None:
        return None
    return OpCost("elementwise", 0, a.tensor_bytes(0) + a.tensor_bytes(1), a.dtype())


def _fill(a: _Args) -> OpCost | None:
    """fill_ / zero_: write self only."""
    return OpCost("elementwise", 0, a.tensor_bytes(0), a.dtype()) if a.tensor(0) is not None else None


def _reduce(a: _Args, dim_i: int | None = 1, keepdim_i: int | None = 2) -> OpCost | None:
    """sum/mean/amax...: one FLOP per input element; bytes = input + output (the reduced shape)."""
    x = a.tensor(0)
    if x is None:
        return None
    dims = a.value(dim_i) if dim_i is not None else None
    if isinstance(dims, int):
        dims = [dims]
    if dims is None or dims == []:
        out = 1  # no dim: a full reduction
    elif isinstance(dims, list) and all(isinstance(d, int) for d in dims) and x:
        gone = {d % len(x) for d in dims}
        out = numel([s for i, s in enumerate(x) if i not in gone])
    else:
        return None
    return OpCost("reduce", numel(x), a.tensor_bytes(0) + out * a.size(0), a.dtype())


def _softmax(a: _Args) -> OpCost | None:
    """softmax along a dim: 5 FLOPs per element (max, subtract, exp, sum, divide); read + write."""
    x = a.tensor(0)
    return OpCost("reduce", 5 * numel(x), 2 * a.tensor_bytes(0), a.dtype()) if x is not None else None


def _norm(a: _Args, flops_per_element: int) -> OpCost | None:
    """layer/group/batch norm 5 FLOPs per element (mean, variance 2, normalise, affine), RMS norm 4;
    bytes = every tensor argument read + the output (the input's size) written."""
    x = a.tensor(0)
    if x is None:
        return None
    return OpCost("norm", flops_per_element * numel(x), a.all_tensor_bytes() + a.tensor_bytes(0), a.dtype())


Formula = Callable[[_Args], "OpCost | None"]


def _eltwise_table() -> dict[str, Formula]:
    out: dict[str, Formula] = {}
    for base in ("add", "sub", "mul", "div", "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "neg", "pow",
                 "rsqrt", "sqrt", "clamp", "where", "masked_fill", "threshold_backward", "gelu_backward",
                 "silu_backward", "sigmoid_backward", "tanh_backward", "maximum", "minimum", "abs", "cos", "sin",
                 "log", "reciprocal", "addcmul", "addcdiv", "lerp", "hardtanh", "leaky_relu", "eq", "ne",
                 "lt", "gt", "le", "ge", "logical_not", "bitwise_and"):
        out[f"aten::{base}"] = _elementwise
        out[f"aten::{base}_"] = _elementwise
    return out


FORMULAS: dict[str, Formula] = {
    "aten::mm": lambda a: _gemm(a, 0, 1),
    "aten::bmm": lambda a: _gemm(a, 0, 1),
    "aten::matmul": lambda a: _gemm(a, 0, 1),
    "aten::addmm": lambda a: _gemm(a, 1, 2, extra=(0,)),
    "aten::baddbmm": lambda a: _gemm(a, 1, 2, extra=(0,)),
    "aten::linear": _linear,
    "aten::conv1d": lambda a: _conv(a, 3, 4, 5, 6, None, None),
    "aten::conv2d": lambda a: _conv(a, 3, 4, 5, 6, None, None),
    "aten::conv3d": lambda a: _conv(a, 3, 4, 5, 6, None, None),
    "aten::convolution": lambda a: _conv(a, 3, 4, 5, 8, 6, 7),
    "aten::_convolution": lambda a: _conv(a, 3, 4, 5, 8, 6, 7),
    "aten::convolution_backward": _conv_backward,
    "aten::scaled_dot_product_attention": lambda a: _attention(a, 0, 5),
    "aten::_scaled_dot_product_flash_attention": lambda a: _attention(a, 0, 4),
    "aten::_scaled_dot_product_flash_attention_for_cpu": lambda a: _attention(a, 0, 4),
    "aten::_scaled_dot_product_efficient_attention": lambda a: _attention(a, 0, 6),
    "aten::_scaled_dot_product_cudnn_attention": lambda a: _attention(a, 0, 6),
    "aten::_flash_attention_forward": lambda a: _attention(a, 0, 8, heads_second=False),
    "aten::_scaled_dot_product_flash_attention_backward": lambda a: _attention(a, 1, 11, factor=2.5,
                                                                                 out_tensors=3),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": lambda a: _attention(a, 1, 7, factor=2.5,
                                                                                         out_tensors=3),
    "aten::_scaled_dot_product_efficient_attention_backward": lambda a: _attention(a, 1, 11, factor=2.5,
                                                                                     out_tensors=3),
    "aten::_scaled_dot_product_cudnn_attention_backward": lambda a: _attention(a, 1, 14, factor=2.5,
                                                                                 out_tensors=3),
    "aten::_flash_attention_backward": lambda a: _attention(a, 1, 11, heads_second=False, factor=2.5,
                                                              out_tensors=3),
    **_eltwise_table(),
    "aten::copy_": _copy,
    "aten::fill_": _fill,
    "aten::zero_": _fill,
    "aten::sum": _reduce,
    "aten::mean": _reduce,
    "aten::amax": _reduce,
    "aten::amin": _reduce,
    "aten::softmax": _softmax,
    "aten::_softmax": _softmax,
    "aten::log_softmax": _softmax,
    "aten::_log_softmax": _softmax,
    "aten::layer_norm": lambda a: _norm(a, 5),
    "aten::native_layer_norm": lambda a: _norm(a, 5),
    "aten::group_norm": lambda a: _norm(a, 5),
    "aten::native_group_norm": lambda a: _norm(a, 5),
    "aten::batch_norm": lambda a: _norm(a, 5),
    "aten::native_batch_norm": lambda a: _norm(a, 5),
    "aten::_native_batch_norm_legit": lambda a: _norm(a, 5),
    "aten::rms_norm": lambda a: _norm(a, 4),
    "aten::_fused_rms_norm": lambda a: _norm(a, 4),
}


def op_cost(name: str, args: dict[str, Any]) -> OpCost | None:
    """FLOPs and bytes of one op from its Kineto args; None when the op has no formula or no shapes."""
    formula = FORMULAS.get(name)
    dims = args.get("Input Dims")
    if formula is None or not isinstance(dims, list):
        return None
    types = args.get("Input type") or []
    concrete = args.get("Concrete Inputs") or []
    try:
        return formula(_Args(dims, [str(t) for t in types], [str(c) for c in concrete]))
    except (IndexError, TypeError, ValueError, ZeroDivisionError):
        return None  # shapes that do not fit the schema: no estimate rather than a wrong one
