"""The policy layer: one function an action (submit, cancel, resume, retry, compare backends,
preview LoRA targets, plan, download, account changes; a dataset upload is a `DatasetUpload`
and a preflight its start and await), each taking the principal. It checks access, acts,
writes the audit record and raises the typed errors of app/actions/errors.py; the REST
routes (app/api/) map those to status codes and the UI handlers (app/ui/) to messages, so
neither front-end can forget a check (tests/app/test_policy_layer.py)."""
