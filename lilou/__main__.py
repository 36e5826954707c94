"""`python -m lilou`: the `lilou` command (for containers that call the module, not the console script)."""
from lilou.cli import entry

if __name__ == "__main__":
    entry()
