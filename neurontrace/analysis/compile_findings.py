"""Findings about preparation (the ``compile`` section): recompiles, the recompile limit, graph breaks (and how
many each step crosses), a compiled call slower than eager, failures,
cache misses on a warm run, Neuron cache failures, ranks that compiled different graphs. Each finding names the
frame (file:line), the guard or reason torch gave, and what to change. Thresholds are listed here and in
docs/compile.md.
"""

from __future__ import annotations

import re
from typing import Any

from neurontrace import units
from neurontrace.analysis.compile import SECTION, CompileReport, Frame, is_recompile_limit
from neurontrace.analysis.contract import Context, Finding, FindingFamily

RECOMPILE_WARN = 1  # a frame recompiled at least this many times
SLOWER_RATIO = 1.2  # a compiled call's median at least this many times the eager call's: compiled slower
SLOWER_MIN_CALLS = 3  # compiled and eager calls each, at least, for the medians to be evidence
SHAPE_GUARD = re.compile(r"size mismatch at index (\d+)|stride mismatch|dim mismatch|rank mismatch")
_BREAK_ADVICE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Tensor\.item\(\)|capture_scalar_outputs|_local_scalar_dense", re.I),
     ("the .item() reads a tensor on the host: keep the value a tensor, or set "
      "torch._dynamo.config.capture_scalar_outputs = True")),
    (re.compile(r"builtin operator `?print|logging|reorderable_logging", re.I),
     ("move the print/logging out of the compiled function, or add it to "
      "torch._dynamo.config.reorderable_logging_functions")),
    (re.compile(r"data.dependent|nonzero|dynamic output shape", re.I),
     ("an op whose output shape depends on the data: set torch._dynamo.config.capture_dynamic_output_shape_ops = "
      "True, or move it out of the compiled region")),
)
_NEURON_SHAPES = ("On TorchNeuron, where dynamic=True is rejected, every new shape recompiles: pad or bucket "
                  "inputs to a fixed set of shapes and warm each one up (or precompile them with "
                  "neuron_parallel_compile).")


def _who(f: Frame) -> str:
    return f"{f.function or 'frame ' + str(f.frame_id)} ({f.source or 'unknown source'})" + (
        f" on rank {f.rank}" if f.rank is not None else "")


def recompile_findings(r: CompileReport) -> list[Finding]:
    out = []
    for f in r.frames:
        again = [c for c in f.compiles if c.get("recompile_reason") or _n(c) > 0]
        ids = {str(c.get("compile_id") or "").split("_")[0] for c in again}
        if len(ids) < RECOMPILE_WARN:
            continue
        reasons = [c["recompile_reason"] for c in again if c.get("recompile_reason")]
        first = reasons[0].split("; ")[0] if reasons else "no guard failure recorded (add TORCH_LOGS=recompiles)"
        took = sum(int(c.get("dur_ns") or 0) for c in again)
        shapes = any(SHAPE_GUARD.search(x) for x in reasons)
        m = SHAPE_GUARD.search(first)
        dim = m.group(1) if m and m.group(1) else "0"
        advice = (f"A new input shape recompiles the frame: mark the dimension dynamic before the call "
                  f"(torch._dynamo.mark_dynamic(x, {dim})), or pad/bucket inputs to a few fixed shapes. "
                  + _NEURON_SHAPES) if shapes else (
                  "Find what changes between calls (the guard names it) and keep it constant, or pass it as a "
                  "tensor; torch._dynamo.explain() lists the guards.")
        out.append(Finding(
            "recompiles", "warning", f"{f.function or 'A frame'} recompiled {len(ids)} time(s)",
            f"{_who(f)}: {len(ids)} recompile(s) ({units.duration(took)} compiling); first guard that failed: "
            f"{first}", advice))
    for lim in r.recompile_limits:
        out.append(Finding(
            "recompile_limit", "error", f"{lim.get('function') or 'A frame'} hit the recompile limit and runs eagerly",
            f"{lim.get('function')} ({lim.get('source')}) hit {lim.get('reason')}",
            "From now on this frame runs without torch.compile. Stop the recompiles (mark_dynamic, fixed shapes); "
            "raising torch._dynamo.config.recompile_limit only delays it. " + _NEURON_SHAPES))
    return out


