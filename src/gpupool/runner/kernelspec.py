"""A notebook's kernel in its Python environment (stdlib only; run inside the sandbox).

A notebook with an environment runs JupyterLab from the node's Python, as every notebook,
and its kernel from the environment: ``python -m gpupool.runner.kernelspec DIR`` writes
``DIR/kernels/python3/kernel.json`` (JupyterLab reads it through ``JUPYTER_PATH``) so that the
default kernel is ``$VIRTUAL_ENV/bin/python``. The environment's own ipykernel is used when it
has one; else JupyterLab's is found after the environment's packages (which come first), so an
environment of the same Python version needs no ipykernel of its own.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig

BOOT = (
    "import sys; sys.path += [p for p in {paths!r} if p not in sys.path]; "
    "from ipykernel import kernelapp; kernelapp.launch_new_instance()"
)


def kernel_spec(env_dir: str, label: str) -> dict[str, object]:
    """The kernel.json of a kernel running ``env_dir``'s python."""
    paths = list(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
    return {
        "argv": [
            os.path.join(env_dir, "bin", "python"),
            "-c",
            BOOT.format(paths=paths),
            "-f",
            "{connection_file}",
        ],
        "display_name": f"Python ({label})",
        "language": "python",
        "metadata": {"debugger": True},
    }


def main(argv: list[str]) -> int:
    env_dir = os.environ.get("VIRTUAL_ENV")
    if len(argv) != 1 or not env_dir:
        print("usage: VIRTUAL_ENV=... python -m gpupool.runner.kernelspec DIR", file=sys.stderr)
        return 2
    directory = os.path.join(argv[0], "kernels", "python3")
    os.makedirs(directory, exist_ok=True)
    label = os.environ.get("GPUPOOL_ENVIRONMENT", os.path.basename(env_dir))
    with open(os.path.join(directory, "kernel.json"), "w", encoding="utf-8") as f:
        json.dump(kernel_spec(env_dir, label), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
