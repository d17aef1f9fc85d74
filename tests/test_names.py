"""The declared vocabulary (analysis/names.py): every entry matches real names, and names mean what they say.

``CORPUS`` names are taken from the real traces of ../shared/corpus/kineto (the file is named and, when the
corpus is present, the name is checked to occur in it). ``LIBRARY`` names have no trace in the corpus; they
are the kernel or function names as the library named in the entry's comment writes them.
"""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path

import pytest

from neurontrace.analysis import names
from tests.conftest import corpus_root

HTA = "HolisticTraceAnalysis/tests/data"
MTIA = f"{HTA}/mtia_inference_trace/mtia_inference_rank_0.json.gz"
AMD = f"{HTA}/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
SYNC_TRACE = f"{HTA}/critical_path/cuda_event_sync/event_sync_trace.json.gz"
NCCL = f"{HTA}/nccl_parser_config/nccl_data.json.gz"
QWEN = "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
SGLANG = "TraceLens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
NORM = "TraceLens/tests/traces/perf_model/normalization/normalization_layer_test.json.gz"
MI300 = "TraceLens/tests/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz"
RESNET = "kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"

# (table, entry index) -> [(name, corpus file or None for a library name)]
EXAMPLES: dict[tuple[str, int], list[tuple[str, str | None]]] = {
    ("COLLECTIVE_KERNEL", 0): [("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", NCCL)],
    ("COLLECTIVE_KERNEL", 1): [("rccl_AllReduce_Sum_bf16", None)],
    ("COLLECTIVE_KERNEL", 2): [("AllReduce_Sum_f32_RING_LL", None)],
    ("COLLECTIVE_KERNEL", 3): [("hccl_all_reduce", None)],
    ("COLLECTIVE_KERNEL", 4): [("c10d::allreduce_", NCCL)],
    ("COLLECTIVE_KERNEL", 5): [("void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 8, 8>()", None),
                               ("two_shot_all_reduce_kernel", None), ("one_shot_all_reduce_kernel", None)],
    ("COLLECTIVE_KERNEL", 6): [("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)", None)],
    ("COLLECTIVE_KERNEL", 7): [("oneShotAllReduceKernel", None)],
    ("COLLECTIVE_KERNEL", 8): [("nvshmemi_transfer_rma_nbi", None)],
    ("COLLECTIVE_KERNEL", 9): [("mscclKernel_Sum_float_Simple_false", None),
                               ("void mscclpp::collective::allreduceNvls<float>(...)", None),
                               ("void mscclpp::executionKernel<__nv_bfloat16>(...)", None)],
    ("COLLECTIVE_KERNEL", 10): [("void deep_ep::intranode::notify_dispatch<8>(...)", None),
                                ("void deep_ep::intranode::dispatch<8, 768, 8192>(...)", None),
                                ("void deep_ep::internode_ll::combine<false, 7168>(...)", None),
                                ("void deep_ep::elastic::dispatch_impl<...>(...)", None)],
    ("COLLECTIVE_KERNEL", 11): [("void mori::moe::EpDispatchInterNodeNormalKernel<__hip_bfloat16>(...)", None),
                                ("EpCombineIntraNodeKernel", None)],
    ("COLLECTIVE_KERNEL", 12): [("void allreduce_kernel_vec32<NvlsFp32Ops>(...)", None),
                                ("void reduce_scatter_kernel_scalar64<NvlsBf16Ops>(...)", None)],
    ("COLLECTIVE_KERNEL", 13): [("allreduce_kernel_bf16_sum", None), ("alltoallv_kernel_8_float_custom", None),
                                ("reduce_monolithic_kernel_4_float_sum", None)],
    ("COLLECTIVE_KERNEL", 14): [("HcclAllReduce", None), ("HcclAlltoAllV", None)],
    ("COMMUNICATION_CONTEXT", 0): [("dispatch", None), ("combine", None), ("moe_dispatch", None)],
    ("COMMUNICATION_CONTEXT", 1): [("nccl:all_to_all", f"{HTA}/rank_unavailable/rank_not_found.json.gz"),
                                   ("a2a", None)],
    ("DEVICE_LAUNCH", 0): [("cudaLaunchKernel", SYNC_TRACE), ("hipExtModuleLaunchKernel", AMD),
                           ("cudaMemcpyAsync", SYNC_TRACE), ("hipGraphLaunch", SGLANG), ("cuLaunchKernel", None)],
    ("HARNESS_FRAME", 0): [("site-packages/pytest_benchmark/fixture.py", None)],
    ("HARNESS_FRAME", 1): [("torch/utils/benchmark/utils/timer.py", None)],
    ("HARNESS_FRAME", 2): [("triton/testing.py", None)],
    ("HARNESS_FRAME", 3): [("timeit.py", None)],
    ("HOST_WAIT", 0): [("<built-in function sleep>", None)],  # as torch 2.13's tracer recorded it in tests/verdict_runs.py
    ("HOST_WAIT", 1): [("threading.py(320): wait", None), ("<method 'acquire' of '_thread.lock' objects>", None)],
    ("HOST_WAIT", 2): [("<built-in function select>", None), ("selectors.py(415): select", None)],
    ("OPTIMIZER", 0): [("Optimizer.step#SGD.step", AMD), ("Optimizer.zero_grad#Adam.zero_grad", None)],
    ("BACKWARD", 0): [("autograd::engine::evaluate_function: MseLossBackward0", AMD)],
    ("BACKWARD", 1): [("torch/_tensor.py(566): backward", None), ("torch/autograd/__init__.py(255): backward", None)],
    ("BACKWARD", 2): [("## backward ##", f"{HTA}/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")],
    ("FORWARD", 0): [("## forward ##", f"{HTA}/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"),
                     ("DistributedDataParallel.forward",
                      f"{HTA}/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")],
    ("HOST_COLLECTIVE", 0): [("gloo:all_reduce", f"{HTA}/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")],
    ("HOST_COLLECTIVE", 1): [("mpi:all_reduce", None)],
    ("HOST_COLLECTIVE", 2): [("ucc:all_reduce", None)],
    ("DEVICE_COPY", 0): [("dma_request", MTIA)],
    ("DEVICE_WAIT", 0): [("event_wait", MTIA), ("event_record", MTIA)],
    # torch 2.13 CPU names (a torch.compile run, tests/compile_scenarios.py)
    ("COMPILE", 0): [("_compile.compile_inner (dynamo_timed)", None), ("compile_fx_inner (dynamo_timed)", None)],
    ("COMPILE", 1): [("dynamo", None), ("entire_frame_compile", None), ("compile_attempt_0", None)],
    ("COMPILE", 2): [("torch/_dynamo/convert_frame.py(1012): _compile", None)],
    ("COMPILE", 3): [("torch/_inductor/compile_fx.py(1500): compile_fx", None)],
    ("COMPILE", 4): [("torch/_functorch/aot_autograd.py(1100): aot_module_simplified", None)],
    ("COMPILE", 5): [("/sgl-workspace/triton-custom/python/triton/compiler/compiler.py(376): __init__", SGLANG)],
    ("COMPILE", 6): [("neuronx-cc compile", None)],
    ("COMPILE", 7): [("nki.jit", None)],
    ("COMPILE", 8): [("XlaCompile", None)],
    ("NOT_COMPILE", 0): [("transformers/utils/import_utils.py(793): is_torchdynamo_compiling", QWEN),
                         ("torch/cuda/__init__.py(154): _is_compiled", SGLANG)],
    ("NOT_COMPILE", 1): [("torch/_functorch/aot_autograd.py(1269): forward", None),
                         ("torch/_functorch/_aot_autograd/runtime_wrappers.py(468): __call__", None)],
    ("CACHE_LOAD", 4): [("AOTAutogradCache.inductor_load (dynamo_timed)", None),
                        ("PyCodeCache.load_by_key_path (dynamo_timed)", None)],
    ("LOAD", 0): [("nrt_load", None)],
    ("LOAD", 1): [("Runtime Triggered Module Loading", None)],
    ("LOAD", 2): [("hipModuleLoadData", NORM)],
    ("LOAD", 3): [("model_load", None)],
    ("CACHE_LOAD", 0): [("nrt_load", None)],
    ("CACHE_LOAD", 1): [("Runtime Triggered Module Loading", None)],
    ("CACHE_LOAD", 2): [("hipModuleLoadData", NORM)],
    ("CACHE_LOAD", 3): [("model_load", None)],
    ("STARTUP", 0): [("cuDevicePrimaryCtxRetain", None)],
    ("STARTUP", 1): [("hipInit", NORM)],
    ("SYNC", 0): [("cudaStreamSynchronize", SYNC_TRACE), ("hipDeviceSynchronize", AMD)],
    ("SYNC", 1): [("synchronizeStream", MTIA)],
    ("SYNC", 2): [("hipMemcpyWithStream", AMD)],
    ("SYNC", 3): [("cuMemcpyDtoH_v2", None)],
    ("SYNC", 4): [("cudaEventQuery", f"{HTA}/trace_compare/base/base.json.gz")],
    ("SYNC", 5): [("nrt_wait", None)],
    ("SYNC", 6): [("aten::_local_scalar_dense", SYNC_TRACE), ("aten::item", SYNC_TRACE)],
    ("LAUNCH", 0): [("cudaLaunchKernel", SYNC_TRACE), ("hipExtModuleLaunchKernel", AMD)],
    ("LAUNCH", 1): [("nrt_execute", None)],
    ("LAUNCH", 2): [("cudaMemcpyAsync", SYNC_TRACE), ("enqueueCommand memcpyHtoDAsync", MTIA)],
    ("LAUNCH", 3): [("nrt_tensor_write", None)],
    ("LAUNCH", 4): [("cudaStreamWaitEvent", f"{HTA}/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz")],
    ("DEVICE_SYNC", 0): [("cudaStreamSynchronize", SYNC_TRACE), ("hipDeviceSynchronize", AMD)],
    ("DEVICE_SYNC", 1): [("synchronizeStream", MTIA)],
    ("DEVICE_SYNC", 2): [("nrt_wait", None)],
    ("C10D_OP", 0): [("c10d::allreduce_", NCCL)],
    ("GRAPH_LAUNCH", 0): [("hipGraphLaunch", SGLANG), ("cudaGraphLaunch", None)],
    ("INPUT_PIPELINE", 0): [("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", RESNET)],
    ("INPUT_PIPELINE", 1): [("torch/utils/data/_utils/collate.py(171): default_collate", None)],
    ("OWN_FRAME", 0): [("neurontrace/capture.py(121): step", None)],
    ("OWN_FRAME", 1): [("torch/profiler/profiler.py(821): step", QWEN)],
}
TABLES = {name: getattr(names, f"{name}_ENTRIES") for name in {t for t, _ in EXAMPLES}}