def _n(c: dict[str, Any]) -> int:
    cid = str(c.get("compile_id") or "")
    m = re.match(r"(?:!\d+/)?\d+/(\d+)", cid)
    return int(m.group(1)) if m else 0


def graph_break_findings(r: CompileReport) -> list[Finding]:
    breaks = [(f, g) for f in r.frames for g in f.graph_breaks]
    per_step = r.runtime.get("breaks_per_step") or []
    if not breaks and not per_step:
        return []
    seen: dict[tuple[Any, Any], int] = {}
    for _f, g in breaks:
        seen[(g.get("source"), g.get("reason"))] = seen.get((g.get("source"), g.get("reason")), 0) + 1
    where = "; ".join(f"{src or '?'}: {reason or '?'}" + (f" (x{n})" if n > 1 else "")
                      for (src, reason), n in list(seen.items())[:5])
    tips = []
    for _src, reason in seen:
        for pat, tip in _BREAK_ADVICE:
            if reason and pat.search(reason) and tip not in tips:
                tips.append(tip)
    advice = ("Each break ends a graph and starts another (one compiled region per break, Python between them): "
              + ("; ".join(tips) + ". " if tips else "")
              + "torch.compile(fullgraph=True) turns every break into an error that names it.")
    title = f"{len(breaks)} graph break(s) split the compiled code"
    evidence = f"{len(breaks)} graph break(s): {where}"
    if per_step:
        n = sorted({int(s["breaks"]) for s in per_step})
        crossed = "; ".join(f"{a.get('source') or '?'}: {a.get('reason') or 'reason not logged'}"
                            + (f" (x{a['count']})" if a["count"] > 1 else "") for a in per_step[0]["at"][:5])
        title = f"Each step crosses {'-'.join(map(str, (n[0], n[-1]) if len(n) > 1 else n))} graph break(s)"
        evidence = (f"{len(per_step)} profiled step(s) cross {'/'.join(map(str, n))} graph break(s) each (step "
                    f"{per_step[0]['step']}: {crossed}); "
                    + (f"{len(breaks)} break(s) logged: {where}" if breaks else
                       "no compile log names the reasons (TORCH_LOGS=graph_breaks or TORCH_TRACE gives them)"))
    return [Finding("graph_breaks", "warning", title, evidence, advice)]


def slower_findings(r: CompileReport) -> list[Finding]:
    """A compiled call slower than an eager call of the same function in the same trace (compile_runtime)."""
    out = []
    for v in r.runtime.get("versus_eager") or []:
        eager = v.get("eager_median_ns")
        if not eager or v["eager_calls"] < SLOWER_MIN_CALLS or v["compiled_calls"] < SLOWER_MIN_CALLS \
                or v["compiled_median_ns"] < SLOWER_RATIO * eager:
            continue
        wrap = v["compiled_median_ns"] - v["guard_median_ns"] - v["region_median_ns"]
        out.append(Finding(
            "compiled_slower", "warning",
            f"{str(v['function']).split(': ', 1)[-1]} is {v['compiled_median_ns'] / eager:.1f}x slower compiled "
            "than eager",
            f"{v['function']} ({v['source']}"
            + (f", rank {v['rank']}" if v.get("rank") is not None else "")
            + f"): a compiled call takes {units.duration(v['compiled_median_ns'])} (median of "
            f"{v['compiled_calls']}: guard checks {units.duration(v['guard_median_ns'])}, the compiled code "
            f"{units.duration(v['region_median_ns'])}, Dynamo's wrappers {units.duration(max(wrap, 0))}), an eager "
            f"call {units.duration(eager)} (median of {v['eager_calls']}) in the same trace",
            "The compiled code and its per-call overhead (guards, wrappers) cost more than the eager code: the graph "
            "is too small for compile to pay. Compile a larger region (the whole model or training step) so the "
            "overhead is paid once, or leave this function eager (torch.compiler.disable). On CUDA, "
            "mode=\"reduce-overhead\" (CUDA graphs) removes launch overhead; fewer guards (no Python scalars or "
            "globals that change) make each call's check cheaper."))
    return out


