"""Data files shipped with the data filter (word lists); a package so wheels include them."""
