"""The SDK's version (the wheel build writes the forkbox tree's VERSION here)."""

__version__ = "0.1.0"
