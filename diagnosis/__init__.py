"""Diagnosis (next issue): fault-signature catalog, rules -> findings -> incidents -> actions, webhooks."""
