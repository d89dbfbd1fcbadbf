"""The policy layer: one function an action (submit, cancel, resume, retry, compare backends,
preview LoRA targets, plan, upload or preflight a dataset, account changes), each taking the
Principal first. It checks access, acts, writes the audit record and raises the typed errors
of app/actions/errors.py; the REST routes (app/api/) map those to status codes and the UI
handlers (app/ui/) to messages, so neither front-end can forget a check."""
