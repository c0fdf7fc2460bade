"""Side effects (git, processes, files) and the worker-memory services activities read."""
