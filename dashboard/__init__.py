"""The operators' Dash dashboard: fleet, hosts, GPUs, network, jobs, incidents; served by `fleetguard up`
and by the controller over the store they write."""
