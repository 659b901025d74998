"""Agent side of the training runtime: loopback endpoint for local ranks, PID watcher, the service."""
