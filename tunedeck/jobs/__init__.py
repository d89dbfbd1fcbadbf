"""A job's life in the database: the state machine (states.py), the only writer of job
state (store.py), the read-side queries (queries.py), what a failure's kind means
(failure_kinds.py) and what a Retry may change (retry_changes.py)."""
