"""Package discovery lives here because pyproject.toml cannot add a mapped package to `packages.find` (whose
default, namespaces and "lilou*", this repeats). The trained checkpoints stay at the repository's `checkpoints/`
(tests, docs, scripts and the Makefile name that path) and travel in the wheel as the package
`lilou._shipped_checkpoints`; lilou.checkpoints.SHIPPED_ROOT finds either. The documents that messages cite
(`docs/*.md`) travel the same way as `lilou._docs` (lilou.docs.doc names either copy): one file in git, one in the
wheel."""
from setuptools import find_namespace_packages, setup

SHIPPED = "lilou._shipped_checkpoints"
DOCS = "lilou._docs"
# each checkpoint folder is a (data-only) package too, or setuptools warns that it "would be ignored"
setup(
    packages=[*find_namespace_packages(include=["lilou*"]), SHIPPED, DOCS,
              *(f"{SHIPPED}.{name}" for name in find_namespace_packages(where="checkpoints"))],
    package_dir={SHIPPED: "checkpoints", DOCS: "docs"},
)
