"""commsim: predict and check how data-parallel training scales."""

__version__ = "0.1.0"
