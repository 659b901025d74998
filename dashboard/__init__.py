"""The operators' Dash dashboard (next issue), mounted in the controller process."""
