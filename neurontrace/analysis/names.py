"""Every name pattern that decides what an event *is*, declared once (the analyses keep none of their own).

Each table is a tuple of ``(pattern, origin)`` entries: a regular expression over event names (kernel,
runtime call, op, annotation or Python frame) and the backend/library the names come from. A table
compiles to one regular expression (:func:`_any`); a table of labels is tried in order and the first
matching label wins. Every entry is tested against real names taken from the corpus
(tests/test_names.py) or, where the corpus has none, against the name as its library writes it.
Extend here, never inside an analysis.
"""

from __future__ import annotations

import re

Entries = tuple[tuple[str, str], ...]


def _any(entries: Entries, flags: int = 0) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p, _ in entries), flags)


# -- device work that is communication, whatever category the backend recorded -------------------------
COLLECTIVE_KERNEL_ENTRIES: Entries = (
    (r"^nccl|ncclKernel|ncclDevKernel", "NVIDIA NCCL kernels (RCCL keeps the nccl names on ROCm)"),
    (r"^rccl|Rccl", "AMD RCCL kernels"),
    (r"^(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|AllToAll|AlltoAll)_", ("RCCL device "
     "functions named by their collective (AllReduce_Sum_f32_RING_LL ...)")),
    (r"^hccl", "Habana/MTIA HCCL collective ops"),
    (r"^c10d::", "PyTorch c10d collective ops recorded on the device (MTIA)"),
    (r"multimem_(one_shot_)?(all_reduce|all_gather|reduce)|(one|two)_shot_all_reduce|symm_mem",
     "PyTorch symmetric memory (torch.distributed._symmetric_memory kernels, CUDA and Triton)"),
    (r"cross_device_reduce_|custom_?all_?reduce|CustomAllReduce", "vLLM / SGLang custom all-reduce"),
    (r"(oneShot|twoShot)AllReduce|allReduceKernel|lamport", "TensorRT-LLM custom all-reduce"),
    (r"\bnvshmemi?_", "NVSHMEM device-initiated communication (nvshmem_*/nvshmemi_* kernels)"),
    (r"\bmscclpp::|^mscclpp|mscclKernel", ("MSCCL / MSCCL++ kernels (microsoft/mscclpp src/ext/collectives: "
     "mscclpp::collective::allreduceNvls, allgatherFullmesh ...; mscclpp::executionKernel)")),
    # DeepEP (deepseek-ai/DeepEP csrc/kernels/intranode.cu, internode.cu, internode_ll.cu: namespace
    # deep_ep::{intranode,internode,internode_ll} kernels notify_dispatch, cached_notify_dispatch, dispatch,
    # cached_notify_combine, combine, barrier; newer releases add deep_ep::legacy:: and the JIT kernels
    # deep_ep::elastic::dispatch_impl / combine_impl / hybrid_*_impl / barrier_impl / pp_send_impl ...). Not
    # deep_ep::layout::get_dispatch_layout, which computes the routing layout locally.
    (r"\bdeep_ep::(?!layout::)", "DeepEP expert-parallel dispatch/combine kernels"),
    (r"\bmori::moe::|\bEp(Dispatch|Combine)\w*Kernel", ("AMD MORI expert-parallel kernels (ROCm/mori "
     "src/ops/dispatch_combine: mori::moe::EpDispatchInterNodeNormalKernel, EpCombine...Kernel)")),
    (r"\b(allreduce|reduce_scatter|allgatherv)_kernel_(vec32|scalar32|scalar64)\b", ("UCC CUDA NVLS kernels "
     "(openucx/ucc src/components/tl/cuda/kernels: allreduce_kernel_vec32, reduce_scatter_kernel_scalar64 ...)")),
    (r"^(allreduce|alltoallv)_kernel_|_monolithic_kernel_", ("oneCCL Level Zero kernels (uxlfoundation/oneCCL "
     "src/kernels/kernels.cl: allreduce_kernel_<dtype>_<op>, alltoallv_kernel_<n>_<dtype>_custom, "
     "reduce_monolithic_kernel_<n>_ ...)")),
    ((r"^Hccl(AllReduce|Broadcast|AllGather|ReduceScatter|Reduce|AlltoAllV?C?|Barrier|Scatter|Send|Recv"
      r"|BatchSendRecv)\b"), ("Huawei Ascend HCCL collectives (CANN hccl.h: HcclAllReduce, HcclAlltoAll ...; the "
                            "names Ascend's msprof/mspti hooks in libhccl)")),
)
# Device annotations (gpu_user_annotation: the GPU projection of record_function ranges) whose kernels are
# expert-parallel communication whatever their names say: MoE dispatchers wrap their all-to-all in ranges
# named for the phase (DeepEP's Buffer.dispatch / Buffer.combine, Megatron-LM's and SGLang's token
# dispatchers "dispatch" / "combine", torch.distributed "all_to_all").
COMMUNICATION_CONTEXT_ENTRIES: Entries = (
    (r"^(moe_|ep_|deepep_|deep_ep\.)?(dispatch|combine)(_(a2a|all2all|alltoall|tokens|preprocess))?$",
     "MoE token dispatcher ranges (dispatch / combine)"),
    (r"all_?to_?all|\ba2a\b", "all-to-all ranges"),
)
COMMUNICATION_CONTEXT = _any(COMMUNICATION_CONTEXT_ENTRIES, re.IGNORECASE)
COLLECTIVE_KERNEL = _any(COLLECTIVE_KERNEL_ENTRIES)

