import sys

from oar.cli import main

sys.exit(main())
