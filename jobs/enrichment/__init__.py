"""Enrichment of the flows and queries tables, and client-address pseudonyms."""
