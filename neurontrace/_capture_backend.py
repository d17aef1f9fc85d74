"""The backend side of a capture: activities, TorchNeuron configuration, synchronize, versions.

torch and torch_neuronx are imported here only when a capture starts, through ``importlib``, so
``import neurontrace`` never loads them and the type checker never needs them installed.
torch_neuronx is imported only when it is installed; its profiling API is the one documented for
TorchNeuron native profiling (formats/neuron.md §8): ``torch_neuronx.profiling.NeuronConfig``
passed as ``experimental_config`` and ``NeuronProfiler(cfg).export_trace`` as the exporter; the
fallback ops come from ``torch_neuronx.get_fallback_ops()`` (§9).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from neurontrace._optional import require
from neurontrace.errors import MissingDependencyError

NEURON_MODES = ("device", "runtime", "cpu_util", "host_memory")  # ProfileMode members, lower case
_ACTIVITY_ALIASES = {"cpu": "CPU", "cuda": "CUDA", "neuron": "PrivateUse1", "privateuse1": "PrivateUse1",
                     "xpu": "XPU", "mtia": "MTIA", "hpu": "HPU"}
# Distributions of the Neuron SDK whose versions are worth keeping (compiler, runtime, framework).
_NEURON_DISTS = ("torch-neuronx", "neuronx-cc", "libneuronxla", "torch-xla", "neuronx-distributed",
                 "aws-neuronx-runtime-discovery", "neuron-explorer", "jax-neuronx")


@dataclass(frozen=True)
class NeuronOptions:
    """``NeuronConfig`` settings a user may choose; None keeps TorchNeuron's default."""

    modes: tuple[str, ...] | None = None
    cores: str | None = None  # capture_enabled_for_nc, e.g. "0,1,2-5"
    max_events_per_nc: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # passed to NeuronConfig as given

    @property
    def given(self) -> list[str]:
        names = [f"neuron_{n}" for n in ("modes", "cores", "max_events_per_nc") if getattr(self, n) is not None]
        return names + (["neuron_config"] if self.extra else [])


def neuron_installed() -> bool:
    """torch_neuronx can be imported (already imported, or findable without importing it)."""
    return "torch_neuronx" in sys.modules or importlib.util.find_spec("torch_neuronx") is not None


def missing_neuron(what: str) -> MissingDependencyError:
    return MissingDependencyError(
        f"{what} needs torch-neuronx (TorchNeuron, the PyTorch backend of the AWS Neuron SDK), which is not "
        "installed here; it comes with the Neuron SDK on Trainium/Inferentia instances (Neuron DLAMIs and "
        "containers). Without it, leave out the Neuron options and activities"
    )


def activity_names(activities: Iterable[Any] | None, *, cuda: bool, neuron: bool) -> list[str]:
    """Activity names (``ProfilerActivity`` member names): given ones, or CPU + the backend in use."""
    if activities is None:
        names = ["CPU"]
        if cuda:
            names.append("CUDA")
        if neuron:
            names.append("PrivateUse1")
        return names
    out: list[str] = []
    for a in activities:
        name = getattr(a, "name", None) or _ACTIVITY_ALIASES.get(str(a).lower())
        if name is None:
            raise ValueError(f"unknown profiler activity {a!r}; expected one of {', '.join(_ACTIVITY_ALIASES)} "
                             "or a torch.profiler.ProfilerActivity")
        if name not in out:
            out.append(str(name))
    return out


def validate_neuron(names: list[str], options: NeuronOptions) -> bool:
    """Whether this capture profiles TorchNeuron; a clear error when asked to without torch_neuronx."""
    wants = "PrivateUse1" in names
    if (wants or options.given) and not neuron_installed():
        asked = options.given + (["the neuron (PrivateUse1) activity"] if wants else [])
        raise missing_neuron(", ".join(asked))
    if options.modes is not None:
        bad = [m for m in options.modes if m.lower() not in NEURON_MODES]
        if bad:
            raise ValueError(f"unknown neuron_modes {bad}; expected some of {', '.join(NEURON_MODES)}")
    return wants


def torch_module() -> ModuleType:
    return require("torch", extra="capture")


def neuron_module() -> ModuleType:
    return importlib.import_module("torch_neuronx")


def cuda_available(torch: ModuleType) -> bool:
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken CUDA install must not stop the user's program
        return False


def profiler_activities(torch: ModuleType, names: list[str]) -> list[Any]:
    return [getattr(torch.profiler.ProfilerActivity, n) for n in names]


