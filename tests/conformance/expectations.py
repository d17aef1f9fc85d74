"""Declared verdicts for every real trace: the corpus (../shared/corpus/kineto) and the real samples the tests make.

Each row says, for one device of one trace: the window rule that must be used, the cause shares (percent of the
window, within ``TOLERANCE`` points), the findings that must fire and those that must not, and why. Where the
numbers come from:

- compute over the window is computed independently from the raw JSON in tests/test_corpus.py
  (``test_attribution_conserves_time_and_matches_compute_union``: a textbook merge of the kernel intervals, exact
  to the ns); the six shares always sum to the window;
- compute / non-compute / not-busy over the device span agree with Holistic Trace Analysis 0.5.0 within HTA's µs
  rounding, except where bench/peers.py names the window or category difference (its output is in docs/diagnose.md);
- the findings and the window rule come from reading the trace (the ``why`` says what is in it).
"""

from __future__ import annotations

from dataclasses import dataclass

TOLERANCE = 1.0  # percentage points


@dataclass(frozen=True)
class Expect:
    base: str  # "corpus" (../shared/corpus/kineto) or "samples" (sample_traces/, made by make_samples.py)
    path: str
    device: str
    rule: str
    shares: dict[str, float]  # cause -> percent of the window (causes not listed: 0)
    must: tuple[str, ...]
    must_not: tuple[str, ...]
    why: str


HTA = "HolisticTraceAnalysis/tests/data"
TL = "TraceLens/tests/traces"

