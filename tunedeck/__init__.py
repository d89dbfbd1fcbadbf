"""TuneDeck's shared core: the job contract (spec, generated configs, run folder, metric
events) and the database layer. Pure modules here import no heavy library at module level."""
