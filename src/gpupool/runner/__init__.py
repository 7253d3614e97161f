"""The runner: the small, standard-library-only parent of one workload process.

Started as ``python -m gpupool.runner ATTEMPT_DIR`` by an executor. Nothing in this package
may import anything outside the standard library, so that the runner starts fast and keeps
working when the server is gone.
"""
