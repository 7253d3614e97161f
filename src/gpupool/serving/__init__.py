"""The built-in model server of deployments: ``python -m gpupool.serving``.

A deployment without a command of its own runs this in each replica. Standard library HTTP
(``ThreadingHTTPServer``) on ``$GPUPOOL_LISTEN_HOST:$PORT``; the model is ``model.pt``
(TorchScript, loaded with torch) or ``model.onnx`` (loaded with onnxruntime, the 'serving'
extra) from ``$GPUPOOL_MODEL_DIR``. See ``gpupool.serving.server`` for the HTTP interface.
"""