# Host-side collectives that are the communication itself (no device kernel runs them): the CPU device's
# collectives on CPU-only traces.
# (NCCL's host `nccl:all_reduce` range only enqueues a kernel: not listed.)
HOST_COLLECTIVE_ENTRIES: Entries = (
    (r"^gloo:", "PyTorch Gloo backend record_function ranges (gloo:all_reduce, gloo:broadcast ...)"),
    (r"^mpi:", "PyTorch MPI backend ranges"),
    (r"^ucc:", "PyTorch UCC backend ranges"),
)
HOST_COLLECTIVE = _any(HOST_COLLECTIVE_ENTRIES)

# -- device events that are copies or waits, not compute --------------------------------------------------
DEVICE_COPY_ENTRIES: Entries = (
    (r"^dma_request$", "MTIA ccp DMA requests (mtia_ccp_events)"),
)
DEVICE_COPY = _any(DEVICE_COPY_ENTRIES)
DEVICE_WAIT_ENTRIES: Entries = (
    (r"^event_wait$|^event_record$", "MTIA ccp stream waits and event records (mtia_ccp_events)"),
)
DEVICE_WAIT = _any(DEVICE_WAIT_ENTRIES)
# Copy direction words in names or args (Kineto memcpy names, MTIA dma args).
DIRECTION_WORDS = {"HtoD": "h2d", "DtoH": "d2h", "DtoD": "d2d", "PtoP": "p2p", "HtoH": "h2h",
                   "HOST_TO_DEVICE": "h2d", "DEVICE_TO_HOST": "d2h", "DEVICE_TO_DEVICE": "d2d"}
DIRECTION = re.compile(r"\b(" + "|".join(DIRECTION_WORDS) + r")\b")

