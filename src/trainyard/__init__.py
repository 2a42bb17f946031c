"""trainyard: schedule and run deep-learning training jobs on GPU clusters."""

__version__ = "0.1.0"
