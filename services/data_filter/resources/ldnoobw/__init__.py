"""LDNOOBW word lists, one <lang>.txt per language (see SOURCE.md, LICENSE.txt: CC-BY-4.0)."""
