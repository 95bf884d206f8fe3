"""`python -m deepinfer ...` runs the `deepinfer` command."""
import sys

from .cli import main

sys.exit(main())
