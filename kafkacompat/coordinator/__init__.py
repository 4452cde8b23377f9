"""What every coordinator core shares with the runtime that drives it (see api.py)."""
