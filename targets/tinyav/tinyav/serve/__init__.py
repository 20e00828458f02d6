"""``python -m tinyav.serve``: tinyav as an HTTP inference server, optionally tensor-parallel.

Modules, one stage each:

- ``cli``: arguments, start-up (HTTP first, then the engine), signals, shutdown.
- ``app``: the FastAPI routes (``/health``, ``/v1/videos/generations``) and the request body.
- ``engine``: one rank's loaded pipeline; rank 0 submits jobs, the other ranks follow them.
- ``distributed``: the collective backend per platform, rendezvous, job broadcast.
- ``tp``: Megatron-style sharding of the DiT blocks (heads and MLP, column then row).
- ``rank``: the entry point of ranks 1..N-1, started by rank 0.

Importing this package imports nothing heavy; FastAPI, uvicorn and torch load with ``cli``.
"""
