"""``python -m gpupool.serving``: serve the deployment's model (see gpupool.serving.server)."""

from gpupool.serving.server import main

if __name__ == "__main__":
    main()
