"""ponder's daemon: everything that runs (transport, dispatch, sessions, providers, store, tools)."""

__version__ = "0.1.0"
