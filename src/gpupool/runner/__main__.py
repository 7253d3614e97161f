"""Entry point: ``python -m gpupool.runner ATTEMPT_DIR``."""

import sys

from gpupool.runner.supervisor import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
