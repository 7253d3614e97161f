"""Trace-driven simulation of the gpupool scheduler."""
