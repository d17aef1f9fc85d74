"""Synthetic Neuron profiles, written to the documented formats from a scenario description.

No Trainium hardware is available to this project, so the Neuron parsers are tested on files made
here (DESIGN.md, "What is real and what is synthetic"). A :class:`Scenario` says which engines run
what, the DMA queues and transfer sizes, collectives, semaphore waits, throttling windows and the
source stacks behind the instructions; the writers turn it into

- a Neuron Explorer Parquet directory (:func:`write_explorer`), schema 7.4.0 or an assumed 12.x;
- legacy JSON, device and system variants (:func:`write_legacy_json`);
- ``summary-json`` / ``summary-text`` (:func:`write_summary`);
- NTFF-like and NEFF-like container headers (:func:`write_ntff`, :func:`write_neff`), no records;
- a TorchNeuron capture directory (:func:`write_capture`).

Every output is labelled synthetic: file and profile names start with ``synthetic_``, Parquet
files carry the key ``neurontrace.synthetic = true``, JSON outputs a ``synthetic`` key, summary-text
a ``synthetic`` line, NTFF/NEFF headers a ``synthetic_*.neff`` name; the parsers report
``synthetic: true`` in metadata when they see the label. Never present these as measurements.

The 12.x column set is an assumption: AWS published that 12.0.1 exists (SDK 2.33) but not which
columns changed (neuron.md §3.2, §13.1). The 12.x variant drops ``duration_ns`` (readers derive it),
some optional columns, and adds a column and a table the reader does not know, to exercise reading
by column presence; it does not claim to reproduce 12.x.

The code lives in rooms by subject: the scenario (:mod:`neurontrace.testing.neuron_scenario`), Explorer
Parquet (:mod:`neurontrace.testing.neuron_explorer_files`) and every other file kind
(:mod:`neurontrace.testing.neuron_other_files`); this module is the one name to import.

Usage::

    from neurontrace.testing import synthetic_neuron as syn
    syn.write_explorer(syn.Scenario(), "out/synthetic_mlp_parquet")
"""

from __future__ import annotations

from neurontrace.testing.neuron_explorer_files import (
    STARTUP_S,
    explorer_tables,
    instruction_table,
    summary_metrics,
    write_explorer,
    write_table,
    write_tables,
)
from neurontrace.testing.neuron_other_files import (
    kineto_trace,
    ntff_bytes,
    profile_id,
    write_capture,
    write_legacy_json,
    write_neff,
    write_ntff,
    write_summary,
)
from neurontrace.testing.neuron_scenario import (
    NOTE,
    PARQUET_LABEL,
    Collective,
    DmaQueue,
    EngineWork,
    Frame,
    Scenario,
    ThrottleWindow,
)

__all__ = ["NOTE", "PARQUET_LABEL", "STARTUP_S", "Collective", "DmaQueue", "EngineWork", "Frame", "Scenario",
           "ThrottleWindow", "explorer_tables", "instruction_table", "kineto_trace", "ntff_bytes", "profile_id",
           "summary_metrics", "write_capture", "write_explorer", "write_legacy_json", "write_neff", "write_ntff",
           "write_summary", "write_table", "write_tables"]
