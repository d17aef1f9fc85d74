"""Real CPU runs of a three-layer MLP made with PyTorch, shared by the tests of per-layer diff and autocast.

One subprocess (torch imported once) records three traces with ``record_shapes`` and ``with_stack``:

- ``base``: fc1 (128->1024), fc2 (1024->1024), fc3 (1024->64), all called from one ``forward``;
- ``slow``: the same code with fc2 run three times per step (a layer recomputed: three times its time, with
  the same shapes): the one slower layer a diff must name by its shapes;
- ``autocast``: ``base`` under ``torch.autocast("cpu", torch.bfloat16)``: each ``aten::linear(float)`` casts
  its inputs and runs an ``aten::linear(c10::BFloat16)`` inside.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tempfile
from pathlib import Path

BATCH, STEPS, WIDTH = 512, 3, 1024  # fc2: 1 GFLOP a call, tens of ms: far above scheduling noise
_SCRIPT = r'''
import sys, torch
from torch.profiler import ProfilerActivity, profile
torch.manual_seed(0)
torch.set_num_threads(1)
out = sys.argv[1]

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(128, W), torch.nn.Linear(W, W), torch.nn.Linear(W, 64)

        self.repeat = 1

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        for _ in range(self.repeat):
            x = torch.relu(self.fc2(x))
        return self.fc3(x)

def run(name, model, autocast=False):
    x = torch.randn(BATCH, 128)
    with torch.no_grad():
        for _ in range(2):
            model(x)  # warm-up: first-use allocations are not a layer's cost
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
            for _ in range(STEPS):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    model(x)
    prof.export_chrome_trace(f"{out}/{name}.pt.trace.json")

BATCH, STEPS, W = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
model = MLP()
run("warm-up", model)  # the first profiling session of a process pays the profiler's own start-up
run("base", model)
run("autocast", model, autocast=True)
model.repeat = 3
run("slow", model)
'''


@functools.cache
def layer_runs() -> Path:
    """The folder holding base/slow/autocast ``.pt.trace.json`` (made once per test session)."""
    out = Path(tempfile.mkdtemp(prefix="neurontrace-layers-"))
    (out / "mlp_layers.py").write_text(_SCRIPT)
    subprocess.run([sys.executable, str(out / "mlp_layers.py"), str(out), str(BATCH), str(STEPS), str(WIDTH)], check=True,
                   timeout=300, cwd=out)
    return out
