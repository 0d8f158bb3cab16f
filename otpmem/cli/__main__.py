"""``python -m otpmem.cli``: the ``otpmem`` command."""

from . import main

raise SystemExit(main())