EXPECTATIONS: tuple[Expect, ...] = (
    Expect("corpus", f"{HTA}/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "rocm:2", "steps",
           {"compute": 1.2, "data_movement": 0.4, "host_overhead": 90.0, "idle": 8.5}, ("startup_overhead",),
           ("host_bound",),
           "MI250 toy training: 2 steps whose kernels finish inside them. One hipLaunchKernel takes 6.54 ms (the "
           "median launch 6.3 µs) on the first launch of its kernel: lazy module loading, start-up (69.8% of the "
           "window), not launch overhead that torch.compile / graphs would remove (issue 24, item 5)."),
    Expect("corpus", f"{HTA}/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "cpu", "steps",
           {"collectives": 85.1, "idle": 14.9}, ("exposed_collectives",), ("unexplained_idle",),
           "gloo:all_reduce ranges on two worker threads cover 85% of the one 210 ms step: CPU collectives, not "
           "'100% unexplained idle'."),
    Expect("corpus", f"{HTA}/critical_path/cuda_event_sync/event_sync_trace.json.gz", "cuda:0", "steps",
           {"compute": 1.6, "data_movement": 0.1, "host_overhead": 75.8, "idle": 22.6}, ("host_bound",), (),
           "A 3.2 ms step with a few tiny kernels; aten ops dispatching on the host fill 71.5%."),
    Expect("corpus", f"{HTA}/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz", "cuda:0",
           "activity", {"compute": 1.9, "host_overhead": 5.2, "idle": 93.0}, ("unexplained_idle",), ("host_bound",),
           "No ProfilerStep; the host records only runtime calls, so the gaps between the streams' kernels are "
           "unexplained."),
    Expect("corpus", f"{HTA}/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz", "cuda:0",
           "activity", {"data_movement": 0.1, "host_overhead": 99.5, "idle": 0.3}, ("startup_overhead",),
           ("host_bound",),
           "cudaDeviceGetStreamPriorityRange 24.6 s (context creation), cudaFree 5.2 s and a first "
           "cudaLaunchKernel 4.2 s (module loading): start-up, not launch-bound."),
    Expect("corpus", f"{HTA}/distributed_info_unavailable/distributed_info_not_found.json.gz", "cpu", "steps",
           {"compute": 29.5, "host_overhead": 7.9, "idle": 62.6}, ("unexplained_idle",), ("exposed_collectives",),
           "CPU ops only (edited file); nccl:all_to_all host ranges only enqueue NCCL work: not CPU collectives. "
           "The 8-input aten::to that nest aten::copy_ move tensors to the GPU (host_overhead.transfer, 7.8%): in "
           "every real CUDA/ROCm corpus trace such an op holds a memcpy call (15 of 15, tests/test_neuron_observed.py)."),
    Expect("corpus", f"{HTA}/large_integer_trace/rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz", "cuda:0",
           "activity", {"collectives": 25.0, "host_overhead": 50.0, "idle": 25.0}, ("exposed_collectives",), (),
           "Synthetic 2-event file: one ncclKernel_AllReduce and its host op."),
    Expect("corpus", f"{HTA}/mtia_inference_trace/mtia_inference_rank_0.json.gz", "mtia:17", "activity",
           {"compute": 90.1, "data_movement": 1.6, "host_overhead": 8.0, "idle": 0.3}, (), (),
           "877 dma_request are data movement and 339 event_wait/event_record are waits, not compute (HTA counts "
           "them as compute: 94.7%)."),
    Expect("corpus", f"{HTA}/nccl_parser_config/nccl_data.json.gz", "cuda:0", "steps",
           {"compute": 17.3, "collectives": 5.9, "data_movement": 0.3, "host_overhead": 65.1, "idle": 11.3},
           ("host_bound", "collective_outliers"), (),
           "DDP on 2 ranks: ncclKernel_AllReduce/Broadcast are collectives; aten dispatch dominates the 3 steps."),
    Expect("corpus", f"{HTA}/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "cuda:0",
           "launched_in_steps", {"compute": 97.5, "data_movement": 0.9, "host_overhead": 1.4, "idle": 0.2}, (),
           ("host_bound", "unexplained_idle"),
           "V100 DDP: the kernels launched in the 5 steps run past the last step's end, so the window follows "
           "the device; it is compute-bound."),
    Expect("corpus", f"{HTA}/rank_unavailable/rank_not_found.json.gz", "cpu", "steps",
           {"compute": 37.3, "host_overhead": 0.1, "idle": 62.6}, ("unexplained_idle",), (),
           "The same events as distributed_info_not_found (distributedInfo without a rank), but no "
           "deviceProperties: nothing says the run had a GPU, so its aten::to are not read as transfers."),
    Expect("corpus", f"{HTA}/trace_compare/base/base.json.gz", "cuda:1", "launched_in_steps",
           {"compute": 0.2, "data_movement": 0.5, "idle": 99.4}, ("unexplained_idle",), (),
           "Hand-cut excerpt: a kernel queued at the end of ProfilerStep#1010 ran 52 ms after the step ended."),
    Expect("corpus", f"{HTA}/trace_compare/test/test.json.gz", "cuda:1", "steps",
           {"compute": 0.2, "data_movement": 0.6, "host_overhead": 0.2, "idle": 99.0}, ("unexplained_idle",), (),
           "The excerpt without that late kernel: the window is the two steps."),
    Expect("corpus", f"{HTA}/trace_file_list/inference_rank_1.json.gz", "cuda:0", "activity",
           {"compute": 1.8, "host_overhead": 98.2}, ("startup_overhead",), ("host_bound", "unexplained_idle"),
           "Legacy (torch 1.8) categories, no CPU ops. The first cudaLaunchKernel takes 1.41 ms (the others 8-14 µs): "
           "its kernel's first launch, start-up (86% of the window). The gaps after it end with kernels whose "
           "launch began inside the gap: the host's time (host_overhead.unrecorded, 10%), not unexplained idle."),
    Expect("corpus", f"{HTA}/triton_example/triton_example.json.gz", "cuda:0", "activity",
           {"compute": 0.1, "host_overhead": 92.3, "idle": 7.6}, ("host_bound",), ("compile_dominates",),
           "The ProfilerStep is on another process (and 13.3 s long in a 0.36 s trace: clipped): the window is "
           "the driving process's 1.52 ms, not the one 1.76 µs kernel; Torch-Compiled Region runs compiled code."),
    Expect("corpus", f"{HTA}/with_gpu_user_annotation/step_based_trace_2543932.json.gz", "cuda:0", "activity",
           {"compute": 2.9, "host_overhead": 71.8, "idle": 25.3}, ("host_bound",), (),
           "Steps only as GPU annotations; 9 zero-duration kernels are dropped (event_checks)."),
    Expect("corpus", f"{TL}/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "cuda:0", "launched_in_steps",
           {"compute": 91.0, "data_movement": 0.4, "host_overhead": 8.6}, (), ("compile_dominates", "host_bound"),
           "The step's device work starts 14.5 ms after the step (the device was busy with earlier work) and ends "
           "2.2 ms after it; transformers' is_torchdynamo_compiling is not compile time."),
    Expect("corpus", f"{TL}/h100/gaunernst_bert-small-uncased__1016001.json.gz", "cuda:0", "steps",
           {"compute": 6.9, "data_movement": 0.1, "host_overhead": 93.0}, ("host_bound",), ("compile_dominates",),
           "BERT-small eager on an H100: Python and aten dispatch (82.8%) starve the GPU."),
    Expect("corpus", f"{TL}/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz", "rocm:9", "activity",
           {"compute": 2.1, "host_overhead": 97.9}, ("host_sync",), ("host_bound",),
           "A 463 ms hipMemcpyWithStream blocks like cudaMemcpy; the decode replays HIP graphs (hipGraphLaunch)."),
    Expect("corpus", f"{TL}/mi210/gpu_only_trace/gpu_only_trace.json.gz", "rocm:1", "activity",
           {"compute": 88.7, "host_overhead": 10.4, "idle": 0.9}, (), ("host_bound", "unexplained_idle"),
           "GPU-only ROCm trace (runtime calls, no ops); HTA loses 9.4 points of compute to µs rounding here. 8.0% "
           "of the window are gaps closed by a kernel whose hipLaunchKernel began inside the gap: the host's "
           "(host_overhead.unrecorded), not unexplained."),
    Expect("corpus", f"{TL}/mi300/gaunernst_bert-small-uncased__1016001.json.gz", "rocm:2", "steps",
           {"compute": 9.7, "data_movement": 0.1, "host_overhead": 90.2}, ("host_bound",), ("compile_dominates",),
           "The MI300 twin of the H100 BERT trace; attn_fwd is ROCm attention."),
    Expect("corpus", f"{TL}/perf_model/normalization/normalization_layer_test.json.gz", "rocm:2", "activity",
           {"compute": 0.1, "host_overhead": 99.9}, ("startup_overhead",), ("host_bound",),
           "hipInit, hipModuleLoadData and long first HIP calls: start-up dominates a short op benchmark."),
    Expect("corpus", f"{TL}/torch_compile_triton/trace.json.gz", "rocm:2", "activity",
           {"compute": 97.0, "host_overhead": 2.0, "idle": 1.1}, (), ("host_bound", "compile_dominates"),
           "Back-to-back Triton kernels of a compiled graph."),
    Expect("corpus", "kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
           "cuda:0", "launched_in_steps", {"compute": 59.4, "data_movement": 1.2, "host_overhead": 38.7, "idle": 0.7},
           ("input_bound",), ("host_bound",),
           "ResNet-50 with num_workers=0: enumerate(DataLoader) takes 415.8 ms of the 6 steps and 28.8% of the "
           "device window is the GPU idle waiting on it; 636 zero-duration kernels are dropped."),
    Expect("corpus", "kineto-tb_plugin/tb_plugin/test/gpu_metrics_input.json", "cuda:0", "steps",
           {"compute": 0.4, "host_overhead": 75.2, "idle": 24.4}, ("host_bound",), (),
           "tb_plugin's hand-edited unit-test input."),
    Expect("corpus", "param/et_replay/tests/inputs/linear_kineto.json.gz", "cuda:0", "activity",
           {"compute": 18.4, "data_movement": 0.1, "host_overhead": 74.2, "idle": 7.3}, ("startup_overhead",), (),
           "A linear-layer benchmark whose first CUDA calls (context, module loading) are inside the recording."),
    Expect("samples", "cpu_train_loop.pt.trace.json.gz", "cpu", "steps", {"compute": 81.7, "host_overhead": 18.3},
           (), ("unexplained_idle", "exposed_collectives"),
           "The real CPU training loop make_samples.py records: aten ops are the CPU device's compute."),
)


