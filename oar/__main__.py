import sys

from oar.cli.main import main

sys.exit(main())
