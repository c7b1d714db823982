"""What the hub and lane actors do, as plain Python: aggregating metrics per run,
turning lane states into spans and metrics, and pushing to the server. The Ray actors
wrap these; a process without Ray runs them in-process."""
