import sys

from loom.cli import main

sys.exit(main())
