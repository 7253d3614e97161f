"""The multi-node pool on Ray: the executor that runs attempts on the pool's nodes
(``cluster.executor``), the head, the bridge the server talks to Ray through, the node agents
that run jobs on each node, and `gpupool node join`. ``executors/`` never imports this package.

Ray gives node membership, failure detection and process placement; gpupool keeps every
decision (which nodes, which GPUs, when), its records and its sandbox. Nothing here but the
relay's client (``cluster.relay``, standard library only) is imported on the single-machine
path, and Ray itself is imported only by the processes that
talk to it (the bridge, the agents), never by the server: if the head goes away, Ray ends a
connected process after a timeout, and that must not be the server.
"""
