"""`fleetguard selfcheck`: what a host must pass before it takes work again (health fields, compute and
memory per GPU, all-reduce among the host's GPUs, NIC ports), with exit codes like `scan`."""
