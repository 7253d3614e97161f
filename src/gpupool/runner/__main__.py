"""Entry point: ``python -m gpupool.runner ATTEMPT_DIR`` (or ``--fork-server [--warm-network
DIR PASTA COUNT]``)."""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["--fork-server"]:
        from gpupool.runner.forkserver import main as fork_server

        sys.exit(fork_server(sys.argv[2:]))
    from gpupool.runner.supervisor import main

    sys.exit(main(sys.argv[1:]))
