"""Start-up: the `tunedeck` command and the services it runs. The only code outside app/ and
worker/ that may import them; the core (the rest of tunedeck/) imports nothing of this."""
from tunedeck.cli.main import main

__all__ = ["main"]
