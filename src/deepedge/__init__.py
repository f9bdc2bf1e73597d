"""deepedge: keep deep-learning models accurate at the edge."""

__version__ = "0.1.0"
