"""Parsers: one module per input format, each turning files into a `neurontrace.Trace`.

Registered by name in `neurontrace.load`; imported only when their format is used.
"""
