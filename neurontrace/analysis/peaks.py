"""Published peak throughput of the accelerators users profile, one cited public source per entry.

Each entry gives dense (no structured sparsity) peak TFLOP/s per dtype and the peak memory bandwidth in
TB/s of ONE device as a trace names it: a whole GPU for NVIDIA, one GCD for AMD MI250 (each GCD shows
up as its own device), one NeuronCore for Trainium (neurontrace devices are ``neuron:ncN``), the chip's
figure divided by its core count. A dtype the vendor does not publish is absent: its peak is unknown,
never guessed. A device no entry matches is reported as unknown (``peak_for`` returns None).

Matching: the CUDA/ROCm ``deviceProperties`` name (plus its memory size where one name covers
variants with different bandwidth), or the Neuron ``instance_type`` (trn1 / trn2 / trn3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from neurontrace import trace_facts
from neurontrace.trace import Trace

GIB = 1024**3


@dataclass(frozen=True)
class Peak:
    """Peak dense throughput of one device."""

    device: str  # the product, as its vendor names it
    tflops: dict[str, float]  # dtype (fp64, fp32, tf32, bf16, fp16, fp8) -> dense TFLOP/s
    hbm_tbps: float  # peak memory bandwidth, TB/s (10^12 bytes per second)
    source: str  # where the figures are published
    note: str = ""

    def flops_per_s(self, dtype: str | None) -> float | None:
        v = self.tflops.get(dtype or "")
        return v * 1e12 if v is not None else None

    @property
    def bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "tflops": self.tflops, "hbm_tbps": self.hbm_tbps, "source": self.source,
                "note": self.note}


@dataclass(frozen=True)
class _Entry:
    pattern: re.Pattern[str]  # searched in the deviceProperties name or the instance type
    peak: Peak
    min_mem_gib: float = 0.0  # the variant with at least this much memory (totalGlobalMem) ...
    max_mem_gib: float = field(default=float("inf"))  # ... and at most this much
    name_size: bool = True  # a size in the name ("A100-SXM4-80GB") is the GPU's memory (GH200 480GB: the CPU's)


def _e(pattern: str, device: str, tflops: dict[str, float], hbm_tbps: float, source: str, note: str = "",
       mem: tuple[float, float] = (0.0, float("inf")), name_size: bool = True) -> _Entry:
    return _Entry(re.compile(pattern, re.IGNORECASE), Peak(device, tflops, hbm_tbps, source, note), *mem, name_size)


_NV_A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_NV_H100 = "https://www.nvidia.com/en-us/data-center/h100/ (H100 datasheet; tensor figures halved: listed with sparsity)"
_NV_H200 = "https://www.nvidia.com/en-us/data-center/h200/ (tensor figures halved: listed with sparsity)"
_NV_BLACKWELL = "https://resources.nvidia.com/en-us-blackwell-architecture/datasheet (Blackwell datasheet, dense columns)"
_NV_L4 = "https://www.nvidia.com/en-us/data-center/l4/ (tensor figures halved: listed with sparsity)"
_NV_TURING = ("https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/"
              "turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf (Table 1, reference board)")
_NV_V100 = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_NV_V100_PAGE = "https://www.nvidia.com/en-us/data-center/v100/ (V100 datasheet: PCIe, SXM2 and V100S PCIe columns)"
_NV_GH200 = ("https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/ (GH200 datasheet; tensor figures "
             "halved: listed with sparsity)")
_NV_H800 = ("https://www.nvidia.com/en-us/data-center/h100/ (the H800 is the H100 die with NVLink cut to 400 GB/s and "
            "FP64 to 1 TFLOPS, NVIDIA H800 datasheet; tensor figures halved: listed with sparsity)")
_NV_H20 = ("https://willitrunai.com/es/gpus/h20-96gb (NVIDIA publishes no H20 page; the product brief's figures: "
           "148 FP16/BF16, 74 TF32, 44 FP32, 1 FP64, 296 FP8 TFLOPS dense, 96 GB HBM3 at 4.0 TB/s)")
_NV_L40S = "https://www.nvidia.com/en-us/data-center/l40s/ (L40S datasheet; tensor figures: the dense column)"
_NV_L40 = "https://www.nvidia.com/en-us/data-center/l40/ (L40 datasheet; tensor figures: the dense column)"
_NV_A10 = "https://www.nvidia.com/en-us/data-center/products/a10-gpu/ (A10 datasheet; tensor figures: the dense column)"
_NV_T4 = "https://www.nvidia.com/en-us/data-center/tesla-t4/ (T4 datasheet: 8.1 FP32, 65 mixed FP16/FP32 TFLOPS)"
_NV_ADA = ("https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf (Ada whitepaper, "
           "appendix table: RTX 4090, dense tensor rates with FP32 accumulate)")
_NV_GA102 = ("https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf (GA102 "
             "whitepaper, RTX 3090 and RTX A6000 columns: dense tensor rates with FP32 accumulate)")
_NV_A4000 = ("https://www.nvidia.com/en-us/design-visualization/rtx-a4000/ (RTX A4000 datasheet: 19.2 FP32 TFLOPS, "
             "153.4 tensor TFLOPS with sparsity, 448 GB/s)")
_AMD = "https://www.amd.com/en/products/accelerators/instinct/"
_NEURON = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/arch/neuron-hardware/"

# First match wins: more specific names first.
ENTRIES: tuple[_Entry, ...] = (
    # NVIDIA. FP32 is the non-tensor-core rate: PyTorch runs fp32 matmuls in full fp32 unless
    # torch.backends.cuda.matmul.allow_tf32 is set (default off since 1.12).
    _e(r"H100.*PCIe", "NVIDIA H100 PCIe", {"fp64": 26, "fp32": 51, "tf32": 378, "bf16": 756.5, "fp16": 756.5,
                                             "fp8": 1513}, 2.0, _NV_H100),
    _e(r"H100.*NVL", "NVIDIA H100 NVL", {"fp64": 30, "fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5,
                                           "fp8": 1670.5}, 3.9, _NV_H100),
    _e(r"H100", "NVIDIA H100 SXM", {"fp64": 34, "fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5,
                                      "fp8": 1979}, 3.35, _NV_H100, "'H100 80GB HBM3' is the SXM5 board"),
    # GH200: one H100-class GPU beside a Grace CPU; "NVIDIA GH200 480GB" (480 GB is the CPU's LPDDR5X) has
    # 96 GB of HBM3 at 4.0 TB/s, the HBM3e board 144 GB at 4.9 TB/s: told apart by the GPU's memory size.
    _e(r"GH200", "NVIDIA GH200 96GB HBM3", {"fp64": 34, "fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5,
                                           "fp8": 1979}, 4.0, _NV_GH200, mem=(0, 120), name_size=False),
    _e(r"GH200", "NVIDIA GH200 144GB HBM3e", {"fp64": 34, "fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5,
                                             "fp8": 1979}, 4.9, _NV_GH200, mem=(120, float("inf")), name_size=False),
    _e(r"GH200.*(HBM3e|144G)", "NVIDIA GH200 144GB HBM3e", {"fp64": 34, "fp32": 67, "tf32": 494.5, "bf16": 989.5,
                                                          "fp16": 989.5, "fp8": 1979}, 4.9, _NV_GH200),
    _e(r"(?<!G)H200.*NVL", "NVIDIA H200 NVL", {"fp64": 30, "fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5,
                                               "fp8": 1670.5}, 4.8, _NV_H200),
    _e(r"(?<!G)H200", "NVIDIA H200 SXM", {"fp64": 34, "fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5,
                                          "fp8": 1979}, 4.8, _NV_H200),
    _e(r"H800.*PCIe", "NVIDIA H800 PCIe", {"fp64": 0.8, "fp32": 51, "tf32": 378, "bf16": 756.5, "fp16": 756.5,
                                           "fp8": 1513}, 2.0, _NV_H800),
    _e(r"H800", "NVIDIA H800 SXM", {"fp64": 1, "fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5,
                                      "fp8": 1979}, 3.35, _NV_H800),
    _e(r"\bH20\b", "NVIDIA H20 96GB", {"fp64": 1, "fp32": 44, "tf32": 74, "bf16": 148, "fp16": 148, "fp8": 296},
       4.0, _NV_H20, "the 141 GB board's bandwidth is not published: unknown", mem=(0, 120)),
    _e(r"GB200", "NVIDIA GB200 (one Blackwell GPU)", {"fp64": 45, "fp32": 90, "tf32": 1250, "bf16": 2500,
                                                       "fp16": 2500, "fp8": 5000}, 8.0, _NV_BLACKWELL),
    _e(r"B200", "NVIDIA B200 (HGX)", {"fp64": 40, "fp32": 80, "tf32": 1100, "bf16": 2250, "fp16": 2250,
                                        "fp8": 4500}, 8.0, _NV_BLACKWELL),
    # One A100 name (A100-PG509-200, A100-SXM4-40GB ...) covers 40 GB and 80 GB boards, whose
    # bandwidth differs; compute is the same on SXM and PCIe.
    _e(r"A100", "NVIDIA A100 40GB", {"fp64": 9.7, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
       1.555, _NV_A100, mem=(0, 48)),
    _e(r"A100.*PCIe", "NVIDIA A100 80GB PCIe", {"fp64": 9.7, "fp32": 19.5, "tf32": 156, "bf16": 312,
                                                  "fp16": 312}, 1.935, _NV_A100, mem=(48, float("inf"))),
    _e(r"A100", "NVIDIA A100 80GB SXM", {"fp64": 9.7, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
       2.039, _NV_A100, mem=(48, float("inf"))),
    _e(r"L40S", "NVIDIA L40S", {"fp32": 91.6, "tf32": 183, "bf16": 362.05, "fp16": 362.05, "fp8": 733}, 0.864,
       _NV_L40S),
    _e(r"\bL40\b", "NVIDIA L40", {"fp32": 90.5, "tf32": 90.5, "bf16": 181.05, "fp16": 181.05, "fp8": 362}, 0.864,
       _NV_L40),
    _e(r"\bA10\b", "NVIDIA A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125}, 0.6, _NV_A10,
       "not the A10G (AWS), whose figures NVIDIA does not publish"),
    _e(r"\bT4\b", "NVIDIA T4", {"fp32": 8.1, "fp16": 65}, 0.32, _NV_T4, "fp16: the tensor rate with fp32 accumulate"),
    _e(r"RTX 4090", "NVIDIA GeForce RTX 4090", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2,
                                                "fp8": 330.3}, 1.008, _NV_ADA,
       "GeForce: tensor rates with fp32 accumulate (PyTorch's), half the fp16-accumulate figures"),
    _e(r"RTX 3090(?! Ti)", "NVIDIA GeForce RTX 3090", {"fp32": 35.6, "tf32": 35.6, "bf16": 71, "fp16": 71}, 0.936,
       _NV_GA102, "GeForce: tensor rates with fp32 accumulate (PyTorch's), half the fp16-accumulate figures"),
    _e(r"RTX A6000", "NVIDIA RTX A6000", {"fp32": 38.7, "tf32": 77.4, "bf16": 154.8, "fp16": 154.8}, 0.768,
       _NV_GA102),
    _e(r"RTX A4000", "NVIDIA RTX A4000", {"fp32": 19.2, "fp16": 153.4 / 2}, 0.448, _NV_A4000,
       "fp16: the datasheet's sparse tensor figure / 2; bf16 and tf32 are not published"),
    _e(r"\bL4\b", "NVIDIA L4", {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5}, 0.3, _NV_L4),
    _e(r"RTX 2080 Ti", "NVIDIA GeForce RTX 2080 Ti", {"fp32": 13.4, "fp16": 53.8}, 0.616, _NV_TURING,
       "fp16 tensor rate with fp32 accumulation (PyTorch's); no bf16 on Turing"),
    _e(r"V100.*SXM2", "NVIDIA V100 SXM2", {"fp64": 7.8, "fp32": 15.7, "fp16": 125}, 0.9, _NV_V100),
    _e(r"V100S", "NVIDIA V100S PCIe", {"fp64": 8.2, "fp32": 16.4, "fp16": 130}, 1.134, _NV_V100_PAGE),
    _e(r"V100.*PCIe", "NVIDIA V100 PCIe", {"fp64": 7, "fp32": 14, "fp16": 112}, 0.9, _NV_V100_PAGE),
    # AMD. MI250/MI250X are two GCDs per package and each GCD is one device: half the package figures.
    _e(r"MI355X", "AMD Instinct MI355X", {"fp16": 2500, "bf16": 2500, "fp8": 5000}, 8.0, _AMD + "mi350/mi355x.html"),
    _e(r"MI325X", "AMD Instinct MI325X", {"fp64": 81.7, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4,
                                           "fp16": 1307.4, "fp8": 2614.9}, 6.0, _AMD + "mi300/mi325x.html"),
    _e(r"MI300X", "AMD Instinct MI300X", {"fp64": 81.7, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4,
                                           "fp16": 1307.4, "fp8": 2614.9}, 5.3, _AMD + "mi300/mi300x.html",
       "'MI300X VF' (a virtual function) is the same chip"),
    _e(r"MI250X", "AMD Instinct MI250X (one GCD)", {"fp64": 47.9, "fp32": 47.9, "bf16": 191.5, "fp16": 191.5},
       1.6, _AMD + "mi200/mi250x.html", "package figures / 2 GCDs"),
    _e(r"MI250", "AMD Instinct MI250 (one GCD)", {"fp64": 45.3, "fp32": 45.3, "bf16": 181.0, "fp16": 181.0},
       1.6, _AMD + "mi200/mi250.html", "package figures / 2 GCDs"),
    _e(r"MI210", "AMD Instinct MI210", {"fp64": 45.3, "fp32": 45.3, "bf16": 181.0, "fp16": 181.0}, 1.6,
       _AMD + "mi200/mi210.html", "fp32 is the matrix rate"),
    # AWS Trainium, per NeuronCore: chip figures / cores per chip (2 on Trainium1, 8 on Trainium2/3).
    _e(r"\btrn1n?\.", "AWS Trainium1 (one NeuronCore-v2)", {"fp32": 47.5 / 2, "tf32": 95, "bf16": 95,
                                                             "fp16": 95, "fp8": 95}, 0.820 * GIB / 1e9 / 2,
       _NEURON + "trainium.html", "chip: 190 BF16/FP16/cFP8/TF32 TFLOPS, 47.5 FP32, 820 GiB/s; 2 cores"),
    _e(r"\btrn2[a-z]*\.", "AWS Trainium2 (one NeuronCore-v3)", {"fp32": 181 / 8, "tf32": 667 / 8,
                                                               "bf16": 667 / 8, "fp16": 667 / 8,
                                                               "fp8": 1299 / 8}, 2.9 / 8,
       _NEURON + "trainium2.html", "chip: 667 BF16/FP16/TF32, 1299 FP8, 181 FP32 TFLOPS, 2.9 TB/s; 8 cores"),
    _e(r"\btrn3[a-z]*\.", "AWS Trainium3 (one NeuronCore-v4)", {"fp32": 183 / 8, "tf32": 671 / 8,
                                                               "bf16": 671 / 8, "fp16": 671 / 8,
                                                               "fp8": 2517 / 8}, 4.9 / 8,
       _NEURON + "trainium3.html", "chip: 671 BF16/FP16/TF32, 2517 MXFP8 TFLOPS, 4.9 TB/s; 8 cores"),
)
# Not matched on purpose: 'AMD Radeon Graphics' (a generic ROCm name, seen on an MI250), MTIA
# 'ARTEMIS' (no public source ties that deviceProperties name to a chip's figures), V100 DGXS and SXM3 (no
# datasheet gives their bandwidth), A10G, RTX 3090 Ti.

_INSTANCE = re.compile(r"\b(trn[123][a-z]*\.[0-9a-z]+)")


def peak_for(name: str, total_mem_bytes: int | None = None) -> Peak | None:
    """The entry for a device name (or Neuron instance type); None when no entry matches."""
    mem = total_mem_bytes / GIB if total_mem_bytes else None
    for e in ENTRIES:
        if not e.pattern.search(name):
            continue
        if mem is None and (e.min_mem_gib > 0 or e.max_mem_gib < float("inf")):
            # A name that covers variants, without the memory size to tell them apart: only the
            # variant the name itself spells out ("A100-SXM4-40GB", "A100 80GB PCIe") is safe.
            sized = re.search(r"(\d+)\s*GB", name) if e.name_size else None
            if not sized or not e.min_mem_gib <= float(sized.group(1)) <= e.max_mem_gib:
                continue
        elif mem is not None and not e.min_mem_gib <= mem <= e.max_mem_gib:
            continue
        return e.peak
    return None


@dataclass(frozen=True)
class DevicePeak:
    """What the trace says a device is, and its peak (None: unknown device)."""

    device: str
    name: str | None
    peak: Peak | None

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "name": self.name, "peak": self.peak.as_dict() if self.peak else None}


def device_peak(trace: Trace, device: str) -> DevicePeak:
    """The peak of one trace device (``cuda:0``, ``rocm:1``, ``neuron:nc3``) from the trace's normalized device
    facts (trace_facts: the device's name and memory; a Neuron device's instance type)."""
    if device.startswith("neuron"):
        instance = next((m.group(1) for t in trace_facts.instance_types(trace) if (m := _INSTANCE.search(t))), None)
        return DevicePeak(device, instance, peak_for(instance) if instance else None)
    # The parser matched ids numbered apart from their listing (ROCm's rocm:2 listed as 0) to their device.
    found = trace_facts.devices(trace).get(device)
    if found is None or not found.name:
        return DevicePeak(device, None, None)
    return DevicePeak(device, found.name, peak_for(found.name, found.memory_bytes))
