"""Versioned prompt templates (`<rubric>_v<version>.txt`); a package so wheels ship the .txt files."""
