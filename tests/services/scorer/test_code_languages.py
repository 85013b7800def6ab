"""Comments, documentation and names count in every language the scorer meets, not only Python and Go:
the lexer tells each language's comments from its code and strings, the oracle rewards them, and an
obfuscated copy (comments stripped, names mangled) loses score whatever its language or naming scheme."""

from __future__ import annotations

import random

import pytest

from services.scorer.degrade import obfuscate, rename_identifiers, strip_comments
from services.scorer.oracle.code_lexer import code_language, lex
from services.scorer.oracle.code_signals import code_scores, code_signals
from services.scorer.shipped_code import SHIPPED_CODE, shipped_code

PERL = """package Inventory::Shelf;
use strict;
use warnings;

# Count the items on a shelf that are still in stock.
sub count_in_stock {
    my ($self, %options) = @_;
    my $total = 0;
    warn "shelf $self->{name} holds nothing # yet\n" unless @{ $self->{items} };
    for my $item (@{ $self->{items} }) {
        next unless $item->{quantity} > 0;   # sold-out items do not count
        $total += $item->{quantity};
    }
    return $total;
}

1;

=head1 NAME

Inventory::Shelf - what a shelf holds and how much of it is left

=cut
"""
JAVASCRIPT = """'use strict'
const path = require('node:path')

/**
 * Resolve a package folder relative to the project root.
 * @param {string} projectRoot - where package.json lives
 */
function resolvePackageFolder (projectRoot, packageName) {
  // scoped packages keep their scope as a folder
  const folder = path.join(projectRoot, 'node_modules', packageName)
  return folder.replace(/\\\\/g, '/')
}

module.exports = { resolvePackageFolder }
"""
C = """#include <stdio.h>
#include <stdlib.h>

/* Read a whole file into memory; the caller frees the buffer. */
static char *read_whole_file(const char *file_name, size_t *length)
{
    FILE *stream = fopen(file_name, "rb");
    if (stream == NULL)
        return NULL;
    fseek(stream, 0, SEEK_END);
    long file_size = ftell(stream);  // bytes in the file
    rewind(stream);
    char *buffer = malloc(file_size + 1);
    *length = fread(buffer, 1, file_size, stream);
    fclose(stream);
    return buffer;
}
"""
SHELL = """#!/bin/sh
# Remove build folders older than a week.
build_root="${1:-/var/tmp/builds}"
if [ -d "$build_root" ]; then
    # -mtime +7: last changed more than seven days ago
    find "$build_root" -maxdepth 1 -type d -mtime +7 -exec rm -rf {} +
fi
"""
SOURCES = {"perl": PERL, "javascript": JAVASCRIPT, "c": C, "shell": SHELL}


@pytest.mark.parametrize("lang", list(SOURCES))
def test_each_language_is_told_and_its_comments_are_lexed_as_comments(lang):
    text = SOURCES[lang]
    assert code_language(text) == lang
    tokens = lex(text, lang)
    assert "".join(text[t.start:t.end] for t in tokens) == text  # the tokens cover the file, in order
    prose = " ".join(text[t.start:t.end] for t in tokens if t.kind in ("comment", "doc"))
    code = " ".join(text[t.start:t.end] for t in tokens if t.kind == "code")
    assert prose and "sold-out" not in code and "seven days" not in code and "whole file" not in code
    assert code_signals(text).comments > 0.1


def test_perl_pod_and_jsdoc_are_documentation_and_strings_are_not_comments():
    perl = lex(PERL, "perl")
    assert any(t.kind == "doc" and PERL[t.start:t.end].startswith("=head1") for t in perl)
    js = lex(JAVASCRIPT, "javascript")
    assert any(t.kind == "doc" and "@param" in JAVASCRIPT[t.start:t.end] for t in js)
    assert any(t.kind == "string" and "node_modules" in JAVASCRIPT[t.start:t.end] for t in js)
    assert code_signals(PERL).docstrings >= 2 and code_signals(JAVASCRIPT).docstrings >= 1


@pytest.mark.parametrize("lang", list(SOURCES))
def test_stripping_comments_keeps_code_and_strings_byte_for_byte(lang):
    text = SOURCES[lang]
    bare = strip_comments(text)
    assert code_signals(bare).comments == 0 and code_signals(bare).docstrings == 0
    strings = [text[t.start:t.end] for t in lex(text, lang) if t.kind == "string"]
    assert strings and all(s in bare for s in strings)


@pytest.mark.parametrize("lang", list(SOURCES))
def test_renaming_is_consistent_and_leaves_keywords_members_and_strings(lang):
    text = SOURCES[lang]
    for seed in range(3):  # three naming schemes
        renamed = rename_identifiers(text, random.Random(seed))
        assert renamed != text and code_signals(renamed).identifier_quality < 0.3
        assert lex(renamed, lang)[-1].kind == lex(text, lang)[-1].kind
    js = rename_identifiers(JAVASCRIPT, random.Random(0))
    assert "path.join(" not in js and ".join(" in js and "'node_modules'" in js and "function " in js
    perl = rename_identifiers(PERL, random.Random(0))
    assert "->{quantity}" in perl and "my (" in perl


def test_naming_schemes_differ_by_seed():
    import re

    names = [re.search(r"static char \*(\w+)\(", rename_identifiers(C, random.Random(seed))).group(1) for seed in range(12)]
    schemes = {"v-number" if re.fullmatch(r"v\d+", n) else "hex" if n.startswith("_0x") else "letters" for n in names}
    assert schemes == {"v-number", "hex", "letters"} and all(re.fullmatch(r"v\d+|_0x[0-9a-f]+|[a-z]{1,2}", n) for n in names)


@pytest.mark.parametrize("lang", list(SOURCES))
def test_each_half_of_the_obfuscation_costs_readability_and_clarity(lang):
    """Comments and names are separate signals: losing either one alone lowers both dimensions."""
    text = SOURCES[lang]
    clean = code_scores(code_signals(text))
    for copy in (strip_comments(text), rename_identifiers(text, random.Random(1)), obfuscate(text, random.Random(1))):
        worse = code_scores(code_signals(copy))
        assert worse["readability"] < clean["readability"] and worse["clarity"] < clean["clarity"], copy


@pytest.mark.parametrize("group", list(SHIPPED_CODE))
def test_the_oracle_ranks_unseen_shipped_code_above_its_obfuscated_copy(group):
    """On code the demo corpus lacks (what Debian packages ship; skipped where a package is absent)."""
    from services.scorer.oracle.heuristic import HeuristicOracle

    try:
        docs = shipped_code(group, 12, seed=5)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    oracle = HeuristicOracle()
    hits = [sum(oracle.scores(d["text"], "code").values())
            > sum(oracle.scores(obfuscate(d["text"], random.Random(d["id"])), "code").values()) for d in docs]
    assert sum(hits) >= 0.9 * len(hits)
