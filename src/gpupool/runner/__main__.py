"""Entry point: ``python -m gpupool.runner ATTEMPT_DIR`` (or ``--fork-server``)."""

import sys

if __name__ == "__main__":
    if sys.argv[1:] == ["--fork-server"]:
        from gpupool.runner.forkserver import serve

        sys.exit(serve())
    from gpupool.runner.supervisor import main

    sys.exit(main(sys.argv[1:]))
