"""What reads the dataset: the DuckDB database, stats, the weekly report, plots, Zeek export."""