# -- compile and load (phases, host_overhead.compile / .load) ---------------------------------------------
COMPILE_ENTRIES: Entries = (
    # Not "Torch-Compiled Region", "TorchDynamo Cache Lookup" or "CompiledFunction": those ranges run already
    # compiled code (and its guards) on every call.
    (r" \(dynamo_timed\)$", ("torch.compile's own compile phases: every dynamo_timed range is a record_function "
                             "named `<phase> (dynamo_timed)` (_compile.compile_inner, compile_fx_inner, ...)")),
    (r"^(dynamo|entire_frame_compile|backend_compile|inductor_compile|code_gen|compile_file|compile_attempt_\d+)$",
     "the same phases under their chromium-event names (torch 2.5+ records both; `dynamo` encloses a compile)"),
    (r"torch/_dynamo/(convert_frame|symbolic_convert|output_graph)\.py", "TorchDynamo tracing frames"),
    (r"torch/_inductor/(compile_fx|graph|codecache|async_compile)\.py|\bcompile_fx\b", "Inductor"),
    # AOTAutograd's compile-time entry points; its runtime wrappers (`aot_autograd.py(...): forward`,
    # _aot_autograd/runtime_wrappers.py) run on every call of the compiled function.
    ((r"torch/_functorch/(aot_autograd|_aot_autograd/\w+)\.py\(\d+\): (create_aot_dispatcher_function|"
      r"_create_aot_dispatcher_function|aot_module_simplified|aot_function|aot_dispatch_\w+|aot_stage\w+|"
      r"aot_export\w*|run_functionalized_fw_and_collect_metadata|aot_compile_joint_with_descriptors|"
      r"prepare_aot_module_simplified|_aot_export\w*)$"), "AOTAutograd compile-time frames"),
    (r"triton/compiler", "Triton JIT compiler frames"),
    (r"neuronx[-_]cc|neuron_cc|libneuronxla.*compile", "AWS Neuron compiler"),
    (r"nki\.jit", "Neuron NKI JIT"),
    (r"xla_compile|XlaCompile", "XLA compilation"),
)
COMPILE = _any(COMPILE_ENTRIES, re.IGNORECASE)
# Names that match COMPILE's words but only *ask* whether compilation is happening.
NOT_COMPILE_ENTRIES: Entries = (
    (r"is_torchdynamo_compiling|is_dynamo_compiling|is_compiling|_is_compiled",
     "transformers / torch helpers that test for compilation (torch/cuda/__init__.py _is_compiled)"),
    ((r"torch/_(inductor|functorch)/.*\.py\(\d+\): (__call__|forward|backward|run|runtime_wrapper|inner_fn|"
      r"call_func_at_runtime_with_args|_fn|wrapper|call|g)$"),
     "the compiled function's runtime wrappers (CompiledFxGraph.__call__, runtime_wrappers.py): they run it"),
)
NOT_COMPILE = _any(NOT_COMPILE_ENTRIES)
# -- torch.compile's runtime: the compiled code running, never compiling (analysis/compile_runtime.py) --------
# One range per call of a compiled frame's code: "Torch-Compiled Region: F/N" (the bare name before torch 2.5).
COMPILED_REGION = re.compile(r"^Torch-Compiled Region(?:: (?P<id>.+))?$")
# Dynamo's guard evaluation before each call of a compiled frame: host overhead of the compiled code.
GUARD_CHECK = re.compile(r"^TorchDynamo Cache Lookup$")
# Inductor running one compiled graph (its hash names the FX graph cache entry).
COMPILED_GRAPH_CALL = re.compile(r"^## Call CompiledFxGraph (?P<hash>\S+) ##$")
# AOTAutograd's autograd.Function around a compiled graph: its forward and its backward.
COMPILED_AUTOGRAD = re.compile(r"^CompiledFunction(?P<backward>Backward)?$")
# Dynamo's Python entry around a compiled call (guards, the region, its wrappers): the call's whole cost.
DYNAMO_ENTRY = re.compile(r"torch/_dynamo/eval_frame\.py\(\d+\): (compile_wrapper|_fn)$")
# The function Dynamo makes for the code after a graph break: torch_dynamo_resume_in_<fn>_at_<line>.
RESUME_FRAME = re.compile(r"torch_dynamo_resume_in_(?P<fn>\w+?)_at_(?P<line>\d+)$")
# A Python frame as torch.profiler's Python tracer names it: "file(line): function".
PYTHON_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<function>.+)$")
# Python frames that are not the user's code (torch, the standard library's builtins).
NOT_USER_FRAME = re.compile(r"^<built-in|(^|/)torch/|^<frozen")
LOAD_ENTRIES: Entries = (
    (r"nrt_load|nrt_init|neff_load|load_neff|NeffLoad", "Neuron runtime NEFF loading"),
    (r"cuModuleLoad|Runtime Triggered Module Loading", "CUDA module loading (CUPTI lazy-loading range)"),
    (r"hipModuleLoad", "ROCm module loading"),
    (r"model_load", "generic model loading annotations"),
)
LOAD = _any(LOAD_ENTRIES, re.IGNORECASE)
# Loading a compiled artifact from a cache (time to first step: cache load, not compile); nested in compile ranges.
CACHE_LOAD_ENTRIES: Entries = (
    *LOAD_ENTRIES,
    (r"AOTAutogradCache\.\w*load|FxGraphCache\.\w*load|PyCodeCache\.load_by_key_path|TritonBundler\.read_and_emit",
     "torch.compile's cache loads (dynamo_timed phases of an FX graph / AOTAutograd cache hit)"),
)
CACHE_LOAD = _any(CACHE_LOAD_ENTRIES, re.IGNORECASE)

