"""The CLI's commands that have grown beyond a few lines, one module each (main.py parses
and dispatches)."""
