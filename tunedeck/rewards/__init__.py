"""The rewards an RL job (and evaluation) scores completions with: one registry of scorers,
each a pure function of (prompt, completion, the record's columns) -> float."""
