"""Diagnosis, pure logic: the policy as data, rules -> incidents -> actions, escalation, the circuit breaker,
replay, alert bodies, and the training-runtime action policy. No I/O: the shell is fleetguard.incidents."""
