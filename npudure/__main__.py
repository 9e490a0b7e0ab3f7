import sys

from npudure.cli import main

sys.exit(main())
