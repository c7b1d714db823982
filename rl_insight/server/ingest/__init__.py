"""What the server takes in and keeps: the intake (span exports and pushes on their own
ASGI path, group commit), the decoders, the stores (pushed groups, targets, experiments,
the spool) in one SQLite database, and the relay to Tempo."""
