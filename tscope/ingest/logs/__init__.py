"""What the log readers share: canonical metric names (names.py), metric tables in CSV, TSV and
JSON (tabular.py, csv_arrow.py, json_lines_shape.py) and what their cells mean (table_cells.py),
which column is what (table_columns.py), and the cap on the series one case considers
(series_cap.py)."""
