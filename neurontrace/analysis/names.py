"""Every name table the analyses use, in one documented place.

Each table maps a regular expression over event names (or Python frame names) to a meaning. The
first matching entry wins. Extend here, never inside an analysis.
"""

from __future__ import annotations

import re

# -- compile and load (phases, host_overhead.compile / .load) ------------------------------------
# torch.compile / TorchDynamo / Inductor / Triton, Neuron compiler and NEFF loading, CUDA module loading.
COMPILE = re.compile(
    r"(Torch-Compiled Region|TorchDynamo|torch/_dynamo/(convert_frame|symbolic_convert|output_graph)\.py"
    r"|torch/_inductor/(compile_fx|graph|codecache|async_compile)\.py|CompiledFunction"
    r"|compile_fx|aot_autograd|torch/_functorch/aot_autograd|triton/compiler|neuronx[-_]cc"
    r"|neuron_cc|nki\.jit|libneuronxla.*compile|xla_compile|XlaCompile)",
    re.IGNORECASE,
)
LOAD = re.compile(
    r"(nrt_load|nrt_init|neff_load|load_neff|NeffLoad|cuModuleLoad|Runtime Triggered Module Loading"
    r"|hipModuleLoad|model_load)",
    re.IGNORECASE,
)

# -- host runtime calls (host_overhead.launch / .sync) ------------------------------------------
SYNC = re.compile(
    r"(Synchronize|cudaMemcpy$|cudaMemcpy\b(?!Async)|hipMemcpy$|hipMemcpy\b(?!Async)|cudaStreamWaitEvent"
    r"|cudaEventQuery|nrt_wait|nrt_sync|aten::_local_scalar_dense|aten::item$)",
)
LAUNCH = re.compile(r"(Launch|cuLaunch|hipModuleLaunch|nrt_execute|Memcpy.*Async|Memset.*Async|nrt_tensor_(write|read))")

# -- input pipeline (host_overhead.input_pipeline): data loading annotations and frames ----------
INPUT_PIPELINE = re.compile(r"(DataLoader|_MultiProcessingDataLoaderIter|_SingleProcessDataLoaderIter|collate)")

# -- device work classes (compute.<class>) -------------------------------------------------------
KERNEL_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("attention", re.compile(r"(flash|attention|fmha|sdpa|mha)", re.IGNORECASE)),
    ("gemm", re.compile(r"(gemm|matmul|mm_|_mm\b|cublas|cutlass|wgmma|xmma|addmm|bmm|Cijk_)", re.IGNORECASE)),
    ("conv", re.compile(r"(conv|winograd|implicit_gemm|cudnn)", re.IGNORECASE)),
    ("triton", re.compile(r"^triton_")),
    ("reduce", re.compile(r"(reduce|softmax|norm|sum_|mean|argmax|topk)", re.IGNORECASE)),
    ("elementwise", re.compile(r"(elementwise|vectorized|unrolled|copy|fill|add|mul|relu|gelu|silu)",
                               re.IGNORECASE)),
)

# -- collectives (collectives.<op>) --------------------------------------------------------------
COLLECTIVE_OPS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("all_reduce", re.compile(r"all_?reduce", re.IGNORECASE)),
    ("all_gather", re.compile(r"all_?gather", re.IGNORECASE)),
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.IGNORECASE)),
    # NCCL/RCCL ncclDevKernel_Reduce_*, Kineto `Collective name` "reduce", gloo:reduce (after the two above).
    ("reduce", re.compile(r"(^|[_:])reduce($|_)", re.IGNORECASE)),
    ("all_to_all", re.compile(r"all_?to_?all", re.IGNORECASE)),
    ("broadcast", re.compile(r"broadcast", re.IGNORECASE)),
    ("send_recv", re.compile(r"(send|recv|sendrecv|permute)", re.IGNORECASE)),
    ("barrier", re.compile(r"barrier", re.IGNORECASE)),
)

# Host-side collectives that *are* the communication (CPU backends run them on the host): PyTorch's
# gloo backend records `gloo:all_reduce` ... ranges on its worker threads; MPI and UCC backends
# record `mpi:` / `ucc:` ranges the same way. (NCCL's host `nccl:all_reduce` only enqueues a kernel.)
HOST_COLLECTIVE = re.compile(r"^(gloo|mpi|ucc):")

# -- TorchNeuron CPU fallback log lines (formats/neuron.md §9.3) ----------------------------------
FALLBACK_LOG = re.compile(r"Operator\s+'(?P<op>[^']+)'\s+(?:executed via CPU fallback|fell back to CPU)")


def classify(name: str, table: tuple[tuple[str, re.Pattern[str]], ...], default: str) -> str:
    for label, pattern in table:
        if pattern.search(name):
            return label
    return default


def collective_op(name: str, collective_arg: str | None = None) -> str:
    """`all_reduce`, `all_gather` ... from the kernel name or the `Collective name` arg."""
    return classify(collective_arg or name, COLLECTIVE_OPS, "other")


def kernel_class(name: str) -> str:
    return classify(name, KERNEL_CLASSES, "other")


def host_detail(name: str, category: str) -> str:
    """host_overhead.<detail> of one host work event."""
    if category == "compile" or COMPILE.search(name):
        return "compile"
    if category == "load" or LOAD.search(name):
        return "load"
    if SYNC.search(name):
        return "sync"
    if INPUT_PIPELINE.search(name):
        return "input_pipeline"
    if category in ("runtime", "driver"):
        return "launch" if LAUNCH.search(name) or category == "driver" else "runtime"
    if category == "python":
        return "python"
    return "dispatch"
