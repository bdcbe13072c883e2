import sys

from tinyc.cli import main

sys.exit(main())
