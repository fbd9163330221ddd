"""One module per file format. The registry of readers is in tscope.ingest.registry."""
