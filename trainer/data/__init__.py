"""What a job trains on: the built-in set, reading records, the chat template, tokenizing once a node, packing, and the data preflight."""
