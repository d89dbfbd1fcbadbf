""""Try it": a prompt to a finished job's model, stored as a row the job's worker answers."""
