"""Build-time generators of the documentation site (mkdocs hooks); not part of the package."""
