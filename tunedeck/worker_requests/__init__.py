"""A request a worker answers for the web: a data preflight, a "Try it" generation. One row
per request, one state table, one store; each kind names its table and its result column."""
