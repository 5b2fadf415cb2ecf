"""Advice on cluster keys from the queries Spark logged (docs/advise.md): their filters, the scans, the layouts
they would read and the ranking. Pure."""
