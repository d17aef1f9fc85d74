"""The version, in a leaf module: whoever needs it imports this, never the package root."""

__version__ = "0.1.0"
