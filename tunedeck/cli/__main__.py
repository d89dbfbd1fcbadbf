"""`python -m tunedeck.cli`: what the installed `tunedeck` command runs."""
import sys

from tunedeck.cli.main import main

sys.exit(main())