# -- start-up: context creation (host_overhead.startup; the startup_overhead finding) ----------------------
STARTUP_ENTRIES: Entries = (
    (r"^cuInit$|^cuDevicePrimaryCtxRetain$|^cuCtxCreate", "CUDA driver context creation"),
    (r"^hipInit$|^hipCtxCreate$|^hipDevicePrimaryCtxRetain$", "ROCm context creation"),
)
STARTUP = _any(STARTUP_ENTRIES)
# CUDA runtime/driver and HIP API calls, the calls whose first use creates a context or loads modules.
DEVICE_API = re.compile(r"^(cuda|hip|cu)[A-Z]")
# Such calls (other than synchronizing calls) longer than this are start-up: the first CUDA/HIP
# call creates the context and the first launch of a module loads it (seconds in real traces: cudaFree
# 5.2 s, cudaDeviceGetStreamPriorityRange 24.6 s, a first cudaLaunchKernel 4.2 s); no steady-state launch,
# allocation or query takes this long.
STARTUP_CALL_NS = 20_000_000

# -- host runtime calls (host_overhead.launch / .sync) -----------------------------------------------------
SYNC_ENTRIES: Entries = (
    (r"(cuda|hip|cu|mtia)?(Device|Stream|Event|Ctx)Synchronize", "CUDA/ROCm/driver synchronize calls"),
    (r"^synchronize(Stream)?$|^synchronize$", "MTIA runtime synchronize / synchronizeStream"),
    (r"^(cuda|hip)Memcpy(WithStream|2D|3D|ToSymbol|FromSymbol|Peer)?$", ("blocking copies (CUDA and their "
     "ROCm twins, hipMemcpyWithStream included)")),
    (r"^cuMemcpy[DH]to[DH](_v2)?$", "CUDA driver blocking copies"),
    (r"^(cuda|hip)EventQuery$|^(cuda|hip)StreamQuery$", "stream/event polls (a host spinning on the device)"),
    (r"nrt_wait|nrt_sync", "Neuron runtime waits"),
    (r"^aten::_local_scalar_dense$|^aten::item$", "PyTorch ops that read a device value on the host"),
)
SYNC = _any(SYNC_ENTRIES)
# The calls that block the host until device work is done (the critical path's sync edges, analysis/depgraph.py).
DEVICE_SYNC_ENTRIES: Entries = (
    (r"(cuda|hip|cu|mtia)?(Device|Stream|Event|Ctx)Synchronize", "CUDA/ROCm/driver synchronize calls"),
    (r"^synchronize(Stream)?$", "MTIA runtime synchronize / synchronizeStream"),
    (r"nrt_wait|nrt_sync", "Neuron runtime waits"),
)
DEVICE_SYNC = _any(DEVICE_SYNC_ENTRIES)
# PyTorch c10d ops: on the caller's thread they queue a collective that the backend runs on its own thread.
C10D_OP_ENTRIES: Entries = (
    (r"^c10d::", "PyTorch c10d ops (c10d::allreduce_, c10d::allgather_ ...; gloo runs them on a worker thread)"),
)
C10D_OP = _any(C10D_OP_ENTRIES)
LAUNCH_ENTRIES: Entries = (
    (r"Launch|^cuLaunch|^hipModuleLaunch|^hipExtModuleLaunch", "kernel launches (CUDA runtime/driver, ROCm)"),
    (r"nrt_execute", "Neuron runtime execution"),
    (r"Memcpy.*Async|Memset.*Async|enqueueCommand", "asynchronous copies / memsets (CUDA, ROCm, MTIA)"),
    (r"nrt_tensor_(write|read)", "Neuron tensor transfers"),
    (r"^(cuda|hip)StreamWaitEvent$", "cross-stream waits: enqueued, the host does not block"),
)
LAUNCH = _any(LAUNCH_ENTRIES)
# Host calls that put work on a device's queue (a kernel, a graph, an asynchronous copy or memset): a trace
# holding these but no device event did not record the device (analysis/device_activity.py).
DEVICE_LAUNCH_ENTRIES: Entries = (
    (r"^(cuda|cu|hip)\w*(Launch|MemcpyAsync|MemcpyHtoDAsync|MemcpyDtoHAsync|Memset\w*Async)",
     ("CUDA runtime/driver and HIP launches and asynchronous copies (cudaLaunchKernel, cuLaunchKernel, "
      "hipExtModuleLaunchKernel, cudaGraphLaunch, cudaMemcpyAsync ...)")),
)
DEVICE_LAUNCH = _any(DEVICE_LAUNCH_ENTRIES)
GRAPH_LAUNCH_ENTRIES: Entries = (
    (r"^(cuda|hip)GraphLaunch|^cuGraphLaunch", "CUDA / HIP graph replay"),
)
GRAPH_LAUNCH = _any(GRAPH_LAUNCH_ENTRIES)

