"""Actions with side effects (checkpoint request, restart, cordon, crash-loop stop), with their evidence."""
