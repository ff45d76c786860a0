"""The stored dataset: staged commit, ledger of processed inputs, retention, storage paths."""