# -- input pipeline (host_overhead.input_pipeline; the input_bound finding) --------------------------------
INPUT_PIPELINE_ENTRIES: Entries = (
    (r"DataLoader|_MultiProcessingDataLoaderIter|_SingleProcessDataLoaderIter",
     "torch.utils.data (enumerate(DataLoader)#..., __next__ frames)"),
    (r"torch/utils/data/|\bcollate\b|default_collate", "torch.utils.data frames and collate functions"),
)
INPUT_PIPELINE = _any(INPUT_PIPELINE_ENTRIES)

# -- training phases (phases.split: analysis/phase_split.py) ------------------------------------------------
OPTIMIZER_ENTRIES: Entries = (
    (r"^Optimizer\.(step|zero_grad)#", ("torch.optim's record_function ranges (Optimizer.step#Adam.step, "
                                         "Optimizer.zero_grad#Adam.zero_grad; torch/optim/optimizer.py)")),
)
OPTIMIZER = _any(OPTIMIZER_ENTRIES)
BACKWARD_ENTRIES: Entries = (
    (r"^autograd::engine::evaluate_function: ", "the autograd engine's per-node ranges (torch/csrc/autograd/engine.cpp)"),
    (r"^torch/_tensor\.py\(\d+\): backward$|^torch/autograd/__init__\.py\(\d+\): backward$",
     "Tensor.backward / torch.autograd.backward Python frames"),
    (r"^## backward ##$", "backward ranges as the corpus's V100 DDP trace names them"),
)
BACKWARD = _any(BACKWARD_ENTRIES)
FORWARD_ENTRIES: Entries = (
    (r"^## forward ##$|^DistributedDataParallel\.forward$", "forward ranges (the corpus's V100 DDP trace)"),
)
FORWARD = _any(FORWARD_ENTRIES)

# -- neurontrace's own capture frames: never the user's line (docs/capture.md) ------------------------------
OWN_FRAME_ENTRIES: Entries = (
    (r"(^|/)neurontrace/", "neurontrace's capture code (capture.step(), the schedule)"),
    (r"torch/profiler/", "torch.profiler's own step() and trace-handling frames"),
)
OWN_FRAME = _any(OWN_FRAME_ENTRIES)
# Benchmarking harnesses that wrap the model: the frame that called the model, never the line responsible.
HARNESS_FRAME_ENTRIES: Entries = (
    (r"(^|/)pytest_benchmark/", "pytest-benchmark's fixture and timers"),
    (r"torch/utils/benchmark/", "torch.utils.benchmark.Timer"),
    (r"triton/testing\.py", "triton.testing.do_bench"),
    (r"(^|/)timeit\.py$", "the standard library's timeit"),
)
HARNESS_FRAME = _any(HARNESS_FRAME_ENTRIES)
# Python frames in which the host sleeps or blocks (host_overhead.wait): not work the device waits for.
HOST_WAIT_ENTRIES: Entries = (
    (r"^<built-in function sleep>$|^time\.sleep$", "time.sleep as torch's Python tracer records it"),
    ((r"^threading\.py\(\d+\): wait$|^<method 'acquire' of '_thread\.(lock|RLock)' objects>$"
      r"|^<built-in method acquire of _thread\.lock"),
     "threading waits (Event.wait, Condition.wait, Lock.acquire)"),
    (r"^<built-in function (select|poll|epoll)>$|^selectors\.py\(\d+\): select$", "select / poll waits"),
)
HOST_WAIT = _any(HOST_WAIT_ENTRIES)

