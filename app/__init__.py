"""The Dash viewer (``neurontrace view``): linked host and device timelines.

Its engine is a later milestone; this package exists so the layout and namespace are in place.
Importing it must stay cheap: Dash is imported only when the viewer starts.
"""