def failure_findings(r: CompileReport) -> list[Finding]:
    out = []
    for f in r.frames:
        for c in f.compiles:
            if c.get("status") != "failed" or is_recompile_limit(c):  # the recompile_limit finding says it
                continue
            out.append(Finding(
                "compile_failed", "error", f"Compiling {f.function or 'a frame'} failed",
                f"{_who(f)} {c.get('compile_id')}: {c.get('fail_type') or 'failed'}: "
                f"{(c.get('fail_reason') or '').splitlines()[0][:300] if c.get('fail_reason') else ''}",
                "The backend raised: read the reason above (TORCH_LOGS=+dynamo shows the traceback). With "
                "torch._dynamo.config.suppress_errors the frame silently runs eagerly; fix or report the backend "
                "error rather than hiding it."))
    n = r.neuron or {}
    if n.get("cached_failures"):
        out.append(Finding(
            "neuron_cached_failure", "error", "The Neuron cache replays a failed compile",
            f"{n['cached_failures']} graph(s) loaded as a cached failed NEFF: the compiler is not run again",
            "An earlier compile failed (or was interrupted) and its failure was cached. Fix the cause, then set "
            "NEURON_CC_FLAGS=--retry_failed_compilation (or delete that MODULE_ entry from the cache)."))
    if n.get("failed"):
        out.append(Finding(
            "neuron_compile_failed", "error", "Neuron graph compilation failed",
            f"{n['failed']} graph(s) failed to compile"
            + (f": {n['failures'][0]['module']} {n['failures'][0]['fail_type']}" if n.get("failures") else ""),
            "Read the compiler's log for that module (log-neuron-cc.txt in its work directory, model.log in the "
            "cache entry); the error code names the fix in the Neuron compiler error-code pages."))
    par = n.get("parallel") or {}
    if par.get("failed"):
        out.append(Finding(
            "neuron_parallel_failed", "error", "neuron_parallel_compile left graphs uncompiled",
            f"{par['failed']} of {par.get('graphs')} graph(s) failed in neuron_parallel_compile",
            "Those graphs will compile (or fail) again at the first step of training; fix the failures first."))
    return out


def run_findings(r: CompileReport) -> list[Finding]:
    """What the whole run shows: cache misses beside hits (a warm cache missed), ranks that compiled
    different numbers of graphs."""
    out = []
    if r.cache_hits and r.cache_misses:
        out.append(Finding(
            "cache_misses_warm", "info", "Some graphs missed a warm compile cache",
            f"{r.cache_hits} FX graph cache hit(s) but {r.cache_misses} miss(es) in the same run",
            "A miss on a warm cache means the graph changed (new shapes, code, config, torch version) or the "
            "cache was not shared (TORCHINDUCTOR_CACHE_DIR per job); keep them stable to reuse compiled graphs."))
    counts = {k: v for k, v in r.per_rank.items() if k != "None"}
    if len(counts) > 1 and len(set(counts.values())) > 1:
        text = ", ".join(f"rank {k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: int(kv[0]))[:8])
        out.append(Finding(
            "compile_rank_divergence", "warning", "Ranks compiled different numbers of graphs",
            f"graphs compiled per rank: {text}",
            "Ranks that compile different graphs issue different collectives and can hang the job; make every "
            "rank see the same shapes and code paths (same batch shapes, no rank-dependent branches)."))
    return out


def findings(r: CompileReport) -> list[Finding]:
    """Every compile finding of one report (the job's, after the combine)."""
    return (failure_findings(r) + recompile_findings(r) + graph_break_findings(r) + slower_findings(r)
            + run_findings(r))


def _find(ctx: Context) -> list[Finding]:
    r = ctx.sections.get(SECTION.key)
    return [] if r is None else findings(r)


FINDINGS = FindingFamily("compile", _find)
