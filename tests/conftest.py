import os
import sys

# the project is a set of flat scripts: make them importable from tests/
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