@dataclass(frozen=True)
class RunExpect:
    """A verdict for a real run the tests make (tests/verdict_runs.py): one injected cause, timed by the run."""

    run: str  # "train.pt.trace.json.gz" or "ddp" under the verdict_runs fixture's folder
    must: tuple[str, ...]
    must_not: tuple[str, ...]
    source: str | None  # the function every stall of ``detail`` must name (None: not checked)
    detail: str
    why: str


RUN_EXPECTATIONS: tuple[RunExpect, ...] = (
    RunExpect("train.pt.trace.json.gz", ("input_bound",), ("host_bound", "host_wait", "unexplained_idle"),
              "__getitem__", "input_pipeline",
              "The data loader's __getitem__ sleeps 4 ms per sample and num_workers=0 loads on the training thread "
              "(torch.utils.data docs, 'Single- and Multi-process Data Loading'): the device (the CPU) waits for "
              "input, and the line is __getitem__, not the loop frame torch recorded at its prof.step() line."),
    RunExpect("ddp", ("straggler", "host_wait"), ("host_bound",), None, "wait",
              "Rank 1 sleeps 150 ms before every forward pass. DDP all-reduces each gradient bucket as it becomes "
              "ready (torch DDP notes, bucket_cap_mb), so rank 0's two bucket all-reduces wait for rank 1 together: "
              "rank 1 is late by the sleep once, its time is a host wait (not launch-bound), and the straggler "
              "advice names host-side work, not load imbalance."),
)
