"""`python -m cli`: what the installed `tunedeck` command runs."""
import sys

from cli.main import main

sys.exit(main())
