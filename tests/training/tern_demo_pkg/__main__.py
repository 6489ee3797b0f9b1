import sys

from tern_demo_pkg import main

sys.exit(main())