# -- device work classes (compute.<class>), first match wins ------------------------------------------------
KERNEL_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("attention", re.compile(
        r"flash|attention|attn_fwd|attn_bwd|fmha|sdpa|\bmha|paged_attention"  # CUDA flash/SDPA, ROCm aiter
        r"|ck_.*(attn|fmha|attention)|ck_tile.*fmha",  # ROCm Composable Kernel attention
        re.IGNORECASE)),
    ("gemm", re.compile(
        r"gemm|matmul|mm_|_mm\b|cublas|cutlass|wgmma|xmma|addmm|bmm"  # CUDA cuBLAS/CUTLASS, PyTorch
        r"|^nvjet_"  # cuBLAS 12.8+'s own Hopper/Blackwell GEMM kernels (nvjet_tst_..., nvjet_hsh_...)
        r"|^Cijk_"  # ROCm Tensile (hipBLAS/rocBLAS)
        r"|^fc$|^fc_",  # MTIA fully-connected kernels
        re.IGNORECASE)),
    # Normalization before conv: cuDNN's batch norm kernels (cudnn::bn_fw_tr_1C11_..., cudnn::bn_bw_...) are no
    # convolution; ATen's batch/layer norm kernels and fused RMSNorm (aiter add_rmsnorm_quant_kernel) are no reduce.
    ("norm", re.compile(r"cudnn::bn_|batch_?norm|layer_?norm|rms_?norm|group_?norm|instance_?norm", re.IGNORECASE)),
    ("conv", re.compile(r"conv|winograd|implicit_gemm|cudnn", re.IGNORECASE)),  # cuDNN, MIOpen
    ("triton", re.compile(r"^triton_")),  # Inductor-generated Triton kernels
    ("reduce", re.compile(r"reduce|softmax|norm|sum_|mean|argmax|topk", re.IGNORECASE)),  # ATen reductions
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|copy|fill|add|mul|relu|gelu|silu",
                               re.IGNORECASE)),  # ATen elementwise kernels
)

# -- the precision a kernel computes in (analysis/ops.py), from its name -------------------------------------
# cuBLAS/CUTLASS/cuDNN names spell their types (sm90_xmma_gemm_bf16bf16_bf16f32, volta_h884gemm, ampere_sgemm,
# cutlass_80_tensorop_s1688gemm: fp32 data on the TF32 m16n8k8 MMA, sm80_xmma_fprop_implicit_gemm_tf32f32),
# ATen and flash kernels their template types (c10::Half, cutlass::bfloat16_t), rocBLAS's Tensile kernels their
# data type after the transposes (Cijk_Alik_Bljk_HHS_: half, _BBS_/_B_: bf16, _SB_: single, _DB_: double).
# First match wins; a name that says nothing leaves the precision to the op that launched the kernel.
_TENSILE = r"^Cijk_[A-Za-z]+_[A-Za-z]+_"
KERNEL_PRECISIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f6f4", re.IGNORECASE)),
    ("bf16", re.compile(r"bf16|bfloat16|" + _TENSILE + "B", re.IGNORECASE)),
    ("fp16", re.compile(r"fp16|(?<![a-z0-9])f16|half|_h\d{3,5}gemm|hgemm|" + _TENSILE + "H", re.IGNORECASE)),
    ("tf32", re.compile(r"tf32|xf32|tensorop_s1688(gemm|fprop|dgrad|wgrad)", re.IGNORECASE)),
    ("fp64", re.compile(r"dgemm|fp64|_d\d{3,4}gemm|" + _TENSILE + "D")),
    ("fp32", re.compile(r"sgemm|" + _TENSILE + "S")),
)
# Ops that move or convert data and do no arithmetic of their own: a kernel one of them launches inside
# another op (autocast's casts inside aten::linear, a .contiguous() inside a matmul) is not that op's math.
CAST_OPS = frozenset({
    "aten::copy_", "aten::_to_copy", "aten::to", "aten::_copy_from", "aten::_copy_from_and_resize", "aten::clone",
    "aten::contiguous", "aten::fill_", "aten::zero_", "aten::zeros", "aten::zeros_like", "aten::empty_like",
})

