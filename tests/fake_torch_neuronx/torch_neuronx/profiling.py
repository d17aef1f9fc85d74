"""TEST DOUBLE of ``torch_neuronx.profiling`` (native PyTorch profiling, formats/neuron.md §8).

``NeuronConfig`` is a real ``torch`` ``_ExperimentalConfig`` (so ``torch.profiler.profile`` accepts
it) carrying the documented parameters. ``NeuronProfiler(cfg).export_trace(prof)`` writes the
framework trace where the documentation says the real one does:
``<profile_output_dir>/<instance-id>_pid_<pid>/<timestamp>/trace.json``.
"""

from __future__ import annotations

import enum
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from torch._C._profiler import _ExperimentalConfig

from . import _call

INSTANCE_ID = "i-0fake0test0double"


class ProfileMode(enum.Enum):
    DEVICE = "device"
    RUNTIME = "runtime"
    CPU_UTIL = "cpu_util"
    HOST_MEMORY = "host_memory"


class NeuronConfig(_ExperimentalConfig):
    def __init__(
        self,
        modes: list[ProfileMode] | None = None,
        profile_output_dir: str = "./profile_output",
        max_events_per_nc: int = 100000,
        capture_enabled_for_nc: str | None = None,
        neff_cache_dir: str | None = None,
        precache_node_info: bool = True,
    ) -> None:
        options = f"max_events_per_nc:{max_events_per_nc};profile_output_dir:{profile_output_dir}"
        super().__init__(custom_profiler_config=options)
        self.modes = modes if modes is not None else [ProfileMode.DEVICE, ProfileMode.RUNTIME]
        self.profile_output_dir = profile_output_dir
        self.max_events_per_nc = max_events_per_nc
        self.capture_enabled_for_nc = capture_enabled_for_nc
        self.neff_cache_dir = neff_cache_dir
        self.precache_node_info = precache_node_info
        _call("NeuronConfig", modes=[m.value for m in self.modes], profile_output_dir=profile_output_dir,
              max_events_per_nc=max_events_per_nc, capture_enabled_for_nc=capture_enabled_for_nc,
              neff_cache_dir=neff_cache_dir, precache_node_info=precache_node_info)


class NeuronProfiler:
    def __init__(self, config: NeuronConfig) -> None:
        _call("NeuronProfiler", config=config)
        self.config = config

    def export_trace(self, prof: Any) -> None:
        _call("export_trace", step_num=prof.step_num)
        stamp = datetime.now().strftime("%Y%m%d_%H%M%S_%f")
        out = Path(self.config.profile_output_dir) / f"{INSTANCE_ID}_pid_{os.getpid()}" / stamp
        out.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(out / "trace.json"))
        (out / "ntrace.pb").write_bytes(b"fake system trace: test double")
