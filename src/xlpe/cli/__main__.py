"""``python -m xlpe.cli`` (e.g. ``torchrun --nproc_per_node N -m xlpe.cli train ...``)."""

import sys

from xlpe.cli import main

sys.exit(main())
