"""The version of delayd, in a module of its own so that any layer may read it."""
__version__ = "1.0.0"