# -- collectives (collectives.<op>), from the kernel name or its `Collective name` arg ---------------------
COLLECTIVE_OPS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # Expert-parallel kernels first: DeepEP's combine_reduce_epilogue_impl is part of the all-to-all combine.
    ("all_to_all", re.compile(r"deep_ep::\S*(dispatch|combine)|Ep(Dispatch|Combine)")),
    ("all_reduce", re.compile(r"all_?reduce|cross_device_reduce", re.IGNORECASE)),
    ("all_gather", re.compile(r"all_?gather", re.IGNORECASE)),
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.IGNORECASE)),
    # NCCL/RCCL ncclDevKernel_Reduce_*, Kineto `Collective name` "reduce", gloo:reduce (after the two above).
    ("reduce", re.compile(r"(^|[_:])reduce($|_)", re.IGNORECASE)),
    # all_to_all / alltoallv ops, and MoE dispatch / combine (kernels, or the range they ran in).
    ("all_to_all", re.compile(r"all_?to_?all|dispatch|combine", re.IGNORECASE)),
    ("broadcast", re.compile(r"broadcast", re.IGNORECASE)),
    ("send_recv", re.compile(r"send|recv|sendrecv|permute|put_signal|wait_signal", re.IGNORECASE)),
    ("barrier", re.compile(r"barrier", re.IGNORECASE)),
)

# -- Neuron device tracks and DMA queues (compute.<engine>, data_movement.<kind>) --------------------------
# NeuronCore engine tracks: the parsers' names and the hardware's (PE array, ACT, POOL, DVE, SP).
NEURON_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync", "pe", "act", "pool", "dve", "sp", "engine")
NEURON_DMA_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("spill", re.compile(r"spill", re.IGNORECASE)),  # spill/reload queues
    ("dma_weights", re.compile(r"weight", re.IGNORECASE)),  # weight-load queues
)

# -- host fallback (analysis/fallback.py) --------------------------------------------------------------------
FALLBACK_LOG = re.compile(r"Operator\s+'(?P<op>[^']+)'\s+(?:executed via CPU fallback|fell back to CPU)")
# .item()-like reads of a device value: a host round trip, not CPU compute (fallback evidence host_scalar_read).
HOST_SCALAR_READ = re.compile(r"^(aten::)?(item|_local_scalar_dense)$")
# Host ops that accompany any device<->host round trip without being computation themselves.
NOT_FALLBACK_SUSPECT = re.compile(
    r"^aten::(to|_to_copy|copy_|item|_local_scalar_dense|empty.*|detach.*|view.*|as_strided|resolve_.*|lift.*"
    r"|alias|t|transpose|permute|contiguous|clone|numpy_T|size|stride|is_nonzero|select|slice|unsqueeze"
    r"|squeeze|reshape|expand|result_type|set_|record_stream)$"
)


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


def kernel_precision(name: str) -> str | None:
    """The dtype a kernel computes in, as its name spells it (KERNEL_PRECISIONS); None when it does not say."""
    label = classify(name, KERNEL_PRECISIONS, "")
    return label or None


def device_category(category: str, name: str) -> str:
    """The category a device event counts as: the parser's, unless its name says it is a collective,
    a copy or a wait (ordinary-looking kernels that communicate; MTIA DMA and stream waits)."""
    if category in ("compute", "collective") and COLLECTIVE_KERNEL.search(name):
        return "collective"
    if category == "compute" and DEVICE_COPY.search(name):
        return "dma"
    if category == "compute" and DEVICE_WAIT.search(name):
        return "sync_wait"
    return category


def is_compile(name: str) -> bool:
    return bool(COMPILE.search(name)) and not NOT_COMPILE.search(name)


def host_detail(name: str, category: str) -> str:
    """host_overhead.<detail> of one host work event."""
    if category == "compile" or is_compile(name):
        return "compile"
    if category == "load" or LOAD.search(name):
        return "load"
    if GUARD_CHECK.search(name):
        return "guards"
    if STARTUP.search(name):
        return "startup"
    if SYNC.search(name):
        return "sync"
    if INPUT_PIPELINE.search(name):
        return "input_pipeline"
    if category == "python" and OWN_FRAME.search(name):
        return "profiler"
    if category == "python" and HOST_WAIT.search(name):
        return "wait"
    if category in ("runtime", "driver"):
        return "launch" if LAUNCH.search(name) or category == "driver" else "runtime"
    if category == "transfer":  # host-side copies to/from a device (Neuron tensor reads/writes, aten::to to it)
        return "transfer"
    if category == "python":
        return "python"
    return "dispatch"
