"""The runner: the small, standard-library-only parent of one workload process.

Started as ``python -m gpupool.runner ATTEMPT_DIR`` by an executor. Nothing in this package
may import anything outside the standard library, so that the runner starts fast and keeps
working when the server is gone; the one exception is NVML (nvidia-ml-py), imported only by
the runner of a fractional job, to hold it to its share of GPU memory.

It makes the job's sandbox (``sandbox``), puts it in its cgroup (``cgroups``), under its
account, with its environment (``tenancy``), watches its GPU memory (``gpumemory``) and its
processes (``workload``), and records its exit (``supervisor``).
"""
