"""Analyses over a `Trace`: each reads only the Trace tables and returns tables (never plots).

Stall attribution, phases and run comparison land here (DESIGN.md, "Stall attribution").
"""
