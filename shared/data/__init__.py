"""Tokenizer, token shards and SeqIO-style mixtures: the bridge from documents to training batches.

- `tokenizer`: train a byte-level BPE or load any tokenizer.json; saved with its config and hash.
- `shards` / `build`: documents (Parquet) → `.bin` + `.idx` + `manifest.json`, built with Ray Data.
- `schedule` / `source` / `mixture`: deterministic, resumable, rate-preserving mixtures.
- `loader`: `(inputs_BT, targets_BT, doc_ids_BT)` batches per data-parallel rank.

Import the submodules directly (`from shared.data.mixture import Mixture`); this package keeps its
own import light so that config loading never pulls in torch or Ray.
"""