@cache
def _corpus_names(rel: str) -> frozenset[str]:
    root = corpus_root()
    assert root is not None
    path: Path = root / rel
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    raw = json.loads(data)
    return frozenset(str(e.get("name")) for e in raw["traceEvents"])


def test_every_entry_has_examples() -> None:
    for table, entries in TABLES.items():
        for i in range(len(entries)):
            assert EXAMPLES.get((table, i)), f"{table}[{i}] ({entries[i][1]}) has no example name"


@pytest.mark.parametrize("key", sorted(EXAMPLES), ids=lambda k: f"{k[0]}[{k[1]}]")
def test_entry_matches_its_real_names(key: tuple[str, int]) -> None:
    pattern, origin = TABLES[key[0]][key[1]]
    rx = re.compile(pattern, re.IGNORECASE if key[0] in ("COMPILE", "LOAD", "CACHE_LOAD", "COMMUNICATION_CONTEXT")
                    else 0)
    assert origin, "every entry names its backend/library"
    for name, source in EXAMPLES[key]:
        assert rx.search(name), f"{name!r} does not match {key} {pattern!r}"
        if source is not None and corpus_root() is not None:
            assert name in _corpus_names(source), f"{name!r} is not in {source}"


def test_categories_and_details_of_real_names() -> None:
    assert names.device_category("compute", "two_shot_all_reduce_kernel") == "collective"
    assert names.device_category("compute", "dma_request") == "dma"
    assert names.device_category("compute", "event_wait") == "sync_wait"
    # ATen reductions are not collectives (names from the corpus).
    assert names.device_category("compute", "void at::native::reduce_kernel<512, 1>") == "compute"
    assert names.device_category("compute", "void cublasLt::splitKreduce_kernel<32, 16>") == "compute"
    assert names.host_detail("hipMemcpyWithStream", "runtime") == "sync"
    assert names.host_detail("hipMemcpyAsync", "runtime") == "launch"
    assert names.host_detail("transformers/utils/import_utils.py(793): is_torchdynamo_compiling", "python") == "python"
    assert names.host_detail("torch/profiler/profiler.py(821): step", "python") == "profiler"
    # the AOT runtime wrapper runs the compiled function on every call: never compile
    assert names.host_detail("torch/_functorch/aot_autograd.py(1269): forward", "python") == "python"
    assert names.host_detail("_compile.compile_inner (dynamo_timed)", "framework_op") == "compile"
    assert names.kernel_class("attn_fwd") == "attention"  # ROCm Triton flash attention (mi300 corpus trace)
    assert names.kernel_class("void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16>") == "attention"
    assert names.kernel_class("ck_tile::FmhaFwdKernel") == "attention"
    assert names.kernel_class("fc") == "gemm"  # MTIA fully-connected
    assert names.kernel_class("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT16x32x512") == "gemm"
    assert names.collective_op("cross_device_reduce_2stage") == "all_reduce"
    # Expert-parallel all-to-all (DeepEP, MORI): dispatch and combine, whatever else the name says.
    assert names.device_category("compute", "void deep_ep::intranode::dispatch<8, 768, 8192>(...)") == "collective"
    assert names.collective_op("void deep_ep::elastic::combine_reduce_epilogue_impl<...>(...)") == "all_to_all"
    assert names.collective_op("void mori::moe::EpDispatchInterNodeNormalKernel<float>(...)") == "all_to_all"
    assert names.collective_op("void deep_ep::intranode::barrier<8>(int**, int)") == "barrier"
    assert names.collective_op("HcclAlltoAllV") == "all_to_all"
    # DeepEP's routing-layout kernel computes locally: not communication.
    assert names.device_category("compute", "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(...)") == "compute"
    assert names.host_detail("<built-in function sleep>", "python") == "wait"