def neuron_config(capture_dir: Path, options: NeuronOptions) -> tuple[Any, dict[str, Any]]:
    """A ``NeuronConfig`` writing into the capture directory, and the settings as recorded."""
    profiling = importlib.import_module("torch_neuronx.profiling")
    capture_dir = capture_dir.resolve()  # the runtime writes there, whatever the working directory
    kwargs: dict[str, Any] = {
        "profile_output_dir": str(capture_dir / "neuron"),
        # NEFFs land in the capture directory, so the device profile can be processed later.
        "neff_cache_dir": str(capture_dir / "neff_cache"),
    }
    if options.modes is not None:
        kwargs["modes"] = [getattr(profiling.ProfileMode, m.upper()) for m in options.modes]
    if options.cores is not None:
        kwargs["capture_enabled_for_nc"] = options.cores
    if options.max_events_per_nc is not None:
        kwargs["max_events_per_nc"] = options.max_events_per_nc
    kwargs.update(options.extra)
    # As recorded in run.json: paths relative to the capture directory, modes by name.
    recorded: dict[str, Any] = {}
    for key, given in kwargs.items():
        value = given
        if key == "modes":
            value = [str(getattr(m, "name", m)).lower() for m in given]
        elif isinstance(given, str) and Path(given).is_relative_to(capture_dir):
            value = Path(given).relative_to(capture_dir).as_posix()
        recorded[key] = value if isinstance(value, bool | int | float | str | list) else repr(value)
    return profiling.NeuronConfig(**kwargs), recorded


def neuron_exporter(config: Any) -> Callable[[Any], None]:
    """TorchNeuron's own exporter: the framework trace goes beside the Neuron system files."""
    profiling = importlib.import_module("torch_neuronx.profiling")
    export: Callable[[Any], None] = profiling.NeuronProfiler(config).export_trace
    return export


def prepare(torch: ModuleType) -> None:
    """Do once, untraced, what torch does lazily on its first ``record_function``.

    torch 2.13 imports a module inside the first ``record_function``; when that happens while the
    Python tracer runs (the ``ProfilerStep#0`` marker of the first capture in a process), the
    import's frame gets a garbage name, sometimes with an unescaped quote, and the exported trace
    is not valid JSON.
    """
    with torch.autograd.profiler.record_function("neurontrace.capture.prepare"):
        pass


def on_optimizer_step(callback: Callable[[], None]) -> Any:
    """Call ``callback`` after every ``optimizer.step()`` of any optimizer; returns the removable handle."""
    optimizer = importlib.import_module("torch.optim.optimizer")
    return optimizer.register_optimizer_step_post_hook(lambda *_: callback())


def synchronize(torch: ModuleType, *, cuda: bool, neuron: bool) -> None:
    """Wait for queued device work, so the window's device activity is complete before export."""
    if cuda:
        torch.cuda.synchronize()
    if neuron:
        sync = getattr(neuron_module(), "synchronize", None) or getattr(getattr(torch, "neuron", None),
                                                                        "synchronize", None)
        if sync is not None:
            sync()


def fallback_ops() -> tuple[list[str], list[str] | None]:
    """Ops TorchNeuron ran on the CPU, and (when the API exists) the ops it ran on Neuron."""
    tnx = neuron_module()
    fallen = sorted({str(op) for op in tnx.get_fallback_ops()})
    executed_fn = getattr(tnx, "get_executed_ops", None)
    executed = sorted({str(op) for op in executed_fn()}) if executed_fn is not None else None
    return fallen, executed


def versions(torch: ModuleType, *, cuda: bool, neuron: bool) -> dict[str, Any]:
    """Versions of torch and of the backend in use; unknown ones are left out, never guessed."""
    out: dict[str, Any] = {"torch": str(torch.__version__)}
    version = getattr(torch, "version", None)
    for key in ("cuda", "hip", "git_version"):
        value = getattr(version, key, None)
        if value:
            out[f"torch_{key}" if key == "git_version" else key] = str(value)
    if cuda:
        out.update(_quietly(lambda: {"cudnn": torch.backends.cudnn.version()}))
        driver = getattr(torch._C, "_cuda_getDriverVersion", None)
        if driver is not None:
            out.update(_quietly(lambda: {"cuda_driver": driver()}))
    if neuron:
        tnx = neuron_module()
        out["torch_neuronx"] = str(getattr(tnx, "__version__", "unknown"))
        dists = {}
        for dist in _NEURON_DISTS:
            try:
                dists[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        out["neuron_packages"] = dists
    return out


def devices(torch: ModuleType, *, cuda: bool, neuron: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if cuda:
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            out.append({"device": f"cuda:{i}", "name": str(props.name), "total_memory_bytes": int(props.total_memory),
                        "capability": f"{props.major}.{props.minor}"})
    if neuron:
        count = getattr(neuron_module(), "device_count", None)
        if count is not None:
            out += [{"device": f"neuron:{i}"} for i in range(int(count()))]
    return out


def distributed_rank(torch: ModuleType) -> tuple[int, int] | None:
    """``(rank, world_size)`` from torch.distributed when a process group is initialised."""
    dist = getattr(torch, "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a half-initialised process group: fall back to the environment
        return None
    return None


def _quietly(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except Exception:  # a version we cannot read is left out
        return {}
