"""One module per tab; each lays out its components and wires their events."""
