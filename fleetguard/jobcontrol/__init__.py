"""Who a training job is and what may be said to it: process identity and trust, socket peers, /proc reads,
the queue of commands for ranks. Below both the runtime service and the action executor, which share it."""
