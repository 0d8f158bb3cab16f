"""``python -m otpmem``: the ``otpmem`` command."""

from .cli import main

raise SystemExit(main())
